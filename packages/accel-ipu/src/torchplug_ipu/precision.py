"""IPU precisions: ``ipu-32-true``, ``ipu-16-mixed`` and ``ipu-16-true``.

Users write the core's names (``precision="16-true"``); the IPU accelerator and strategy map them
to these (see :data:`IPU_PRECISIONS`). The steps run inside PopTorch's compiled graph, so the
forward context below applies while PopTorch compiles them, and the PopTorch options that the
numerics need are set by :meth:`IPUPrecision.configure_options`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator
from typing import Any, ClassVar, Final

import torch
from torch.optim import Optimizer
from typing_extensions import override

from torchplug import MisconfigurationError, Precision
from torchplug.precision.half import cast_floating, default_dtype
from torchplug_ipu import _vendor

__all__ = ["IPU_PRECISIONS", "NO_CLIPPING", "IPUPrecision", "ipu_precision_name"]

#: The user's precision name -> the registry name of the IPU precision that implements it.
IPU_PRECISIONS: Final[dict[str, str]] = {
    "32-true": "ipu-32-true",
    "16-mixed": "ipu-16-mixed",
    "16-true": "ipu-16-true",
}

#: Why the Trainer cannot clip gradients on IPUs, and what to do instead.
NO_CLIPPING: Final = (
    "gradient_clip_val is not supported on IPUs: the gradients never leave the IPU. "
    "Hint: drop gradient_clip_val=, or use poptorch.optim.LAMB(..., max_weight_norm=...)."
)


def ipu_precision_name(precision: str) -> str:
    """The IPU precision for the user's ``precision`` name (an ``ipu-*`` name is returned as it is).

    Raises:
        MisconfigurationError: IPUs cannot train in ``precision``; the message lists the choices.
    """
    if precision in IPU_PRECISIONS.values():
        return precision
    if precision not in IPU_PRECISIONS:
        choices = ", ".join(repr(name) for name in IPU_PRECISIONS)
        why = "IPUs have no bfloat16" if "bf16" in precision else "IPUs compute in float32 and float16 only"
        raise MisconfigurationError(
            f"precision={precision!r} is not supported on IPUs (accelerator='ipu'): {why}. Choose one of {choices}."
        )
    return IPU_PRECISIONS[precision]


class IPUPrecision(Precision):
    """The numerics of training on IPUs, as Graphcore recommends them.

    * ``32-true``: float32 everywhere.
    * ``16-mixed``: the weights stay float32 (they are the master copy the on-device optimizer
      updates), floating-point inputs are cast to float16 on the host (half the host-to-IPU
      traffic), and the step runs in a ``poptorch.autocast`` region, where matrix products and
      convolutions compute in float16; their partial sums are float32. Needs a poptorch that
      offers ``poptorch.autocast``: the options are refused otherwise, before anything compiles.
    * ``16-true``: weights, inputs and activations are float16 (``module.half()``), partial sums
      float32, and stochastic rounding is on while training: the IPU's hardware substitute for
      float32 master weights, so that small updates are not rounded away.

    Loss scaling on IPUs belongs to PopTorch's optimizers: return for example
    ``poptorch.optim.SGD(params, lr=..., loss_scaling=1024)`` from ``configure_optimizers``.
    Gradient clipping through the Trainer is not available (the gradients never leave the IPU);
    ``poptorch.optim.LAMB`` has ``max_weight_norm``.

    Args:
        precision: ``"32-true"``, ``"16-mixed"`` or ``"16-true"``, or the same with the ``ipu-`` prefix.

    Raises:
        MisconfigurationError: ``precision`` is another value; the message lists the valid ones.
    """

    name: ClassVar[str] = "ipu-32-true"

    def __init__(self, precision: str = "32-true") -> None:
        plain = precision.removeprefix("ipu-")
        if plain not in IPU_PRECISIONS:
            choices = ", ".join(repr(name) for name in IPU_PRECISIONS)
            raise MisconfigurationError(f"precision={precision!r} is not supported by IPUPrecision; choose {choices}.")
        self.precision: str = plain

    @property
    def _half(self) -> bool:
        return self.precision != "32-true"

    # -- PopTorch's side ----------------------------------------------------------------------

    def configure_options(self, options: Any, training: bool) -> None:
        """Set what these numerics need on ``options`` (a ``poptorch.Options``), before anything compiles.

        Raises:
            MisconfigurationError: ``16-mixed`` with a poptorch that has no ``poptorch.autocast``.
        """
        if not self._half:
            return
        if self.precision == "16-mixed" and not hasattr(_vendor.import_poptorch(), "autocast"):
            raise MisconfigurationError(
                "precision='16-mixed' on IPUs runs the step in a poptorch.autocast region, which the installed "
                "poptorch does not offer. Hint: use precision='16-true' (float16 weights with stochastic rounding, "
                "Graphcore's recipe) or '32-true'."
            )
        options.Precision.setPartialsType(torch.float32)
        if self.precision == "16-true" and training:
            options.Precision.enableStochasticRounding(True)

    # -- creating and converting --------------------------------------------------------------

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Cast the module to float16 for ``16-true``; keep its float32 weights otherwise."""
        return module.half() if self.precision == "16-true" else module

    @contextlib.contextmanager
    @override
    def tensor_init_context(self) -> Generator[None, None, None]:
        """For ``16-true``, make float16 the default dtype inside the block."""
        if self.precision == "16-true":
            with default_dtype(torch.float16):
                yield
        else:
            yield

    @override
    def convert_input(self, data: Any) -> Any:
        """Cast floating-point inputs to float16 on the host for ``16-mixed`` and ``16-true``."""
        return cast_floating(data, torch.float16) if self._half else data

    @override
    def convert_output(self, data: Any) -> Any:
        """Cast floating-point outputs back to float32."""
        return cast_floating(data, torch.float32) if self._half else data

    # -- forward --------------------------------------------------------------------------------

    @override
    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """Float16 as default dtype for ``16-true``; a ``poptorch.autocast`` region for ``16-mixed``.

        Entered inside the step that PopTorch compiles, so it shapes the compiled graph.
        """
        if self.precision == "16-true":
            return default_dtype(torch.float16)
        if self.precision == "16-mixed":
            return _vendor.import_poptorch().autocast()  # type: ignore[no-any-return]
        return contextlib.nullcontext()

    # -- what happens on the IPU ------------------------------------------------------------------

    @override
    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str = "norm") -> None:
        """Refuse: the gradients live on the IPU, inside the compiled step.

        Raises:
            MisconfigurationError: Always, with the alternative.
        """
        raise MisconfigurationError(NO_CLIPPING)

    @override
    def __repr__(self) -> str:
        return f"IPUPrecision(precision={self.precision!r})"
