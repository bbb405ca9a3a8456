"""Double precision (``64-true``): weights, inputs and compute in float64."""

from __future__ import annotations

from typing import ClassVar

import torch

from torchplug.precision.half import _WholeDtypePrecision

__all__ = ["DoublePrecision"]


class DoublePrecision(_WholeDtypePrecision):
    """Train in float64: for numerically delicate models (scientific computing, gradient checks).

    Twice the memory of float32 and much slower on most accelerators, which is why it is never the
    default. It works like :class:`~torchplug.precision.half.HalfPrecision` with float64:

    * :meth:`convert_module` casts the module to float64.
    * :meth:`tensor_init_context`, :meth:`module_init_context` and :meth:`forward_context` make
      float64 torch's default dtype while they are open (restored on exit, even on error).
    * :meth:`convert_input` casts the batch's floating-point tensors to float64;
      :meth:`convert_output` casts floating-point outputs back to float32.
    """

    name: ClassVar[str] = "64-true"

    #: The dtype of the parameters, inputs and activations.
    dtype: torch.dtype = torch.float64
