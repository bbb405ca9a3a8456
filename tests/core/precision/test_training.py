"""Every built-in precision trains for real on the CPU, through the calls a Strategy makes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.precision import DoublePrecision, HalfPrecision, MixedPrecision, Precision

PLUGINS: dict[str, Callable[[], Precision]] = {
    "64-true": DoublePrecision,
    "32-true": Precision,
    "16-mixed": lambda: MixedPrecision(precision="16-mixed"),
    "bf16-mixed": lambda: MixedPrecision(precision="bf16-mixed"),
    "16-true": lambda: HalfPrecision(precision="16-true"),
    "bf16-true": lambda: HalfPrecision(precision="bf16-true"),
}
NAMES = list(PLUGINS)

#: dtype of the parameters, and of the activations under forward_context, for each precision.
PARAM_DTYPE = {
    "64-true": torch.float64,
    "32-true": torch.float32,
    "16-mixed": torch.float32,
    "bf16-mixed": torch.float32,
    "16-true": torch.float16,
    "bf16-true": torch.bfloat16,
}
ACTIVATION_DTYPE = {
    "64-true": torch.float64,
    "32-true": torch.float32,
    "16-mixed": torch.float16,
    "bf16-mixed": torch.bfloat16,
    "16-true": torch.float16,
    "bf16-true": torch.bfloat16,
}


def connected(name: str) -> Precision:
    """The plugin as the Trainer hands it to the strategy: created by name, then connected."""
    plugin = PLUGINS[name]()
    plugin.connect_accelerator(CPUAccelerator())
    return plugin


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(64, 8, generator=generator)
    return x, x.sum(dim=1, keepdim=True)


def make_closure(
    plugin: Precision,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    clip: tuple[float, str] | None = None,
    seen: dict[str, Any] | None = None,
) -> Callable[[], Any]:
    """The Trainer's step closure: forward in the precision's context, backward through it, then clip."""
    x, y = batch()

    def closure() -> torch.Tensor:
        with plugin.forward_context():
            output = model(plugin.convert_input(x))
        if seen is not None:
            seen["activation"] = output.dtype
        loss = torch.nn.functional.mse_loss(plugin.convert_output(output), y)
        scaled = plugin.pre_backward(loss, model)
        plugin.backward(scaled, model, optimizer)
        plugin.post_backward(scaled, model)
        if clip is not None:
            plugin.clip_gradients(optimizer, clip[0], clip[1])
        if seen is not None:
            seen["grads"] = [p.grad.detach().clone() for p in model.parameters()]
        return loss.detach()

    return closure


def train(plugin: Precision, steps: int, clip: tuple[float, str] | None = None) -> tuple[torch.nn.Module, list[float]]:
    model = plugin.convert_module(mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(steps):
        loss = plugin.optimizer_step(optimizer, model, make_closure(plugin, model, optimizer, clip))
        losses.append(float(loss))
        optimizer.zero_grad(set_to_none=True)
    return model, losses


@pytest.mark.parametrize("name", NAMES)
def test_a_few_steps_lower_the_loss(name: str) -> None:
    _, losses = train(connected(name), steps=20)
    assert all(torch.isfinite(torch.tensor(losses)))
    assert min(losses[-5:]) < 0.5 * losses[0]


@pytest.mark.parametrize("name", NAMES)
def test_clipping_does_not_stop_training(name: str) -> None:
    _, losses = train(connected(name), steps=20, clip=(1.0, "norm"))
    assert min(losses[-5:]) < 0.5 * losses[0]


@pytest.mark.parametrize("name", NAMES)
def test_parameters_activations_and_gradients_have_the_precision_dtype(name: str) -> None:
    plugin = connected(name)
    model = plugin.convert_module(mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    seen: dict[str, Any] = {}
    for _ in range(3):
        plugin.optimizer_step(optimizer, model, make_closure(plugin, model, optimizer, seen=seen))
    assert {p.dtype for p in model.parameters()} == {PARAM_DTYPE[name]}  # still, after the steps
    assert seen["activation"] == ACTIVATION_DTYPE[name]
    assert {g.dtype for g in seen["grads"]} == {PARAM_DTYPE[name]}


@pytest.mark.parametrize("name", NAMES)
def test_optimizer_step_returns_what_the_closure_returned(name: str) -> None:
    plugin = connected(name)
    model = plugin.convert_module(mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    closure = make_closure(plugin, model, optimizer)
    result = plugin.optimizer_step(optimizer, model, closure)
    assert isinstance(result, torch.Tensor) and result.ndim == 0


class RecordingSGD(torch.optim.SGD):
    """Keeps the gradients it is asked to step with: what the optimizer really sees."""

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        result = None
        if closure is not None:
            with torch.enable_grad():
                result = closure()
        self.seen = [p.grad.float() for group in self.param_groups for p in group["params"]]
        super().step()
        return result


def clipped_grads(name: str, clip_val: float, algorithm: str) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """The gradients one optimizer step sees, without and with clipping, in float32."""
    out = []
    for clip in (None, (clip_val, algorithm)):
        plugin = connected(name)
        if isinstance(plugin, MixedPrecision) and plugin.scaler is not None:  # a scale that does not overflow
            plugin = MixedPrecision("16-mixed", scaler=torch.amp.GradScaler("cpu", init_scale=2.0**8))
            plugin.connect_accelerator(CPUAccelerator())
        model = plugin.convert_module(mlp())
        optimizer = RecordingSGD(model.parameters(), lr=0.0)
        plugin.optimizer_step(optimizer, model, make_closure(plugin, model, optimizer, clip=clip))
        out.append(optimizer.seen)
    return out[0], out[1]


def total_norm(grads: list[torch.Tensor]) -> float:
    return float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))


@pytest.mark.parametrize("name", NAMES)
def test_clip_by_norm_acts_on_the_true_gradients(name: str) -> None:
    raw, clipped = clipped_grads(name, 0.5, "norm")
    assert total_norm(raw) > 1.0  # clipping has something to do
    # With a loss scaler, clipping scaled gradients would leave a norm of 0.5 / scale.
    assert total_norm(clipped) == pytest.approx(0.5, rel=1e-2)
    scale = 0.5 / total_norm(raw)
    for r, c in zip(raw, clipped):
        torch.testing.assert_close(c, r * scale, rtol=2e-2, atol=1e-3)


@pytest.mark.parametrize("name", NAMES)
def test_clip_by_value_acts_on_the_true_gradients(name: str) -> None:
    raw, clipped = clipped_grads(name, 0.125, "value")
    assert max(float(g.abs().max()) for g in raw) > 0.125
    assert max(float(g.abs().max()) for g in clipped) == 0.125
    for r, c in zip(raw, clipped):
        torch.testing.assert_close(c, r.clamp(-0.125, 0.125), rtol=2e-2, atol=1e-3)


@pytest.mark.parametrize("name", NAMES)
def test_an_unknown_clipping_algorithm_is_refused(name: str) -> None:
    plugin = connected(name)
    model = plugin.convert_module(mlp())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    make_closure(plugin, model, optimizer)()
    with pytest.raises(ValueError, match="gradient_clip_algorithm='max'"):
        plugin.clip_gradients(optimizer, 1.0, "max")


@pytest.mark.parametrize("name", NAMES)
def test_outputs_come_back_in_float32(name: str) -> None:
    plugin = connected(name)
    model = plugin.convert_module(mlp())
    with plugin.forward_context():
        output = model(plugin.convert_input(batch()[0]))
    assert plugin.convert_output({"y": output, "n": torch.tensor([1])})["y"].dtype == torch.float32


@pytest.mark.parametrize("name", NAMES)
def test_the_default_dtype_is_float32_again_after_every_context(name: str) -> None:
    plugin = connected(name)
    with plugin.forward_context():
        pass
    with plugin.tensor_init_context():
        pass
    with plugin.module_init_context():
        pass
    assert torch.get_default_dtype() == torch.float32


@pytest.mark.parametrize("name", NAMES)
def test_the_precision_is_exported_lazily_with_its_name(name: str) -> None:
    import torchplug.precision as package

    plugin = PLUGINS[name]()
    assert getattr(package, type(plugin).__name__) is type(plugin)
    assert getattr(plugin, "precision", type(plugin).name) == name


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = mlp()

    def training_step(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.mse_loss(self.net(x).float(), y)


@pytest.mark.parametrize("name", NAMES)
def test_the_single_device_strategy_trains_with_it(name: str) -> None:
    from torchplug.strategies.single_device import SingleDeviceStrategy

    strategy = SingleDeviceStrategy(accelerator=CPUAccelerator(), precision=connected(name))
    strategy.connect(Regressor())
    strategy.setup(lambda: [torch.optim.SGD(strategy.module.parameters(), lr=0.05, momentum=0.9)])
    optimizer = strategy.optimizers[0]
    x, y = batch()
    losses = []

    def closure() -> torch.Tensor:
        loss = strategy.training_step(strategy.precision.convert_input(x), y)
        strategy.backward(loss, optimizer)
        strategy.clip_gradients(optimizer, 1.0, "norm")
        return loss.detach()

    for _ in range(20):
        losses.append(float(strategy.optimizer_step(optimizer, closure)))
        optimizer.zero_grad(set_to_none=True)
    strategy.teardown()
    assert {p.dtype for p in strategy.module.parameters()} == {PARAM_DTYPE[name]}
    assert min(losses[-5:]) < 0.5 * losses[0]
