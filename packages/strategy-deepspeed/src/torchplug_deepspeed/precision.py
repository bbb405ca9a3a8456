"""DeepSpeed's numerics: float32, or DeepSpeed's bf16/fp16 modes with float32 master weights in its optimizer."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from typing import Any, ClassVar, Final

import torch
from torch.optim import Optimizer
from typing_extensions import override

from torchplug import MisconfigurationError
from torchplug.precision.precision import Precision
from torchplug.utilities.apply import apply_to_tensors

__all__ = ["PRECISIONS", "DeepSpeedPrecision"]

#: The precisions DeepSpeed trains in: name -> the dtype of the model's weights and compute.
PRECISIONS: Final[dict[str, torch.dtype]] = {
    "32-true": torch.float32,
    "bf16-mixed": torch.bfloat16,
    "16-mixed": torch.float16,
    "bf16-true": torch.bfloat16,
    "16-true": torch.float16,
}


class DeepSpeedPrecision(Precision):
    """The numerics of a DeepSpeed run, carried out by DeepSpeed's engine.

    ``"bf16-mixed"`` and ``"16-mixed"`` are DeepSpeed's bf16 and fp16 modes: the engine holds the
    model in that dtype and its optimizer keeps float32 master weights (fp16 with DeepSpeed's
    dynamic loss scaling). ``"bf16-true"`` and ``"16-true"`` are the same modes with the module
    converted before DeepSpeed sees it, and new tensors created in that dtype. Batches are cast
    to the model's dtype before they reach it. Backward and the optimizer step are the engine's.

    Args:
        precision: One of :data:`PRECISIONS`.
    """

    name: ClassVar[str] = "deepspeed"

    def __init__(self, precision: str = "32-true") -> None:
        if precision not in PRECISIONS:
            raise MisconfigurationError(
                f"DeepSpeedPrecision(precision={precision!r}): DeepSpeed trains in {', '.join(PRECISIONS)}."
            )
        self.precision = precision
        self.dtype = PRECISIONS[precision]
        self._backwards = 0  # backward passes since the last step

    def ds_config(self) -> dict[str, Any]:
        """The ``fp16``/``bf16`` entries of the DeepSpeed config for this precision (empty for float32)."""
        if self.dtype is torch.bfloat16:
            return {"bf16": {"enabled": True}}
        if self.dtype is torch.float16:
            return {"fp16": {"enabled": True}}
        return {}

    @override
    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """``*-true``: convert the module to the dtype; otherwise DeepSpeed converts it itself."""
        return module.to(self.dtype) if self.precision.endswith("-true") else module

    @override
    @contextlib.contextmanager
    def tensor_init_context(self) -> Generator[None, None, None]:
        """``*-true``: new floating-point tensors get the dtype."""
        if not self.precision.endswith("-true") or self.dtype is torch.float32:
            yield
            return
        default = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            yield
        finally:
            torch.set_default_dtype(default)

    @override
    def convert_input(self, data: Any) -> Any:
        """Cast floating-point tensors of the batch to the model's dtype (DeepSpeed holds the model in it)."""
        if self.dtype is torch.float32:
            return data
        return apply_to_tensors(data, lambda t: t.to(self.dtype) if torch.is_floating_point(t) else t)

    @override
    def convert_output(self, data: Any) -> Any:
        """Cast floating-point outputs back to the default dtype."""
        if self.dtype is torch.float32:
            return data
        default = torch.get_default_dtype()
        return apply_to_tensors(data, lambda t: t.to(default) if torch.is_floating_point(t) else t)

    @override
    def backward(
        self,
        tensor: torch.Tensor,
        module: torch.nn.Module | None,
        optimizer: Optimizer | None,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """Backward through the engine (``engine.backward``), which scales the loss in fp16."""
        _engine_of(module, "backward").backward(tensor, *args, **kwargs)
        self._backwards += 1

    @override
    def optimizer_step(
        self, optimizer: Optimizer, module: torch.nn.Module | None, closure: Callable[[], Any] | None = None
    ) -> Any:
        """Run ``closure`` (forward and backward), then ``engine.step()``: reduce, clip and update.

        When no backward ran since the last step (``training_step`` returned None), there is
        nothing to apply and the step is skipped, as ``torch.optim`` skips parameters without gradients.
        """
        engine = _engine_of(module, "optimizer_step")
        result = closure() if closure is not None else None
        if self._backwards:
            engine.step()
        self._backwards = 0
        return result

    @override
    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str = "norm") -> None:
        """Nothing here: DeepSpeed clips inside ``engine.step()`` (the strategy configures it)."""

    def __repr__(self) -> str:
        return f"DeepSpeedPrecision({self.precision!r})"


def _engine_of(module: torch.nn.Module | None, what: str) -> Any:
    if module is None or not callable(getattr(module, "step", None)) or not hasattr(module, "optimizer"):
        raise MisconfigurationError(
            f"DeepSpeedPrecision.{what} needs the DeepSpeed engine, got {type(module).__name__}. "
            "Hint: use DeepSpeedPrecision with a DeepSpeed strategy (strategy='deepspeed_stage_2'...)."
        )
    return module
