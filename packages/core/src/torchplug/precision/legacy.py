"""The Apex and "sharded" precision plugins of the original plugin documentation, and what each is now.

NVIDIA deprecated Apex AMP in favour of torch's native AMP (``torch.autocast`` and
``torch.amp.GradScaler``), and fairscale's sharded training became torch's FSDP. Each old name (and
old class) either builds its native equivalent, with a note said once per process naming exactly
what it maps to, or, where no faithful equivalent exists, raises an error naming the replacement:

=====================================  =======================================================================
old                                    now
=====================================  =======================================================================
Apex O0 (``apex-o0``)                  ``32-true``: float32 throughout, as O0 was
Apex O1 (``apex``, ``apex-o1``)        ``16-mixed``: float16 autocast, dynamic loss scaling, float32 weights
Apex O2 (``apex-o2``)                  an error: float16 weights with float32 master copies in the optimizer
                                       have no native equivalent; use ``16-mixed`` or ``16-true``
Apex O3 (``apex-o3``)                  ``16-true``: float16 weights and compute, no loss scaling, as O3 was
``ShardedNativeMixedPrecision``        ``16-mixed`` (``sharded-16-mixed``); shard with ``strategy="fsdp"``
``FullyShardedNativeMixedPrecision``   ``16-mixed`` (``fully-sharded-16-mixed``) under ``strategy="fsdp"``
=====================================  =======================================================================

The classes are thin aliases: calling one returns the native plugin (``MixedPrecision``,
``HalfPrecision`` or ``Precision``), so the Trainer and the checkpoints only ever see those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from torchplug._errors import MisconfigurationError
from torchplug.precision.precision import Precision
from torchplug.utilities.warn import warn_once

if TYPE_CHECKING:
    from torch.amp import GradScaler

__all__ = [
    "ApexMixedPrecision",
    "FullyShardedNativeMixedPrecision",
    "LegacyPrecisionWarning",
    "ShardedNativeMixedPrecision",
]

_APEX: Final = "NVIDIA Apex AMP (deprecated by NVIDIA for torch's native AMP)"

#: Apex opt level -> (the native precision, what it does), for the levels with a faithful equivalent.
_APEX_LEVELS: Final = {
    "O0": ("32-true", "float32 weights and compute, as O0 was"),
    "O1": ("16-mixed", "float16 torch.autocast with a torch.amp.GradScaler (dynamic loss scaling), float32 weights"),
    "O3": ("16-true", "float16 weights and compute without loss scaling, as O3 was"),
}

_APEX_O2: Final = (
    f"{_APEX} at opt level O2 kept float16 weights with float32 master copies in the optimizer (batch norm in "
    "float32). torch has no native equivalent of that, so it cannot run faithfully here. Hint: use "
    "precision='16-mixed' (float32 weights, float16 autocast, dynamic loss scaling: what NVIDIA recommends "
    "instead of Apex, and what O1 maps to), or precision='16-true' (float16 weights, no master copies: what O3 "
    "maps to)."
)

_SHARDING: Final = {
    "ShardedNativeMixedPrecision": (
        "fairscale's sharded training (ddp_sharded) with native AMP; fairscale's sharding became torch's FSDP",
        "Shard with strategy='fsdp': under FSDP the gradient scaler checks for inf/NaN across all ranks (torch's "
        "DTensor reduces it), as fairscale's ShardedGradScaler did.",
    ),
    "FullyShardedNativeMixedPrecision": (
        "fairscale's fully sharded data parallel with native AMP, which became torch's FSDP",
        "Use it with strategy='fsdp'. For FSDP to also gather the parameters and reduce the gradients in float16, "
        "as fairscale's mixed_precision=True did, give strategy=FSDPStrategy(param_dtype=torch.float16, "
        "reduce_dtype=torch.float16).",
    ),
}


class LegacyPrecisionWarning(UserWarning):
    """An old precision name or class ran as its native equivalent; the message says exactly which."""


def _note_once(message: str) -> None:
    warn_once(message, LegacyPrecisionWarning)


def _mixed_name(precision: str | int) -> str:
    """Lightning 1.x's ``precision=16`` / ``"bf16"`` (and the 2.x names) as a mixed-precision registry name."""
    names = {"16": "16-mixed", "16-mixed": "16-mixed", "bf16": "bf16-mixed", "bf16-mixed": "bf16-mixed"}
    name = names.get(str(precision).lower())
    if name is None:
        raise MisconfigurationError(
            f"precision={precision!r} is not a mixed precision: the sharded precision plugins take 16 "
            "('16-mixed') or 'bf16' ('bf16-mixed')."
        )
    return name


class ApexMixedPrecision(Precision):
    """NVIDIA Apex AMP, by its opt level: builds the native plugin that does what that level did.

    ``ApexMixedPrecision("O1")`` returns ``MixedPrecision("16-mixed")``, ``"O3"`` returns
    ``HalfPrecision("16-true")`` and ``"O0"`` the full-precision ``Precision()``, each with a
    one-time :class:`LegacyPrecisionWarning` naming the mapping. ``"O2"`` (the default, as in
    Lightning 1.x) raises: its float16 weights with float32 master copies have no native
    equivalent. Registered as ``apex`` (= O1, the level Apex recommended), ``apex-o0`` ... ``apex-o3``.

    Args:
        amp_level: Apex's opt level, ``"O0"`` to ``"O3"``.

    Raises:
        MisconfigurationError: ``amp_level="O2"`` (with the replacements to use), or an unknown level.
    """

    def __new__(cls, amp_level: str = "O2") -> Precision:  # type: ignore[misc]  # returns the native plugin
        level = str(amp_level).upper()
        if level == "O2":
            raise MisconfigurationError(_APEX_O2)
        if level not in _APEX_LEVELS:
            raise MisconfigurationError(
                f"amp_level={amp_level!r} is not an Apex opt level; Apex had O0, O1, O2 and O3. Hint: "
                "precision='16-mixed' is the native replacement of Apex AMP."
            )
        native, does = _APEX_LEVELS[level]
        _note_once(f"{_APEX} at opt level {level} runs as its native equivalent precision={native!r}: {does}.")
        return _native(native)


class ShardedNativeMixedPrecision(Precision):
    """Lightning 1.x's precision for ``ddp_sharded`` (fairscale): returns ``MixedPrecision`` for the same precision.

    Args:
        precision: ``16`` / ``"16-mixed"`` or ``"bf16"`` / ``"bf16-mixed"``.
        device: The autocast device type (``"cuda"``...); None takes the accelerator's.
        scaler: A ``torch.amp.GradScaler`` for float16 (fairscale's ``ShardedGradScaler`` is not needed).
    """

    def __new__(  # type: ignore[misc]  # returns the native plugin
        cls, precision: str | int = "16-mixed", device: str | None = None, scaler: GradScaler | None = None
    ) -> Precision:
        return _sharded(cls.__name__, precision, device, scaler)


class FullyShardedNativeMixedPrecision(Precision):
    """Lightning 1.x's precision for fairscale's FSDP: returns ``MixedPrecision``; use it with ``strategy="fsdp"``.

    Args:
        precision: ``16`` / ``"16-mixed"`` or ``"bf16"`` / ``"bf16-mixed"``.
        device: The autocast device type (``"cuda"``...); None takes the accelerator's.
        scaler: A ``torch.amp.GradScaler`` for float16.
    """

    def __new__(  # type: ignore[misc]  # returns the native plugin
        cls, precision: str | int = "16-mixed", device: str | None = None, scaler: GradScaler | None = None
    ) -> Precision:
        return _sharded(cls.__name__, precision, device, scaler)


def _sharded(old: str, precision: str | int, device: str | None, scaler: Any) -> Precision:
    from torchplug.precision.amp import MixedPrecision

    name = _mixed_name(precision)
    was, how = _SHARDING[old]
    _note_once(
        f"{old} ({was}) runs as its native equivalent precision={name!r}: torch.autocast"
        + (" with a torch.amp.GradScaler" if name == "16-mixed" else "")
        + f", float32 weights. {how}"
    )
    return MixedPrecision(name, device_type=device, scaler=scaler)


def _native(name: str) -> Precision:
    if name == "16-mixed":
        from torchplug.precision.amp import MixedPrecision

        return MixedPrecision("16-mixed")
    if name == "16-true":
        from torchplug.precision.half import HalfPrecision

        return HalfPrecision("16-true")
    return Precision()


def apex_o2_probe() -> str:
    """The registry probe of ``apex-o2``: always the reason it cannot run (torch-free, for ``core plugins list``)."""
    return _APEX_O2
