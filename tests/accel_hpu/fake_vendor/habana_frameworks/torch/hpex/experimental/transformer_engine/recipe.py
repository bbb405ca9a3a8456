"""The transformer engine's scaling recipes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class DelayedScaling:
    margin: int = 0
    interval: int = 1
    amax_history_len: int = 1024
