"""How the base Precision steps an optimizer: the closure runs once, before ``step``, unless the optimizer needs it."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from torchplug.precision.precision import Precision, calls_closure_itself


class ClosureOnlySGD(torch.optim.SGD):
    """Like LBFGS: ``step`` requires the closure."""

    def step(self, closure):  # type: ignore[no-untyped-def, override]
        return super().step(closure)


def setup(optimizer_class: type = torch.optim.SGD) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = optimizer_class(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    calls: list[int] = []

    def closure() -> torch.Tensor:
        calls.append(1)
        optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        return loss

    closure.calls = calls  # type: ignore[attr-defined]
    return model, optimizer, closure


def test_the_closure_runs_once_before_the_step_and_its_loss_is_returned() -> None:
    model, optimizer, closure = setup()
    seen: list[bool] = []
    optimizer.register_step_pre_hook(lambda opt, args, kwargs: seen.append(model.weight.grad is not None))
    before = model.weight.detach().clone()
    loss = Precision().optimizer_step(optimizer, model, closure)
    assert isinstance(loss, torch.Tensor)
    assert closure.calls == [1]
    assert seen == [True]  # step pre-hooks see this step's gradients
    assert not torch.equal(before, model.weight)


@pytest.mark.parametrize("optimizer_class", [torch.optim.LBFGS, ClosureOnlySGD], ids=["LBFGS", "closure-only"])
def test_an_optimizer_that_needs_its_closure_gets_it(optimizer_class: type) -> None:
    model, optimizer, closure = setup(optimizer_class)
    assert calls_closure_itself(optimizer)
    loss = Precision().optimizer_step(optimizer, model, closure)
    assert isinstance(loss, torch.Tensor)
    assert closure.calls  # called by the optimizer itself (LBFGS may call it several times)


def test_without_a_closure_the_optimizer_just_steps() -> None:
    model, optimizer, closure = setup()
    closure()
    before = model.weight.detach().clone()
    assert Precision().optimizer_step(optimizer, model, None) is None
    assert not torch.equal(before, model.weight)


def test_a_step_replaced_on_the_instance_is_inspected() -> None:
    _, optimizer, _ = setup()
    assert not calls_closure_itself(optimizer)
    optimizer.step = lambda closure: None  # type: ignore[method-assign, assignment]
    assert calls_closure_itself(optimizer)
