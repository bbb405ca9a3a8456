"""True half precision (``16-true``, ``bf16-true``): weights, activations and gradients in 16 bits."""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any, ClassVar, Final

import torch
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.precision.precision import Precision
from torchplug.utilities.apply import apply_to_tensors

__all__ = ["HalfPrecision", "cast_floating", "default_dtype"]

_DTYPES: Final = {"16-true": torch.float16, "bf16-true": torch.bfloat16}


class _WholeDtypePrecision(Precision):
    """A precision that keeps everything in one floating-point :attr:`dtype` (the ``*-true`` precisions)."""

    #: The dtype of the parameters, inputs and activations.
    dtype: torch.dtype

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast the module's floating-point parameters and buffers to :attr:`dtype`."""
        return module.to(dtype=self.dtype)

    @contextlib.contextmanager
    @override
    def tensor_init_context(self) -> Generator[None, None, None]:
        """Make :attr:`dtype` the default dtype inside the block (restored on exit, even on error)."""
        with default_dtype(self.dtype):
            yield

    @override
    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Make :attr:`dtype` the default dtype while the step runs, so tensors it creates match the weights."""
        return default_dtype(self.dtype)

    @override
    def convert_input(self, data: Any) -> Any:
        """Cast the floating-point tensors of ``data`` (nested lists, tuples, dicts, dataclasses) to :attr:`dtype`."""
        return cast_floating(data, self.dtype)

    @override
    def convert_output(self, data: Any) -> Any:
        """Cast the floating-point tensors of ``data`` back to float32."""
        return cast_floating(data, torch.float32)


class HalfPrecision(_WholeDtypePrecision):
    """Train with every floating-point parameter, buffer, input and activation in 16 bits.

    Halves the memory of the weights and of the optimizer state, at the cost of accuracy: there
    are no float32 master weights and no loss scaling, so small updates can round away. Prefer
    ``bf16-true`` (float32's range) over ``16-true`` (float16 overflows above 65504), and
    ``*-mixed`` where the memory allows it.

    What it changes, as a model for a vendor's own precision plugin:

    * :meth:`convert_module` casts the module (``module.to(dtype)``).
    * :meth:`tensor_init_context`, :meth:`module_init_context` and :meth:`forward_context` make
      ``dtype`` torch's default dtype while they are open, and restore the previous one on exit,
      even when the block raises.
    * :meth:`convert_input` casts the batch's floating-point tensors to ``dtype`` (integer tensors
      such as class labels keep theirs); :meth:`convert_output` casts floating-point outputs back
      to float32.

    Args:
        precision: ``"16-true"`` (float16) or ``"bf16-true"`` (bfloat16).

    Raises:
        MisconfigurationError: ``precision`` is another value; the message lists the valid ones.
    """

    name: ClassVar[str] = "16-true"

    def __init__(self, precision: str = "16-true") -> None:
        dtype = _DTYPES.get(precision)
        if dtype is None:
            raise MisconfigurationError(
                f"precision={precision!r} is not supported by {type(self).__name__}; choose {_choices(_DTYPES)}."
            )
        self.precision: str = precision
        self.dtype: torch.dtype = dtype

    @override
    def __repr__(self) -> str:
        return f"{type(self).__name__}(precision={self.precision!r})"


@contextlib.contextmanager
def default_dtype(dtype: torch.dtype) -> Generator[None, None, None]:
    """Make ``dtype`` torch's default floating-point dtype inside the block, then restore the previous one.

    Shared by the precision plugins that change the default dtype; the default dtype is global to
    the process, so the block should not span work on other threads.
    """
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def cast_floating(data: Any, dtype: torch.dtype) -> Any:
    """Return ``data`` with every floating-point tensor cast to ``dtype``; other tensors and values as they are."""
    return apply_to_tensors(data, lambda t: t.to(dtype) if t.is_floating_point() else t)


def _choices(names: Any) -> str:
    quoted = [repr(name) for name in names]
    return ", ".join(quoted[:-1]) + f" or {quoted[-1]}" if len(quoted) > 1 else quoted[0]
