"""torch_xla.amp: autocast on an XLA device (CPU autocast here, so the tests see bfloat16 compute)."""

from __future__ import annotations

import torch

from torch_xla import _fake


class autocast(torch.autocast):
    def __init__(
        self, device: torch.device, enabled: bool = True, dtype: torch.dtype | None = None, cache_enabled: bool = True
    ) -> None:
        _fake.record("amp.autocast")
        super().__init__("cpu", dtype=dtype or torch.bfloat16, enabled=enabled, cache_enabled=cache_enabled)
