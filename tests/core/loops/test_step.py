"""The training step has one implementation: run inline or as a closure, it gives the same result.

When nothing but the optimizer's own ``step()`` follows the closure, the step runs the closure's
body inline; a module that overrides ``optimizer_step`` (here with Lightning's default body) makes
the loop build the closure and hand it over. Both ways must train to bit-identical weights and
call the hooks in the same order, whatever hooks are overridden.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from torchplug._errors import MisconfigurationError

_HOOKS = ("on_before_zero_grad", "on_before_backward", "on_after_backward", "on_before_optimizer_step")


def _module(hooks: tuple[str, ...], closure: bool, clip_hook: bool) -> torchplug.Module:
    calls: list[str] = []

    class Recorder(torchplug.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
            self.calls = calls

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, y = batch
            self.calls.append("training_step")
            return torch.nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)

    def record(name: str) -> Any:
        def hook(self: Any, *args: Any, **kwargs: Any) -> None:
            self.calls.append(name)

        return hook

    for name in hooks:
        setattr(Recorder, name, record(name))
    if closure:

        def optimizer_step(self: Any, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any) -> None:
            self.calls.append("optimizer_step")
            optimizer.step(closure=optimizer_closure)  # Lightning's default body

        Recorder.optimizer_step = optimizer_step  # type: ignore[method-assign]
    if clip_hook:

        def configure_gradient_clipping(self: Any, optimizer: Any, gradient_clip_val: Any, algorithm: Any) -> None:
            self.calls.append("configure_gradient_clipping")
            self.clip_gradients(optimizer, gradient_clip_val=0.5, gradient_clip_algorithm="norm")

        Recorder.configure_gradient_clipping = configure_gradient_clipping  # type: ignore[method-assign]
    return Recorder()


def _train(module: torchplug.Module, **trainer_kwargs: Any) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(40, 6, generator=generator), torch.randn(40, 1, generator=generator))
    trainer = torchplug.Trainer(
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        **trainer_kwargs,
    )
    trainer.fit(module, DataLoader(data, batch_size=8))
    return [p.detach().clone() for p in module.parameters()]


_COMBINATIONS = [
    pytest.param(hooks, accumulate, clip, id=f"{'+'.join(hooks) or 'no-hooks'}-acc{accumulate}-{clip}")
    for hooks in [(), *((h,) for h in _HOOKS), _HOOKS]
    for accumulate, clip in itertools.product((1, 2), ("none", "clip_val", "clip_hook"))
]


@pytest.mark.parametrize(("hooks", "accumulate", "clip"), _COMBINATIONS)
def test_inline_and_closure_steps_train_the_same_weights_with_the_same_hook_order(hooks, accumulate, clip):
    kwargs: dict[str, Any] = {"accumulate_grad_batches": accumulate}
    if clip == "clip_val":
        kwargs["gradient_clip_val"] = 0.3
    inline = _module(hooks, closure=False, clip_hook=clip == "clip_hook")
    closure = _module(hooks, closure=True, clip_hook=clip == "clip_hook")
    inline_weights = _train(inline, **kwargs)
    closure_weights = _train(closure, **kwargs)
    for a, b in zip(inline_weights, closure_weights):
        assert torch.equal(a, b)
    assert [c for c in closure.calls if c != "optimizer_step"] == inline.calls
    batches_per_epoch, epochs = 5, 2  # the last batch of an epoch steps, whatever the window
    assert closure.calls.count("optimizer_step") == epochs * -(-batches_per_epoch // accumulate)


def test_a_closure_calling_optimizer_gets_the_step_body_once_per_step():
    module = _module((), closure=False, clip_hook=False)
    module.configure_optimizers = lambda: torch.optim.LBFGS(module.parameters(), lr=0.1, max_iter=3)  # type: ignore[method-assign]
    _train(module)
    # LBFGS calls the closure up to max_iter times per step: the forward runs inside it, each time.
    assert module.calls.count("training_step") > 10


@pytest.mark.parametrize("shape", [(4,), (2, 3)], ids=["vector", "matrix"])
def test_a_loss_that_is_not_one_number_is_refused_naming_its_shape_and_the_hook(shape):
    class Unreduced(torchplug.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(6, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            x, _ = batch
            return self.layer(x).sum() * torch.ones(shape)  # forgot the reduction

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with pytest.raises(MisconfigurationError, match=rf"training_step returned a loss of shape {re.escape(str(shape))}"):
        _train(Unreduced())
