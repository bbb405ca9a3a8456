"""One training batch's forward, backward and optimizer step, built once per epoch.

The per-batch path is the product's headline cost, so everything that cannot change during an
epoch is decided before it: which layer runs the forward (the strategy only when it overrides
``training_step``, else the module directly), whether backward needs the strategy and precision
(only when one of them, or the module's ``backward`` hook, overrides it), which hooks anybody
overrides, and how the optimizer steps. Overridden hooks and plugin methods are always honoured;
the ones nobody overrides cost nothing.

The order is the one Lightning users know: ``training_step``, then (on the first batch of an
accumulation window) ``on_before_zero_grad`` and ``optimizer_zero_grad``, ``on_before_backward``,
backward, ``on_after_backward``; when a step is due, ``optimizer_step`` runs all that as its
closure, followed by ``on_before_optimizer_step`` and ``configure_gradient_clipping``, then the
optimizer's ``step``. Gradients stay populated until the next ``zero_grad``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from torchplug._errors import MisconfigurationError
from torchplug.core.module import Module
from torchplug.precision.precision import Precision, calls_closure_itself
from torchplug.strategies.strategy import Strategy
from torchplug.trainer.hooks import is_overridden
from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from torchplug.loops.fit import FitLoop
    from torchplug.loops.state import LoopConfig, RunState
    from torchplug.trainer.hooks import HookRunner

__all__ = [
    "OptimizerStepper",
    "StepOptimizer",
    "accepts_batch_idx",
    "automatic_step",
    "batches_per_optimizer_step",
    "manual_backward",
    "manual_optimizers",
    "manual_step",
]

BatchStep = Callable[[Any, int, bool], Any]

_Tensor = torch.Tensor


def accepts_batch_idx(step: Callable[..., Any]) -> bool:
    """Whether a ``*_step`` method takes ``batch_idx``: a parameter of that name, two positional ones, or ``*args``."""
    try:
        parameters = list(inspect.signature(step).parameters.values())
    except (TypeError, ValueError):
        return True
    if any(p.name == "batch_idx" or p.kind is p.VAR_POSITIONAL for p in parameters):
        return True
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 2


def batches_per_optimizer_step(config: LoopConfig, strategy: Strategy) -> int:
    """Training batches per optimizer step: ``accumulate_grad_batches``, or 1 where the strategy accumulates itself.

    A strategy with ``handles_gradient_accumulation`` (the IPU's) accumulates inside its compiled
    step, on the device, so the loop steps the optimizer after every batch.
    """
    return 1 if strategy.handles_gradient_accumulation else config.accumulate_grad_batches


def _forward(strategy: Strategy, module: Module) -> Callable[[Any, int], Any]:
    """``training_step(batch, batch_idx)`` through the strategy and precision only where they change it."""
    precision = strategy.precision
    step: Callable[..., Any]  # the user's training_step may take (batch) or (batch, batch_idx)
    if is_overridden(strategy, "training_step", Strategy) or (
        precision is not None and is_overridden(precision, "forward_context", Precision)
    ):
        step = strategy.training_step
    else:
        step = getattr(module, "training_step")  # noqa: B009  (typed as Any: it may take (batch) only)
    if accepts_batch_idx(module.training_step):
        return step
    return lambda batch, batch_idx: step(batch)


def _backward(
    strategy: Strategy, module: Module, optimizer: torch.optim.Optimizer | None
) -> Callable[[_Tensor], None] | None:
    """The backward to run, or None when ``loss.backward()`` alone is what every layer would do."""
    precision = strategy.precision
    plain = not is_overridden(strategy, "backward", Strategy) and not is_overridden(module, "backward", Module)
    if plain and precision is not None:
        plain = not any(is_overridden(precision, n, Precision) for n in ("pre_backward", "backward", "post_backward"))
    if plain:
        return None
    return lambda loss: strategy.backward(loss, optimizer)


class OptimizerStepper:
    """Steps one optimizer the way the strategy and precision plugins require, resolved once.

    ``step(closure)`` runs the closure (forward and backward) and the optimizer's step: through
    the strategy when it overrides ``optimizer_step``, else through the precision when it does,
    else directly (the closure first, then ``optimizer.step()``; an optimizer such as LBFGS whose
    ``step`` needs the closure gets it).

    Args:
        strategy: The strategy that steps (with its precision).
        optimizer: The optimizer to step.
    """

    def __init__(self, strategy: Strategy, optimizer: torch.optim.Optimizer) -> None:
        precision = strategy.precision
        self.optimizer = optimizer
        self._direct = not is_overridden(strategy, "optimizer_step", Strategy) and not (
            precision is not None and is_overridden(precision, "optimizer_step", Precision)
        )
        self._strategy = strategy

    @property
    def direct(self) -> bool:
        """Whether ``step`` calls the optimizer itself (neither the strategy nor the precision steps it)."""
        return self._direct

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the optimizer's gradients through the strategy (see ``Strategy.zero_grad``)."""
        self._strategy.zero_grad(self.optimizer, set_to_none=set_to_none)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Run ``closure`` (may be None) and step the optimizer; returns what the closure returned."""
        optimizer = self.optimizer
        if not self._direct:
            return self._strategy.optimizer_step(optimizer, closure)
        if closure is None or calls_closure_itself(optimizer):
            return optimizer.step(closure)
        result = closure()
        optimizer.step()
        return result


def _loss_of(output: Any, world_size: int) -> _Tensor | None:
    if isinstance(output, _Tensor):
        return output
    if isinstance(output, dict):
        loss = output.get("loss")
        if loss is None:
            raise MisconfigurationError(
                "training_step returned a dict without a 'loss' key; with automatic optimization the dict must "
                "hold the loss under 'loss'."
            )
        if not isinstance(loss, _Tensor):
            raise MisconfigurationError(
                f"training_step returned a dict whose 'loss' is a {type(loss).__name__} ({loss!r}), not a tensor: "
                "there is nothing to backpropagate. Hint: put the loss tensor itself under 'loss' (not loss.item() "
                "or float(loss)); log numbers with self.log."
            )
        return loss
    if output is None:
        if world_size > 1:
            raise MisconfigurationError(
                "training_step returned None in distributed training, which would leave the processes out of step "
                "(the others wait in the gradient all-reduce). Hint: return a loss on every process, for example a "
                "zero loss times the parameters, or filter the data before it reaches the step."
            )
        _warn_none_once()
        return None
    raise MisconfigurationError(
        f"training_step returned {type(output).__name__}; with automatic optimization return the loss tensor, a "
        "dict with 'loss', or None to skip the batch."
    )


_WARNED_NONE = [False]


def _warn_none_once() -> None:
    if not _WARNED_NONE[0]:
        _WARNED_NONE[0] = True
        rank_zero_warn(
            "training_step returned None: this batch gets no backward and the optimizer step finds no gradients. "
            "If this was on purpose, ignore this warning."
        )


def automatic_step(run: RunState, strategy: Strategy, loop: FitLoop, hooks: HookRunner) -> BatchStep:
    """The function that runs one batch of automatic optimization: ``step(batch, batch_idx, should_step)``.

    One implementation for every configuration: what varies (hooks, plugins, accumulation,
    clipping, the non-finite check) is decided here, once per epoch, and costs nothing per step
    where nobody uses it. When nothing but the optimizer's own ``step()`` follows the closure
    (no ``optimizer_step`` override, neither plugin steps, the optimizer does not call the closure
    itself), the closure's body runs inline, without building a closure: the same calls in the
    same order (a test compares both ways on every hook combination). Where every batch steps
    as well (no accumulation), that body is the whole step: the loop calls it with nothing around it.

    The step keeps what ``training_step`` returned and the loss on the loop (``step_output``,
    ``raw_loss``); :func:`automatic_outputs` builds ``on_train_batch_end``'s ``outputs`` from them
    only when somebody reads it.
    """
    module = run.module
    assert module is not None
    optimizer = run.optimizers[0]
    forward = _forward(strategy, module)
    backward = _backward(strategy, module, optimizer)
    stepper = OptimizerStepper(strategy, optimizer)
    accumulate = batches_per_optimizer_step(run.config, strategy)
    world_size = strategy.world_size
    zero_grad_hook = hooks.module_hook("optimizer_zero_grad")
    # The strategy's zero_grad only where it changes it: otherwise the optimizer's, with no extra call.
    zero_grad = (
        functools.partial(strategy.zero_grad, optimizer)
        if is_overridden(strategy, "zero_grad", Strategy)
        else optimizer.zero_grad
    )
    before_zero_grad = hooks.batch_hooks("on_before_zero_grad")
    before_backward = hooks.batch_hooks("on_before_backward")
    after_backward = hooks.batch_hooks("on_after_backward")
    before_step = hooks.batch_hooks("on_before_optimizer_step")
    clip = _clipping(run.config, strategy, hooks, optimizer)
    unscale = _unscaling(strategy, optimizer)
    step_hook = hooks.module_hook("optimizer_step")
    hook_optimizer = StepOptimizer(stepper) if step_hook is not None else None
    progress = loop.progress
    skipping = loop.loss_check if loop.loss_check.mode == "skip" else None  # nonfinite_loss="skip"
    inline = step_hook is None and stepper.direct and not calls_closure_itself(optimizer)
    no_backward_sync = strategy.no_backward_sync
    # The hook loops below are guarded by the lists' truth: iterating an empty list still builds an
    # iterator object per step, which the instruction gate counts.

    def closure_body(batch: Any, batch_idx: int, stepping: bool) -> _Tensor | None:
        """Forward, zero_grad (first batch of a window), backward and, when ``stepping``, the pre-step work.

        Inline, the optimizer's step follows here too. Returns the loss, as an optimizer's closure does.
        """
        output = loop.step_output = forward(batch, batch_idx)
        loss = output if type(output) is _Tensor else _loss_of(output, world_size)
        if accumulate > 1:
            if loss is not None:
                loss = loss / accumulate
            zeroes = batch_idx % accumulate == 0
        else:
            zeroes = True
        if zeroes:
            if before_zero_grad:
                for hook in before_zero_grad:
                    hook(optimizer)
            if zero_grad_hook is not None:
                zero_grad_hook(progress.epoch, batch_idx, optimizer)
            else:
                zero_grad()
        if loss is not None:
            if before_backward:
                for hook in before_backward:
                    hook(loss)
            try:  # free when nothing is raised: the loss's shape is looked at only when backward refuses it
                if backward is None:
                    loss.backward()
                else:
                    backward(loss)
            except RuntimeError as exc:
                _refuse_non_scalar(loss, exc)
                raise
            if after_backward:
                for hook in after_backward:
                    hook()
            if skipping is not None:
                skipping.note(loss)
        loop.raw_loss = loss
        if not stepping:
            return loss
        # A dropped step (nonfinite_loss="skip") has no gradients left: the optimizer (and a loss scaler) skip it.
        if skipping is None or not skipping.drop_step(optimizer):
            if unscale is not None:  # the hooks and the clipping see the true gradients
                unscale()
            if before_step:
                for hook in before_step:
                    hook(optimizer)
            if clip is not None:
                clip()
        if inline:  # nothing but the optimizer's own step follows the closure: it runs here, with no closure
            optimizer.step()
            progress.global_step += 1
        return loss

    def run_batch(batch: Any, batch_idx: int, should_step: bool) -> None:
        if not should_step:
            with no_backward_sync(True):
                closure_body(batch, batch_idx, False)
        elif inline:
            closure_body(batch, batch_idx, True)
        else:
            loop.step_output = loop.raw_loss = None  # an optimizer_step override may never call the closure
            closure = functools.partial(closure_body, batch, batch_idx, True)
            if step_hook is None:
                stepper.step(closure)
            else:
                step_hook(progress.epoch, batch_idx, hook_optimizer, closure)
            progress.global_step += 1

    # Every batch steps when nothing accumulates: the inline body is then the whole step, with no call around it.
    return closure_body if inline and accumulate == 1 else run_batch


def automatic_outputs(output: Any, loss: _Tensor | None) -> dict[str, Any]:
    """``on_train_batch_end``'s ``outputs`` under automatic optimization, from what the step kept on the loop.

    ``{"loss": <detached loss>, **the other keys of a returned dict}``; ``{}`` for a skipped batch.
    """
    if loss is None:
        return {}
    extra = {k: v for k, v in output.items() if k != "loss"} if isinstance(output, dict) else {}
    return {"loss": loss.detach(), **extra}


def _refuse_non_scalar(loss: _Tensor, exc: RuntimeError) -> None:
    """Raise a usage error naming the loss's shape when backward failed because the loss is not one number.

    Raises:
        MisconfigurationError: ``loss`` has more than one element (torch says only "grad can be
            implicitly created only for scalar outputs").
    """
    if loss.numel() == 1:
        return
    raise MisconfigurationError(
        f"training_step returned a loss of shape {tuple(loss.shape)}, not a single number: backward needs a scalar "
        "loss. Hint: reduce it in training_step, for example loss.mean() or loss.sum() (or reduction='mean' in the "
        "loss function)."
    ) from exc


def _unscaling(strategy: Strategy, optimizer: torch.optim.Optimizer) -> Callable[[], None] | None:
    """The precision's unscaling of the gradients after backward, when it scales the loss (``16-mixed``)."""
    precision = strategy.precision
    if precision is None or not is_overridden(precision, "unscale_gradients", Precision):
        return None
    return lambda: precision.unscale_gradients(optimizer)


def _clipping(
    config: LoopConfig, strategy: Strategy, hooks: HookRunner, optimizer: torch.optim.Optimizer
) -> Callable[[], None] | None:
    """The gradient clipping after the closure: the module's ``configure_gradient_clipping``, or the Trainer's."""
    clip_val, algorithm = config.gradient_clip_val, config.gradient_clip_algorithm
    hook = hooks.module_hook("configure_gradient_clipping")
    if hook is not None:
        return lambda: hook(optimizer, clip_val, algorithm)
    if not clip_val:
        return None
    return lambda: strategy.clip_gradients(optimizer, clip_val, algorithm)


class StepOptimizer:
    """The optimizer a module's ``optimizer_step`` (and, in manual optimization, ``self.optimizers()``) receives.

    Use it like the optimizer itself: ``step(closure)`` goes through the strategy and precision
    plugins (loss scaling included); every other attribute is the wrapped optimizer's.

    Args:
        stepper: How this optimizer steps.
        on_step: Called after each ``step()`` (manual optimization counts its global steps here).
        before_step: Called with the optimizer once the closure ran, right before the optimizer
            steps (manual optimization runs ``on_before_optimizer_step`` here); None: nothing.
    """

    def __init__(
        self,
        stepper: OptimizerStepper,
        on_step: Callable[[], None] | None = None,
        before_step: Callable[[torch.optim.Optimizer], None] | None = None,
    ) -> None:
        self._stepper = stepper
        self._on_step = on_step
        self._before_step = before_step
        self.optimizer = stepper.optimizer

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Step through the strategy and precision plugins; returns what ``closure`` returned."""
        before_step = self._before_step
        if before_step is not None:
            closure = functools.partial(_then, closure, before_step, self.optimizer)
        result = self._stepper.step(closure)
        if self._on_step is not None:
            self._on_step()
        return result

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Reset the gradients of the wrapped optimizer's parameters (through ``strategy.zero_grad``)."""
        self._stepper.zero_grad(set_to_none)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.optimizer, name)

    def __repr__(self) -> str:
        return f"StepOptimizer({self.optimizer!r})"


def _then(
    closure: Callable[[], Any] | None,
    after: Callable[[torch.optim.Optimizer], None],
    optimizer: torch.optim.Optimizer,
) -> Any:
    """Run ``closure`` (if any), then ``after(optimizer)``; return what the closure returned."""
    result = closure() if closure is not None else None
    after(optimizer)
    return result


def manual_step(run: RunState, strategy: Strategy, loop: FitLoop) -> BatchStep:
    """The function that runs one batch of manual optimization: the module steps its optimizers itself."""
    assert run.module is not None
    forward = _forward(strategy, run.module)

    def run_batch(batch: Any, batch_idx: int, should_step: bool) -> None:
        loop.step_output = _manual_outputs(loop, forward(batch, batch_idx))

    return run_batch


def _manual_outputs(loop: FitLoop, output: Any) -> dict[str, Any]:
    """``on_train_batch_end``'s ``outputs`` under manual optimization; keeps the detached loss on the loop."""
    if isinstance(output, _Tensor):
        loss = loop.raw_loss = output.detach()
        return {"loss": loss}
    if isinstance(output, dict):
        value = output.get("loss")
        if isinstance(value, _Tensor):
            detached = loop.raw_loss = value.detach()
            return {**output, "loss": detached}
        return output
    if output is not None:
        raise MisconfigurationError(
            f"training_step returned {type(output).__name__}; with manual optimization return a tensor, a dict, "
            "or nothing."
        )
    return {}


def manual_optimizers(run: RunState, strategy: Strategy, loop: FitLoop, hooks: HookRunner) -> list[StepOptimizer]:
    """The optimizers ``self.optimizers()`` returns in manual optimization.

    Each ``step()`` counts a global step and, where somebody overrides ``on_before_optimizer_step``
    (or the precision scales the loss), runs the hooks on the unscaled gradients right before
    the optimizer steps, as in automatic optimization.
    """

    def count() -> None:
        loop.progress.global_step += 1

    hooks_before = hooks.batch_hooks("on_before_optimizer_step")
    optimizers = []
    for optimizer in run.optimizers:
        before = _before_optimizer_step(hooks_before, _unscaling(strategy, optimizer))
        optimizers.append(StepOptimizer(OptimizerStepper(strategy, optimizer), count, before))
    return optimizers


def _before_optimizer_step(
    hooks: list[Callable[..., Any]], unscale: Callable[[], None] | None
) -> Callable[[torch.optim.Optimizer], None] | None:
    if not hooks and unscale is None:
        return None

    def before(optimizer: torch.optim.Optimizer) -> None:
        if unscale is not None:  # the hooks see the true gradients
            unscale()
        for hook in hooks:
            hook(optimizer)

    return before


def manual_backward(strategy: Strategy, hooks: HookRunner) -> Callable[..., None] | None:
    """``self.manual_backward(loss)`` with ``on_before_backward`` and ``on_after_backward`` around it.

    None where nobody overrides either hook: then ``manual_backward`` calls the strategy directly.
    """
    before = hooks.batch_hooks("on_before_backward")
    after = hooks.batch_hooks("on_after_backward")
    if not before and not after:
        return None

    def backward(loss: _Tensor, *args: Any, **kwargs: Any) -> None:
        for hook in before:
            hook(loss)
        strategy.backward(loss, None, *args, **kwargs)
        for hook in after:
            hook()

    return backward
