"""MixedPrecision: autocast from the accelerator, and the loss scaler of 16-mixed."""

from __future__ import annotations

import copy
import io
import re
from collections.abc import Callable
from typing import Any, ClassVar

import pytest
import torch

from torchplug._errors import MisconfigurationError
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.precision import MixedPrecision


class NoAutocastAccelerator(CPUAccelerator):
    """Hardware whose torch backend has no autocast."""

    name: ClassVar[str] = "no-autocast"
    autocast_device_type: ClassVar[str | None] = None


def connected(precision: str = "16-mixed", **kwargs: Any) -> MixedPrecision:
    plugin = MixedPrecision(precision=precision, **kwargs)
    plugin.connect_accelerator(CPUAccelerator())
    return plugin


def model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)


def closure_for(
    plugin: MixedPrecision,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    after_backward: Callable[[], None] | None = None,
) -> Callable[[], torch.Tensor]:
    x = torch.randn(64, 8, generator=torch.Generator().manual_seed(1))
    y = x.sum(dim=1, keepdim=True)

    def closure() -> torch.Tensor:
        with plugin.forward_context():
            loss = torch.nn.functional.mse_loss(model(x).float(), y)
        plugin.backward(plugin.pre_backward(loss, model), model, optimizer)
        if after_backward is not None:
            after_backward()
        return loss.detach()

    return closure


def train(plugin: MixedPrecision, model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
    for _ in range(steps):
        plugin.optimizer_step(optimizer, model, closure_for(plugin, model, optimizer))
        optimizer.zero_grad(set_to_none=True)


def snapshot(model: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# -- construction --------------------------------------------------------------------------------


@pytest.mark.parametrize("precision", ["16-true", "bf16", "32-true", "fp8"])
def test_an_unsupported_precision_lists_the_valid_ones(precision: str) -> None:
    expected = f"precision={precision!r} is not supported by MixedPrecision; choose '16-mixed' or 'bf16-mixed'"
    with pytest.raises(MisconfigurationError, match=re.escape(expected)):
        MixedPrecision(precision=precision)


def test_bf16_mixed_refuses_a_scaler() -> None:
    with pytest.raises(MisconfigurationError, match=r"precision='bf16-mixed' does not scale the loss.*Hint"):
        MixedPrecision(precision="bf16-mixed", scaler=torch.amp.GradScaler("cpu"))


def torchs_accelerator_or_the_cpu() -> str:
    accelerator = torch.accelerator.current_accelerator(check_available=True)
    return accelerator.type if accelerator is not None else "cpu"


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("16-mixed", torch.float16), ("bf16-mixed", torch.bfloat16)],
    ids=["16-mixed", "bf16-mixed"],
)
def test_used_alone_it_autocasts_on_torchs_accelerator_or_the_cpu(precision: str, dtype: torch.dtype) -> None:
    plugin = MixedPrecision(precision)  # no Trainer, no connect_accelerator()
    layer = torch.nn.Linear(4, 4)
    with plugin.forward_context():
        out = layer(torch.randn(2, 4))
    assert plugin.device_type == torchs_accelerator_or_the_cpu() == "cpu"  # no accelerator on these machines
    assert out.dtype == dtype
    assert (plugin.scaler is not None) is (precision == "16-mixed")


def test_used_alone_16_mixed_trains_with_its_own_scaler() -> None:
    plugin = MixedPrecision("16-mixed")
    model, optimizer = model_and_optimizer()
    before = snapshot(model)
    train(plugin, model, optimizer, steps=8)  # the first steps overflow and lower the scale
    assert isinstance(plugin.scaler, torch.amp.GradScaler) and plugin.scaler.get_scale() < 2.0**16
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_default_device_type_asks_torch_for_an_available_accelerator(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[dict[str, object]] = []

    def current_accelerator(**kwargs: object) -> torch.device:
        asked.append(kwargs)
        return torch.device("xpu")

    monkeypatch.setattr(torch.accelerator, "current_accelerator", current_accelerator)
    assert MixedPrecision("bf16-mixed").device_type == "xpu"
    assert asked == [{"check_available": True}]  # a GPU build of torch on a machine without a GPU: the CPU
    assert MixedPrecision("bf16-mixed", device_type="cpu").device_type == "cpu"
    assert len(asked) == 1


def test_the_accelerator_still_wins_over_the_default_once_connected(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda **_: torch.device("meta"))
    plugin = MixedPrecision("bf16-mixed")
    assert plugin.device_type == "meta"  # asked before connecting: the default
    plugin.connect_accelerator(CPUAccelerator())
    assert plugin.device_type == "cpu"


def test_nothing_is_decided_before_use() -> None:
    plugin = MixedPrecision(precision="16-mixed")
    assert repr(plugin) == "MixedPrecision(precision='16-mixed', device_type=None)"
    plugin.connect_accelerator(CPUAccelerator())
    assert repr(plugin) == "MixedPrecision(precision='16-mixed', device_type='cpu')"


@pytest.mark.parametrize(
    ("precision", "scaled"), [("16-mixed", True), ("bf16-mixed", False)], ids=["16-mixed", "bf16-mixed"]
)
def test_connect_accelerator_sets_the_autocast_device_type_and_the_scaler(precision: str, scaled: bool) -> None:
    plugin = connected(precision)
    assert plugin.device_type == "cpu"
    assert isinstance(plugin.scaler, torch.amp.GradScaler) is scaled
    assert repr(plugin) == f"MixedPrecision(precision={precision!r}, device_type='cpu')"


@pytest.mark.parametrize(
    ("precision", "hint"), [("16-mixed", "'16-true'"), ("bf16-mixed", "'bf16-true'")], ids=["16-mixed", "bf16-mixed"]
)
def test_an_accelerator_without_autocast_is_refused_with_a_hint(precision: str, hint: str) -> None:
    plugin = MixedPrecision(precision=precision)
    with pytest.raises(MisconfigurationError) as info:
        plugin.connect_accelerator(NoAutocastAccelerator())
    message = str(info.value)
    assert f"precision={precision!r}" in message
    assert "accelerator='no-autocast' does not support" in message
    assert f"Hint: use precision={hint}" in message


def test_an_explicit_device_type_wins_over_the_accelerator() -> None:
    plugin = MixedPrecision(precision="16-mixed", device_type="cpu")
    assert plugin.scaler is not None  # usable without a Trainer
    plugin.connect_accelerator(NoAutocastAccelerator())
    assert plugin.device_type == "cpu"


def test_a_given_scaler_is_used() -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=8.0)
    assert connected(scaler=scaler).scaler is scaler


# -- forward ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("precision", "dtype"),
    [("16-mixed", torch.float16), ("bf16-mixed", torch.bfloat16)],
    ids=["16-mixed", "bf16-mixed"],
)
def test_autocast_runs_matmuls_in_16_bits_and_keeps_the_weights_in_float32(precision: str, dtype: torch.dtype) -> None:
    plugin = connected(precision)
    layer = plugin.convert_module(torch.nn.Linear(4, 4))
    x = plugin.convert_input(torch.randn(2, 4))
    with plugin.forward_context():
        out = layer(x)
    assert out.dtype == dtype
    assert layer.weight.dtype == torch.float32 and x.dtype == torch.float32
    converted = plugin.convert_output({"out": out, "double": torch.ones(1, dtype=torch.float64)})
    assert converted["out"].dtype == torch.float32
    assert converted["double"].dtype == torch.float64  # only what autocast produced is cast


# -- the loss scaler -------------------------------------------------------------------------------


def test_the_loss_is_multiplied_by_the_scale() -> None:
    plugin = connected("16-mixed")
    loss = torch.tensor(3.0)
    assert float(plugin.pre_backward(loss, None)) == 3.0 * plugin.scaler.get_scale()
    assert connected("bf16-mixed").pre_backward(loss, None) is loss


@pytest.mark.parametrize("clip", [False, True], ids=["no-clipping", "clip-by-norm"])
def test_an_inf_gradient_skips_the_step_and_lowers_the_scale(clip: bool) -> None:
    plugin = connected("16-mixed", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**8))
    model, optimizer = model_and_optimizer()
    before, scale = snapshot(model), plugin.scaler.get_scale()

    def poison() -> None:
        next(iter(model.parameters())).grad[0, 0] = float("inf")
        if clip:
            plugin.clip_gradients(optimizer, 1.0, "norm")

    plugin.optimizer_step(optimizer, model, closure_for(plugin, model, optimizer, poison))
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert optimizer.state_dict()["state"] == {}  # not even the momentum was touched
    assert plugin.scaler.get_scale() == scale * 0.5
    # The next, finite step goes through.
    optimizer.zero_grad(set_to_none=True)
    plugin.optimizer_step(optimizer, model, closure_for(plugin, model, optimizer))
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_unscaling_twice_in_one_step_is_harmless() -> None:
    plugin = connected("16-mixed", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**8))
    model, optimizer = model_and_optimizer()
    norms = []

    def clip_twice() -> None:
        plugin.clip_gradients(optimizer, 0.5, "norm")
        plugin.unscale_gradients(optimizer)
        plugin.clip_gradients(optimizer, 0.5, "norm")
        norms.append(float(torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))))

    for _ in range(2):  # the second step unscales again: update() started a new step
        plugin.optimizer_step(optimizer, model, closure_for(plugin, model, optimizer, clip_twice))
        optimizer.zero_grad(set_to_none=True)
    assert norms == [pytest.approx(0.5, rel=1e-4)] * 2


def test_a_step_without_gradients_steps_nothing() -> None:
    plugin = connected("16-mixed")
    model, optimizer = model_and_optimizer()
    before, scale = snapshot(model), plugin.scaler.get_scale()
    assert plugin.optimizer_step(optimizer, model, lambda: None) is None  # the closure skipped backward
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert plugin.scaler.get_scale() == scale


class ClosureOnlySGD(torch.optim.SGD):
    """An optimizer that, like LBFGS, needs its closure (and may call it more than once)."""

    def step(self, closure):  # type: ignore[no-untyped-def, override]
        return super().step(closure)


@pytest.mark.parametrize("optimizer_class", [torch.optim.LBFGS, ClosureOnlySGD], ids=["LBFGS", "closure-only"])
def test_optimizers_that_call_the_closure_themselves_cannot_use_a_scaler(optimizer_class: type) -> None:
    plugin = connected("16-mixed")
    model, _ = model_and_optimizer()
    optimizer = optimizer_class(model.parameters(), lr=0.1)
    calls = []
    with pytest.raises(MisconfigurationError, match=rf"cannot train with {optimizer_class.__name__}.*bf16-mixed"):
        plugin.optimizer_step(optimizer, model, lambda: calls.append(1))
    assert calls == []  # refused before any work


def test_bf16_mixed_trains_with_lbfgs() -> None:
    plugin = connected("bf16-mixed")
    model, _ = model_and_optimizer()
    optimizer = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=4)
    inner = closure_for(plugin, model, optimizer)
    calls = []

    def closure() -> torch.Tensor:  # LBFGS calls it several times per step
        calls.append(1)
        optimizer.zero_grad(set_to_none=True)
        return inner()

    losses = [float(plugin.optimizer_step(optimizer, model, closure)) for _ in range(3)]
    assert len(calls) > 3
    assert losses[-1] < losses[0]


# -- state -----------------------------------------------------------------------------------------


def test_a_resumed_run_continues_bit_exactly() -> None:
    plugin = connected("16-mixed")
    model, optimizer = model_and_optimizer()
    train(plugin, model, optimizer, steps=4)  # the first steps overflow: the scale has moved
    assert plugin.scaler.get_scale() < 2.0**16
    buffer = io.BytesIO()
    torch.save(
        {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "precision": plugin.state_dict()}, buffer
    )
    train(plugin, model, optimizer, steps=4)

    def resume(load_precision: bool) -> tuple[MixedPrecision, torch.nn.Module]:
        buffer.seek(0)
        checkpoint = torch.load(buffer, weights_only=True)
        fresh = MixedPrecision(precision="16-mixed")
        if load_precision:
            fresh.load_state_dict(checkpoint["precision"])  # before connect_accelerator, as on a resume
        fresh.connect_accelerator(CPUAccelerator())
        resumed_model, resumed_optimizer = model_and_optimizer()
        resumed_model.load_state_dict(checkpoint["model"])
        resumed_optimizer.load_state_dict(checkpoint["optimizer"])
        train(fresh, resumed_model, resumed_optimizer, steps=4)
        return fresh, resumed_model

    fresh, resumed = resume(load_precision=True)
    assert fresh.state_dict() == plugin.state_dict()
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), resumed.parameters()))
    _, forgetful = resume(load_precision=False)  # without the scaler's state the run differs
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), forgetful.parameters()))


def test_state_loaded_after_connect_reaches_the_scaler() -> None:
    plugin = connected("16-mixed")
    plugin.load_state_dict({"scaler": {**plugin.state_dict()["scaler"], "scale": 128.0}})
    assert plugin.scaler.get_scale() == 128.0


def test_state_loaded_before_connect_is_saved_again_unchanged() -> None:
    state = {"scaler": {**connected("16-mixed").state_dict()["scaler"], "scale": 64.0}}
    plugin = MixedPrecision(precision="16-mixed")
    plugin.load_state_dict(copy.deepcopy(state))
    assert plugin.state_dict() == state


@pytest.mark.parametrize("state", [{}, {"scaler": {}}], ids=["no-scaler-saved", "disabled-scaler-saved"])
def test_a_checkpoint_without_scaler_state_leaves_the_scaler_fresh(state: dict[str, Any]) -> None:
    plugin = connected("16-mixed")
    plugin.load_state_dict(state)
    assert plugin.scaler.get_scale() == 2.0**16


def test_bf16_mixed_has_no_state_and_ignores_a_saved_scaler() -> None:
    plugin = connected("bf16-mixed")
    plugin.load_state_dict(connected("16-mixed").state_dict())
    assert plugin.state_dict() == {} and plugin.scaler is None


def test_teardown_keeps_the_scaler_for_the_next_run() -> None:
    plugin = connected("16-mixed")
    model, optimizer = model_and_optimizer()
    train(plugin, model, optimizer, steps=2)
    state = plugin.state_dict()
    plugin.teardown()
    assert plugin.state_dict() == state
    train(plugin, model, optimizer, steps=2)


@pytest.mark.parametrize("device_type", ["cdua", "meta", 0], ids=["misspelt", "no-autocast", "not-a-string"])
def test_a_device_type_torch_cannot_autocast_on_is_refused_when_the_plugin_is_made(device_type: object) -> None:
    with pytest.raises(
        MisconfigurationError, match=rf"^device_type={device_type!r} is not valid: torch cannot autocast on it"
    ):
        MixedPrecision("16-mixed", device_type=device_type)  # type: ignore[arg-type]


def test_lightnings_device_argument_names_the_autocast_device_type() -> None:
    assert MixedPrecision("bf16-mixed", device="cpu").device_type == "cpu"
    with pytest.raises(MisconfigurationError, match="both name the autocast device type"):
        MixedPrecision("bf16-mixed", device_type="cpu", device="cpu")
