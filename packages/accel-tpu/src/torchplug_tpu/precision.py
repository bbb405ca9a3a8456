"""XLA precisions: ``xla-32-true``, ``xla-bf16-true``, ``xla-16-true`` and ``xla-bf16-mixed``.

Users write the core's names (``precision="bf16-true"``); the TPU accelerator and the XLA
strategies map them to these (see :data:`XLA_PRECISIONS`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any, ClassVar, Final

import torch
from typing_extensions import override

from torchplug import MisconfigurationError, Precision
from torchplug.precision.half import cast_floating, default_dtype
from torchplug_tpu import _vendor

__all__ = ["XLA_PRECISIONS", "XLAPrecision", "xla_precision_name"]

#: The user's precision name -> the registry name of the XLA precision that implements it.
XLA_PRECISIONS: Final[dict[str, str]] = {
    "32-true": "xla-32-true",
    "bf16-true": "xla-bf16-true",
    "16-true": "xla-16-true",
    "bf16-mixed": "xla-bf16-mixed",
}

_DTYPES: Final = {
    "32-true": torch.float32,
    "bf16-true": torch.bfloat16,
    "16-true": torch.float16,
    "bf16-mixed": torch.bfloat16,
}


def xla_precision_name(precision: str) -> str:
    """The XLA precision for the user's ``precision`` name (an ``xla-*`` name is returned as it is).

    Raises:
        MisconfigurationError: XLA devices cannot train in ``precision``; the message lists the choices.
    """
    if precision in XLA_PRECISIONS.values():
        return precision
    if precision not in XLA_PRECISIONS:
        choices = ", ".join(repr(name) for name in XLA_PRECISIONS)
        raise MisconfigurationError(
            f"precision={precision!r} is not supported on XLA devices (accelerator='tpu'). Choose one of {choices}. "
            "Hint: TPUs compute in bfloat16 natively; precision='bf16-mixed' keeps float32 weights."
        )
    return XLA_PRECISIONS[precision]


class XLAPrecision(Precision):
    """The numerics of training on XLA devices.

    * ``32-true``: float32 everywhere.
    * ``bf16-true`` and ``16-true``: the module's floating-point parameters and buffers, the
      inputs and the default dtype are 16 bits (as the core's ``HalfPrecision``). This is what
      torch_xla recommends since it deprecated ``XLA_USE_BF16``/``XLA_USE_F16``: those
      variables change every float tensor of the process, these plugins only the model's.
    * ``bf16-mixed``: float32 weights, the forward pass under ``torch_xla.amp.autocast`` in
      bfloat16 (no loss scaler is needed in bfloat16).

    The gradient all-reduce and the device step (``torch_xla.sync``) belong to the XLA strategies,
    not to the precision, so that clipping and the ``on_before_optimizer_step`` hooks see
    gradients already averaged over the replicas (see the package README).

    Args:
        precision: ``"32-true"``, ``"bf16-true"``, ``"16-true"`` or ``"bf16-mixed"``, or the same
            with the ``xla-`` prefix.

    Raises:
        MisconfigurationError: ``precision`` is another value; the message lists the valid ones.
    """

    name: ClassVar[str] = "xla-32-true"

    def __init__(self, precision: str = "32-true") -> None:
        plain = precision.removeprefix("xla-")
        if plain not in _DTYPES:
            choices = ", ".join(repr(name) for name in _DTYPES)
            raise MisconfigurationError(f"precision={precision!r} is not supported by XLAPrecision; choose {choices}.")
        self.precision: str = plain
        self.dtype: torch.dtype = _DTYPES[plain]

    @property
    def _true_half(self) -> bool:
        return self.precision in ("bf16-true", "16-true")

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast the module to :attr:`dtype` for ``bf16-true`` and ``16-true``; leave it as it is otherwise."""
        return module.to(dtype=self.dtype) if self._true_half else module

    @contextlib.contextmanager
    @override
    def tensor_init_context(self) -> Generator[None, None, None]:
        """For the ``*-true`` halves, make :attr:`dtype` the default dtype inside the block."""
        if self._true_half:
            with default_dtype(self.dtype):
                yield
        else:
            yield

    @override
    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """The default dtype for the ``*-true`` halves; ``torch_xla.amp.autocast`` for ``bf16-mixed``."""
        if self._true_half:
            return default_dtype(self.dtype)
        if self.precision == "bf16-mixed":
            amp = _vendor.import_xla("torch_xla.amp")
            return amp.autocast(_vendor.device(), dtype=torch.bfloat16)  # type: ignore[no-any-return]
        return contextlib.nullcontext()

    @override
    def convert_input(self, data: Any) -> Any:
        """Cast floating-point inputs to :attr:`dtype` for the ``*-true`` halves."""
        return cast_floating(data, self.dtype) if self._true_half else data

    @override
    def convert_output(self, data: Any) -> Any:
        """Cast floating-point outputs back to float32 (except in ``32-true``, where they are already)."""
        return data if self.precision == "32-true" else cast_floating(data, torch.float32)

    @override
    def __repr__(self) -> str:
        return f"XLAPrecision(precision={self.precision!r})"
