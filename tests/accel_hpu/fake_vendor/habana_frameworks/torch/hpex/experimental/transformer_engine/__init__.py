"""habana_frameworks.torch.hpex.experimental.transformer_engine: fp8 ``Linear`` and ``fp8_autocast``.

With ``FAKE_HABANA_NO_FP8=1`` this module does not exist (a release without fp8).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Generator
from typing import Any

import torch

from habana_frameworks.torch import _fake

if os.environ.get("FAKE_HABANA_NO_FP8"):
    raise ModuleNotFoundError(f"No module named {__name__!r}", name=__name__)

from habana_frameworks.torch.hpex.experimental.transformer_engine import recipe


class Linear(torch.nn.Linear):
    """A Linear layer that runs in fp8 inside ``fp8_autocast`` (counted here; computed in float32)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if _fake.fp8_enabled:
            _fake.fp8_forwards += 1
        return super().forward(input)


@contextlib.contextmanager
def fp8_autocast(enabled: bool = True, fp8_recipe: Any = None) -> Generator[None, None, None]:
    previous = _fake.fp8_enabled
    _fake.fp8_enabled = enabled
    _fake.fp8_recipes.append(fp8_recipe)
    try:
        yield
    finally:
        _fake.fp8_enabled = previous


__all__ = ["Linear", "fp8_autocast", "recipe"]
