"""The Precision base class: the numerics of training (dtypes, autocast, loss scaling).

The base class is full precision (``32-true``): every method is a working no-op default, so a
subclass overrides only what its numerics change. This module imports no torch at import time.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Generator, Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from typing_extensions import override

if TYPE_CHECKING:
    import torch
    from torch.optim import Optimizer

    from torchplug._registry import Registry
    from torchplug.accelerators.accelerator import Accelerator

__all__ = ["Precision", "calls_closure_itself"]

_NO_CONTEXT = contextlib.nullcontext()  # reusable and reentrant: one object for every step


class Precision:
    """Full float32 precision, and the interface every precision plugin implements.

    Attributes:
        name: The registry name this class is usually known by (``"32-true"``, ``"bf16-mixed"``).
            Informational: the name given to ``registry.register`` is the one users type, and an
            accelerator's ``supported_precisions`` lists registry names.
    """

    name: ClassVar[str] = "32-true"

    def connect_accelerator(self, accelerator: Accelerator) -> None:
        """Learn the accelerator in use; called by ``Strategy.attach`` (so once per Trainer).

        Mixed precision reads ``accelerator.autocast_device_type`` here instead of testing the
        device type itself. A plugin must also work when this is never called (used on its own,
        without a Trainer): take what it needs as constructor arguments, with sensible defaults.
        """

    # -- creating and converting --------------------------------------------------------------

    def convert_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Convert the module's parameters and buffers (for example ``module.half()``)."""
        return module

    @contextlib.contextmanager
    def tensor_init_context(self) -> Generator[None, None, None]:
        """A context in which new floating-point tensors get this precision's dtype."""
        yield

    @contextlib.contextmanager
    def module_init_context(self) -> Generator[None, None, None]:
        """A context in which to build the model (may swap layer classes as well as the dtype)."""
        with self.tensor_init_context():
            yield

    def convert_input(self, data: Any) -> Any:
        """Convert a batch's floating-point tensors before they reach the model."""
        return data

    def convert_output(self, data: Any) -> Any:
        """Convert the model's outputs back to the default dtype."""
        return data

    # -- forward --------------------------------------------------------------------------------

    def forward_context(self) -> contextlib.AbstractContextManager[Any]:
        """The context around every ``*_step`` call (for example ``torch.autocast``)."""
        return _NO_CONTEXT

    # -- backward and step ------------------------------------------------------------------------

    def pre_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> torch.Tensor:
        """Prepare the loss before backward (a scaler multiplies it here)."""
        return tensor

    def backward(
        self,
        tensor: torch.Tensor,
        module: torch.nn.Module | None,
        optimizer: Optimizer | None,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        """Compute gradients of ``tensor``."""
        tensor.backward(*args, **kwargs)

    def post_backward(self, tensor: torch.Tensor, module: torch.nn.Module | None) -> None:
        """Called after backward, before the optimizer step."""

    def optimizer_step(
        self, optimizer: Optimizer, module: torch.nn.Module | None, closure: Callable[[], Any] | None = None
    ) -> Any:
        """Step the optimizer. ``closure`` computes the loss and its gradients (it may be None).

        The closure runs here, before ``optimizer.step()``, unless the optimizer needs to call it
        itself (LBFGS and others whose ``step`` requires a closure): running the forward and
        backward inside ``optimizer.step`` costs a grad-mode switch and the step's profiling
        wrapper around them, about 7 µs a step on a small model. Returns what the closure returned.
        """
        if closure is None or calls_closure_itself(optimizer):
            return optimizer.step(closure)
        result = closure()
        optimizer.step()
        return result

    def main_params(self, optimizer: Optimizer) -> Iterator[torch.nn.Parameter]:
        """The parameters the optimizer updates (the fp32 copies, where the precision keeps them)."""
        for group in optimizer.param_groups:
            yield from group["params"]

    def unscale_gradients(self, optimizer: Optimizer) -> None:
        """Undo loss scaling on the gradients before they are inspected or clipped."""

    def clip_gradients(self, optimizer: Optimizer, clip_val: float, algorithm: str = "norm") -> None:
        """Clip gradients by total norm (``algorithm="norm"``) or by value (``"value"``)."""
        import torch

        self.unscale_gradients(optimizer)
        params = [p for p in self.main_params(optimizer) if p.grad is not None]
        if algorithm == "norm":
            torch.nn.utils.clip_grad_norm_(params, clip_val)
        elif algorithm == "value":
            torch.nn.utils.clip_grad_value_(params, clip_val)
        else:
            raise ValueError(f"gradient_clip_algorithm={algorithm!r} is not one of 'norm', 'value'")

    # -- state ------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints (for example the loss scaler's)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    def teardown(self) -> None:
        """Release state at the end of a run."""

    # -- Lightning compatibility --------------------------------------------------------------

    @classmethod
    def register_precisions(cls, registry: Registry[Precision]) -> None:
        """Lightning-style self-registration: override to call ``registry.register(...)``."""

    @override
    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


def calls_closure_itself(optimizer: Optimizer) -> bool:
    """Whether ``optimizer.step`` requires a closure, which it may call several times (LBFGS and the like).

    Answered once per optimizer class (a ``step`` replaced on the instance is looked at each time).
    """
    step = optimizer.__dict__.get("step")
    if step is not None:
        return _requires_closure(step)
    cls = type(optimizer)
    answer = _REQUIRES_CLOSURE.get(cls)
    if answer is None:
        answer = _REQUIRES_CLOSURE[cls] = _class_requires_closure(cls)
    return answer


#: Optimizer class -> whether its ``step`` requires a closure (asked once per class).
_REQUIRES_CLOSURE: dict[type, bool] = {}


def _class_requires_closure(cls: Any) -> bool:
    import torch

    if issubclass(cls, torch.optim.LBFGS):
        return True
    return _requires_closure(cls.step)


def _requires_closure(step: Callable[..., Any]) -> bool:
    try:
        parameter = inspect.signature(step).parameters.get("closure")
    except (TypeError, ValueError):
        return False
    return parameter is not None and parameter.default is inspect.Parameter.empty
