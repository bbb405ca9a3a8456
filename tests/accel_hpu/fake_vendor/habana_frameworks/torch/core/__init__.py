"""habana_frameworks.torch.core: ``mark_step`` runs the recorded (lazy-mode) graph; counted here."""

from __future__ import annotations

from habana_frameworks.torch import _fake


def mark_step() -> None:
    _fake.mark_steps += 1


def is_lazy() -> bool:
    return True
