"""A CPU-backed stand-in for poptorch, for accel-ipu's tests only.

It implements just the API surface accel-ipu uses, with poptorch's names and signatures:
``Options`` (frozen once a DataLoader uses them), ``DataLoader`` (combined batches),
``trainingModel``/``inferenceModel`` (see :mod:`poptorch._executor`), ``identity_loss``,
``autocast`` and ``ipuHardwareIsAvailable``. ``FAKE_IPU_COUNT`` sets the IPUs of the machine
(default 4); ``FAKE_POPTORCH_NO_AUTOCAST=1`` makes it a poptorch without ``autocast``.

Unlike real PopTorch, a compiled model runs its Python forward on every call (PopTorch runs it
once, while compiling); the numerics (micro-batches, accumulation, replicas, on-device weights
and optimizer) follow PopTorch's.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from poptorch import _fake
from poptorch._dataloader import DataLoader
from poptorch._executor import PoplarExecutor
from poptorch._options import Options

__version__ = "3.4.0+fake"

__all__ = [
    "DataLoader",
    "Options",
    "PoplarExecutor",
    "identity_loss",
    "inferenceModel",
    "ipuHardwareIsAvailable",
    "trainingModel",
]


def ipuHardwareIsAvailable(num_ipus: int = 1) -> bool:
    """Whether the machine has ``num_ipus`` IPUs."""
    return 1 <= num_ipus <= _fake.ipus()


def trainingModel(
    model: torch.nn.Module, options: Options | None = None, optimizer: torch.optim.Optimizer | None = None
) -> PoplarExecutor:
    """A model whose call runs forward, backward and the optimizer step on the (fake) IPUs."""
    _fake.record("trainingModel")
    return PoplarExecutor(model, options, training=True, optimizer=optimizer)


def inferenceModel(model: torch.nn.Module, options: Options | None = None) -> PoplarExecutor:
    """A model whose call runs the forward pass on the (fake) IPUs."""
    _fake.record("inferenceModel")
    return PoplarExecutor(model, options, training=False)


def identity_loss(x: torch.Tensor, reduction: str) -> torch.Tensor:
    """Mark ``x`` as the loss PopTorch differentiates (``reduction``: ``"sum"``, ``"mean"`` or ``"none"``)."""
    if reduction not in ("sum", "mean", "none"):
        raise ValueError(f"reduction must be 'sum', 'mean' or 'none', not {reduction!r}")
    loss = x.sum() if reduction == "sum" else x.mean() if reduction == "mean" else x
    _fake.loss = loss
    return loss


if not os.environ.get("FAKE_POPTORCH_NO_AUTOCAST"):

    class autocast:
        """A region where matrix products compute in float16 (CPU autocast to float16 here)."""

        def __init__(self, enabled: bool = True) -> None:
            self._region = torch.autocast("cpu", dtype=torch.float16, enabled=enabled)

        def __enter__(self) -> None:
            _fake.autocast_regions += 1
            self._region.__enter__()

        def __exit__(self, *exc: Any) -> None:
            self._region.__exit__(*exc)

    __all__ += ["autocast"]
