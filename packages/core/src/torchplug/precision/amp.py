"""Mixed precision (``16-mixed``, ``bf16-mixed``): float32 weights, 16-bit compute through ``torch.autocast``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, Final

import torch
from torch.optim import Optimizer
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.precision.precision import Precision, calls_closure_itself
from torchplug.utilities.apply import apply_to_tensors

if TYPE_CHECKING:
    from torch.amp import GradScaler

    from torchplug.accelerators.accelerator import Accelerator

__all__ = ["MixedPrecision"]

_DTYPES: Final = {"16-mixed": torch.float16, "bf16-mixed": torch.bfloat16}
_TRUE_EQUIVALENT: Final = {"16-mixed": "16-true", "bf16-mixed": "bf16-true"}
_LOW_PRECISION: Final = (torch.float16, torch.bfloat16)


class MixedPrecision(Precision):
    """Keep the weights in float32 and run the forward pass in 16 bits under ``torch.autocast``.

    ``16-mixed`` computes in float16 and scales the loss with a ``torch.amp.GradScaler`` so that
    small gradients do not underflow; ``bf16-mixed`` computes in bfloat16, which has float32's
    range and needs no scaler. ``16-mixed`` is honoured everywhere autocast and the scaler
    support float16 (the CPU included, since torch 2.3).

    Where autocast runs, in this order: the ``device_type`` given here; else the accelerator's
    ``autocast_device_type``, read in :meth:`connect_accelerator` (which ``Strategy.attach``
    calls, so under a Trainer the plugin follows the accelerator); else, for a plugin used on
    its own, torch's current accelerator when one is available here (``torch.accelerator``),
    or the CPU. The plugin never tests the device type itself, so a new accelerator only has to
    declare its ``autocast_device_type``.

    Used on its own, without a Trainer::

        precision = MixedPrecision("bf16-mixed", device_type="cpu")
        with precision.forward_context():
            loss = model(batch).sum()

    Args:
        precision: ``"16-mixed"`` (float16 with a loss scaler) or ``"bf16-mixed"`` (bfloat16, no scaler).
        device_type: The device type for ``torch.autocast`` and the scaler; it wins over the
            accelerator's. Leave it None to take the accelerator's ``autocast_device_type`` (or,
            used alone, torch's current accelerator, else the CPU). Give it on a machine with a
            GPU to autocast work that runs on the CPU.
        scaler: A ``torch.amp.GradScaler`` to use instead of a default one (for example with
            another ``init_scale``); ``16-mixed`` only.
        device: Lightning's name for ``device_type`` (``MixedPrecision("16-mixed", device="cuda")``).

    Raises:
        MisconfigurationError: ``precision`` is another value, a scaler was given for
            ``bf16-mixed``, ``device_type`` is not a device type torch can autocast on
            (``torch.amp.is_autocast_available``), or both ``device_type`` and ``device`` are given.
    """

    name: ClassVar[str] = "16-mixed"

    def __init__(
        self,
        precision: str = "16-mixed",
        device_type: str | None = None,
        scaler: GradScaler | None = None,
        *,
        device: str | None = None,
    ) -> None:
        if device is not None:
            if device_type is not None:
                raise MisconfigurationError(
                    f"device_type={device_type!r} and device={device!r} both name the autocast device type. "
                    "Hint: give only device_type= (device is Lightning's name for it)."
                )
            device_type = device
        if device_type is not None:
            _check_autocast_device_type(device_type)
        dtype = _DTYPES.get(precision)
        if dtype is None:
            raise MisconfigurationError(
                f"precision={precision!r} is not supported by {type(self).__name__}; choose '16-mixed' or 'bf16-mixed'."
            )
        if scaler is not None and precision != "16-mixed":
            raise MisconfigurationError(
                f"precision={precision!r} does not scale the loss, but scaler={scaler!r} was given. "
                "Hint: drop scaler=, or use precision='16-mixed'."
            )
        self.precision: str = precision
        self.dtype: torch.dtype = dtype
        self._device_type: str | None = None
        self._explicit_device_type = device_type is not None
        self._scaler = scaler
        self._own_scaler = scaler is None
        self._pending_scaler_state: dict[str, Any] | None = None
        self._unscaled: set[int] = set()  # ids of the optimizers unscaled since the last scaler.update()
        if device_type is not None:
            self._use_device_type(device_type)

    @property
    def device_type(self) -> str:
        """The device type given to ``torch.autocast`` (see the class docstring for where it comes from).

        Asked before :meth:`connect_accelerator` on a plugin created without ``device_type=``, it
        settles on torch's current accelerator (or the CPU); a later :meth:`connect_accelerator`
        still replaces it with the accelerator's.
        """
        if self._device_type is None:
            self._use_device_type(_default_device_type())
        assert self._device_type is not None
        return self._device_type

    @property
    def scaler(self) -> GradScaler | None:
        """The loss scaler of ``16-mixed``, created for :attr:`device_type` on first use; None for ``bf16-mixed``."""
        if self._scaler is None and self.precision == "16-mixed":
            self._use_device_type(self.device_type)
        return self._scaler

    @override
    def connect_accelerator(self, accelerator: Accelerator) -> None:
        """Take the autocast device type from ``accelerator`` and create the loss scaler for it.

        A ``device_type=`` given to the constructor wins, and the accelerator is not consulted.

        Raises:
            MisconfigurationError: The accelerator's ``autocast_device_type`` is None: it does not
                support mixed precision through autocast.
        """
        if self._explicit_device_type:
            return
        device_type = accelerator.autocast_device_type
        if device_type is None:
            label = f"accelerator={accelerator.name!r}" if accelerator.name else type(accelerator).__name__
            raise MisconfigurationError(
                f"precision={self.precision!r} needs mixed precision through torch.autocast, which {label} "
                f"does not support (its autocast_device_type is None). "
                f"Hint: use precision={_TRUE_EQUIVALENT[self.precision]!r} or '32-true'."
            )
        self._use_device_type(device_type)

    def _use_device_type(self, device_type: str) -> None:
        """Autocast on ``device_type``; create the scaler for it (moving an existing scaler's state over)."""
        changed = self._device_type is not None and device_type != self._device_type
        self._device_type = device_type
        if self.precision != "16-mixed" or not self._own_scaler:
            return
        if self._scaler is None or changed:
            previous = self._scaler.state_dict() if self._scaler is not None else None
            self._scaler = _new_scaler(device_type)
            state = self._pending_scaler_state or previous
            if state:
                self._scaler.load_state_dict(state)
            self._pending_scaler_state = None

    # -- forward --------------------------------------------------------------------------------

    @override
    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """``torch.autocast(device_type, dtype)``: eligible operations on :attr:`device_type` run in 16 bits."""
        return torch.autocast(self.device_type, dtype=self.dtype)

    @override
    def convert_output(self, data: Any) -> Any:
        """Cast the float16 and bfloat16 tensors of ``data`` (what autocast produced) to float32."""
        return apply_to_tensors(data, lambda t: t.float() if t.dtype in _LOW_PRECISION else t)

    # -- backward and step ------------------------------------------------------------------------

    @override
    def pre_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> torch.Tensor:
        """Multiply the loss by the scaler's scale (``16-mixed``); return it as it is otherwise."""
        scaler = self.scaler
        return scaler.scale(tensor) if scaler is not None else tensor

    @override
    def optimizer_step(
        self, optimizer: Optimizer, module: torch.nn.Module | None, closure: Callable[[], Any] | None = None
    ) -> Any:
        """Step the optimizer; with a scaler, skip the step when a gradient is inf or NaN.

        Without a scaler (``bf16-mixed``) this is ``optimizer.step(closure)``. With one, the closure
        runs first (it computes the loss and the gradients, and may clip them), then
        ``scaler.step(optimizer)`` unscales the gradients (unless :meth:`unscale_gradients` already
        did) and steps only if they are all finite, and ``scaler.update()`` adjusts the scale: it
        is lowered after a skipped step and raised after a run of good ones. When no parameter has
        a gradient (the closure skipped backward), nothing is stepped or updated.

        Returns:
            What the closure returned (None without a closure).

        Raises:
            MisconfigurationError: The optimizer calls its closure itself, several times per step
                (LBFGS): the scaler cannot check the gradients in between.
        """
        scaler = self.scaler
        if scaler is None:
            return super().optimizer_step(optimizer, module, closure)
        if calls_closure_itself(optimizer):
            raise MisconfigurationError(
                f"precision={self.precision!r} cannot train with {type(optimizer).__name__}: the optimizer "
                "re-evaluates its closure inside step(), where the loss scaler cannot check the gradients. "
                "Hint: use precision='bf16-mixed' (no loss scaler), '32-true', or another optimizer."
            )
        result = None
        if closure is not None:
            with torch.enable_grad():
                result = closure()
        if any(p.grad is not None for p in self.main_params(optimizer)):
            scaler.step(optimizer)
            scaler.update()  # resets the scaler's per-optimizer state, so ours too
            self._unscaled.clear()
        return result

    @override
    def unscale_gradients(self, optimizer: Optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale, once per step (later calls do nothing).

        Also records whether a gradient is inf or NaN, for :meth:`optimizer_step` to skip the step.
        Call it, rather than ``scaler.unscale_``, before reading the gradients' true values.
        """
        scaler = self.scaler
        if scaler is None or id(optimizer) in self._unscaled:
            return
        scaler.unscale_(optimizer)
        self._unscaled.add(id(optimizer))

    # -- state ------------------------------------------------------------------------------------

    @override
    def state_dict(self) -> dict[str, Any]:
        """``{"scaler": <the scaler's state>}`` for ``16-mixed`` (scale and growth tracker); ``{}`` otherwise."""
        if self._scaler is not None:
            return {"scaler": self._scaler.state_dict()}
        if self._pending_scaler_state is not None:
            return {"scaler": dict(self._pending_scaler_state)}
        return {}

    @override
    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Restore the scaler's state, so a resumed run continues exactly where it stopped.

        Before the scaler exists (it is created with the device type) the state is kept and given
        to it then. A state without a scaler (saved under another precision) leaves the scaler fresh,
        and ``bf16-mixed`` ignores a saved scaler.
        """
        scaler_state = state_dict.get("scaler")
        if not scaler_state or self.precision != "16-mixed":
            return
        if self._scaler is not None:
            self._scaler.load_state_dict(dict(scaler_state))
        else:
            self._pending_scaler_state = dict(scaler_state)

    @override
    def teardown(self) -> None:
        """Forget which optimizers were unscaled. The scaler and its state stay, for the next run."""
        self._unscaled.clear()

    @override
    def __repr__(self) -> str:
        return f"{type(self).__name__}(precision={self.precision!r}, device_type={self._device_type!r})"


def _check_autocast_device_type(device_type: object) -> None:
    """Refuse a ``device_type`` that ``torch.autocast`` would refuse only at the first step."""
    try:
        available = isinstance(device_type, str) and torch.amp.is_autocast_available(device_type)
    except RuntimeError:  # not a device type at all ("cdua")
        available = False
    if not available:
        raise MisconfigurationError(
            f"device_type={device_type!r} is not valid: torch cannot autocast on it "
            f"(torch.amp.is_autocast_available({device_type!r}) is not True). Hint: give the type of the device the "
            "model computes on, such as 'cuda' or 'cpu', or leave device_type=None to take the accelerator's."
        )


def _new_scaler(device_type: str) -> GradScaler:
    return torch.amp.GradScaler(device_type)


def _default_device_type() -> str:
    """Where a plugin used without an accelerator autocasts: torch's current accelerator if available, else the CPU."""
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    return accelerator.type if accelerator is not None else "cpu"
