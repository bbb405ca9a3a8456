"""A CPU-backed stand-in for torch_xla, for accel-tpu's and io-xla's tests only.

It implements just the API surface those packages use, with torch_xla's names and signatures:
every XLA device is the CPU, the processes that ``xmp.spawn`` starts talk through a gloo process
group, and the runtime refuses to spawn once a device or a rank was asked for in the launching
process (as torch_xla does). ``FAKE_XLA_CHIPS`` sets the number of TPU chips on the PCI bus.
"""

from __future__ import annotations

import torch

from torch_xla import _fake

__version__ = "2.9.0+fake"


def device(index: int | None = None) -> torch.device:
    """This process's XLA device (the CPU here)."""
    _fake.start()
    return _fake.DEVICE


def sync() -> None:
    """Cut the lazy graph and run it (counted)."""
    from torch_xla.core import xla_model

    xla_model.mark_step()
