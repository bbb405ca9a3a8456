"""Double precision (``64-true``): weights, inputs and compute in float64."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any, ClassVar

import torch

from torchplug.precision.half import cast_floating, default_dtype
from torchplug.precision.precision import Precision

__all__ = ["DoublePrecision"]


class DoublePrecision(Precision):
    """Train in float64: for numerically delicate models (scientific computing, gradient checks).

    Twice the memory of float32 and much slower on most accelerators, which is why it is never the
    default. It works like :class:`~torchplug.precision.half.HalfPrecision` with float64:

    * :meth:`convert_module` calls ``module.double()``.
    * :meth:`tensor_init_context`, :meth:`module_init_context` and :meth:`forward_context` make
      float64 torch's default dtype while they are open (restored on exit, even on error).
    * :meth:`convert_input` casts the batch's floating-point tensors to float64;
      :meth:`convert_output` casts floating-point outputs back to float32, as Lightning does.
    """

    name: ClassVar[str] = "64-true"

    #: The dtype of the parameters, inputs and activations.
    dtype: ClassVar[torch.dtype] = torch.float64

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast the module's floating-point parameters and buffers to float64."""
        return module.double()

    @contextlib.contextmanager
    def tensor_init_context(self) -> Generator[None, None, None]:
        """Make float64 the default dtype inside the block (restored on exit, even on error)."""
        with default_dtype(self.dtype):
            yield

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Make float64 the default dtype while the step runs, so tensors it creates match the weights."""
        return default_dtype(self.dtype)

    def convert_input(self, data: Any) -> Any:
        """Cast the floating-point tensors of ``data`` (nested lists, tuples, dicts, dataclasses) to float64."""
        return cast_floating(data, self.dtype)

    def convert_output(self, data: Any) -> Any:
        """Cast the floating-point tensors of ``data`` back to float32."""
        return cast_floating(data, torch.float32)
