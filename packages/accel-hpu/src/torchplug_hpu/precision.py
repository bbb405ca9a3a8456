"""HPU precisions: ``hpu-bf16-mixed`` (bfloat16 autocast on the HPU) and ``hpu-fp8`` (Intel Gaudi's transformer engine).

Users write ``precision="bf16-mixed"`` or ``precision="fp8"``; the HPU accelerator and strategies
map them here (see :data:`HPU_PRECISIONS`). ``"32-true"`` and ``"bf16-true"`` stay the core's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator, Mapping
from typing import Any, ClassVar, Final

import torch
from typing_extensions import override

from torchplug import MisconfigurationError, Precision
from torchplug.precision.half import cast_floating
from torchplug_hpu import _vendor

__all__ = ["HPU_PRECISIONS", "HPUPrecision", "hpu_precision_name"]

#: The user's precision name -> the registry name of the precision that implements it on HPUs.
HPU_PRECISIONS: Final[dict[str, str]] = {
    "32-true": "32-true",
    "bf16-true": "bf16-true",
    "bf16-mixed": "hpu-bf16-mixed",
    "fp8": "hpu-fp8",
}

_WHY_NOT: Final = {
    "16-mixed": "Gaudi trains in bfloat16, which needs no loss scaler: use precision='bf16-mixed'",
    "16-true": "Gaudi trains in bfloat16: use precision='bf16-true'",
    "64-true": "HPUs have no float64",
}


def hpu_precision_name(precision: str) -> str:
    """The HPU precision for the user's ``precision`` name (a name already mapped is returned as it is).

    Raises:
        MisconfigurationError: HPUs cannot train in ``precision``; the message lists the choices.
    """
    if precision in HPU_PRECISIONS.values():
        return precision
    if precision not in HPU_PRECISIONS:
        choices = ", ".join(repr(name) for name in HPU_PRECISIONS)
        why = _WHY_NOT.get(precision, "it has no HPU implementation")
        raise MisconfigurationError(
            f"precision={precision!r} is not supported on HPUs (accelerator='hpu'): {why}. Choose one of {choices}."
        )
    return HPU_PRECISIONS[precision]


class HPUPrecision(Precision):
    """Mixed precision on Intel Gaudi: float32 weights, bfloat16 (and fp8) compute.

    * ``bf16-mixed``: the step runs under ``torch.autocast("hpu", dtype=torch.bfloat16)``; no
      loss scaler is needed in bfloat16.
    * ``fp8``: the same autocast, with Intel Gaudi's transformer engine
      (``habana_frameworks.torch.hpex.experimental.transformer_engine``) nested inside:
      ``torch.nn.Linear`` layers are replaced by the engine's ``Linear`` (their weights copied,
      unlike lightning-habana, which re-initialised them) and run in fp8 under ``fp8_autocast``;
      the rest stays in bfloat16. A model that already holds transformer-engine layers is left as
      it is. Needs a habana_frameworks with the transformer engine and a Gaudi2 or newer: the
      plugin refuses to be created otherwise, with the reason.

    Args:
        precision: ``"bf16-mixed"`` or ``"fp8"`` (with or without the ``hpu-`` prefix).
        recipe: For fp8, the engine's scaling recipe (a ``DelayedScaling``, or a mapping of its
            arguments); None for the engine's default.
        replace_layers: For fp8, replace ``torch.nn.Linear`` layers by the engine's.

    Raises:
        MisconfigurationError: ``precision`` is another value.
        PluginUnavailableError: fp8 on a machine or library without it (a ``HabanaUnavailableError``
            when the library or its transformer engine is missing); the message says why.
    """

    name: ClassVar[str] = "hpu-bf16-mixed"

    def __init__(self, precision: str = "bf16-mixed", recipe: Any | None = None, replace_layers: bool = True) -> None:
        plain = precision.removeprefix("hpu-")
        if plain not in ("bf16-mixed", "fp8"):
            raise MisconfigurationError(
                f"precision={precision!r} is not supported by HPUPrecision; choose 'bf16-mixed' or 'fp8'."
            )
        if plain != "fp8" and recipe is not None:
            raise MisconfigurationError(f"recipe= is for precision='fp8', not {precision!r}. Hint: drop recipe=.")
        if plain == "fp8":
            _vendor.require_fp8()
        self.precision: str = plain
        self.replace_layers = replace_layers
        self._recipe_arg = recipe
        self._recipe: Any | None = None

    @property
    def recipe(self) -> Any | None:
        """The fp8 scaling recipe given to ``fp8_autocast`` (a mapping becomes a ``DelayedScaling``)."""
        if self._recipe is None and isinstance(self._recipe_arg, Mapping):
            engine = _vendor.transformer_engine()
            self._recipe = engine.recipe.DelayedScaling(**self._recipe_arg)
        return self._recipe if self._recipe is not None else self._recipe_arg

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """For fp8, replace ``torch.nn.Linear`` layers by the transformer engine's, keeping their weights."""
        if self.precision != "fp8" or not self.replace_layers:
            return module
        engine = _vendor.transformer_engine()
        if any(type(m).__module__.startswith(_vendor.FP8_MODULE) for m in module.modules()):
            return module  # the user placed the engine's layers already
        _replace_linear(module, engine)
        return module

    @override
    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast("hpu", bfloat16)``; for fp8, with the engine's ``fp8_autocast`` inside it."""
        return self._autocast()

    @contextlib.contextmanager
    def _autocast(self) -> Generator[None, None, None]:
        with torch.autocast(device_type="hpu", dtype=torch.bfloat16):
            if self.precision != "fp8":
                yield
                return
            with _vendor.transformer_engine().fp8_autocast(enabled=True, fp8_recipe=self.recipe):
                yield

    @override
    def convert_output(self, data: Any) -> Any:
        """Cast the bfloat16 tensors of ``data`` (what autocast produced) back to float32."""
        return cast_floating(data, torch.float32)

    @override
    def __repr__(self) -> str:
        return f"HPUPrecision(precision={self.precision!r})"


def _replace_linear(module: torch.nn.Module, engine: Any) -> None:
    for name, child in module.named_children():
        if type(child) is torch.nn.Linear:
            replacement = engine.Linear(child.in_features, child.out_features, bias=child.bias is not None)
            replacement = replacement.to(device=child.weight.device, dtype=child.weight.dtype)
            with torch.no_grad():
                replacement.weight.copy_(child.weight)
                if child.bias is not None:
                    replacement.bias.copy_(child.bias)
            setattr(module, name, replacement)
        else:
            _replace_linear(child, engine)
