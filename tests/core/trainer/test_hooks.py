"""Every hook a user overrides runs, in Lightning's order; a hook that could never run is refused at the start.

The walking tests list the public methods of ``Module`` and ``Callback`` themselves: a hook added
to either base class fails them until a run calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from tests.core.trainer.models import quiet
from torchplug.precision.precision import Precision
from torchplug.strategies.single_device import SingleDeviceStrategy
from torchplug.trainer.hook_checks import BehaviourNoteWarning
from torchplug.utilities.warn import reset_warned

#: Public methods of Module that are its API for the user's code, not hooks the Trainer calls.
MODULE_API = {
    "log", "log_dict", "print", "save_hyperparameters", "load_from_checkpoint", "optimizers", "lr_schedulers",
    "manual_backward", "clip_gradients", "all_gather", "toggle_optimizer", "untoggle_optimizer", "toggled_optimizer",
    "freeze", "unfreeze", "to_torchscript", "to_onnx",
}  # fmt: skip
#: Hooks tested on their own, and why.
MODULE_APART = {
    "configure_sharded_model": "an alias of configure_model, which overriding both is refused: see "
    "test_configure_sharded_model_runs_as_configure_model_with_a_warning"
}
CALLBACK_API = {"state_key"}


def public_methods(cls: type) -> set[str]:
    return {name for name, value in vars(cls).items() if not name.startswith("_") and callable(value)}


def data(n: int = 32, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=generator)
    return TensorDataset(x, (x.sum(1) > 0).long())


class Small(torchplug.Module):
    """A linear classifier with its own data, a step-interval scheduler and every stage's step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self(batch[0]), batch[1]))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.log("test_loss", torch.nn.functional.cross_entropy(self(batch[0]), batch[1]))

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(-1)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1, 0.9)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(data(), batch_size=8)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(data(16, 1), batch_size=8)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(data(16, 1), batch_size=8)

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(data(16, 1), batch_size=8)


def recording(base: type, names: set[str], calls: list[str], prefix: str) -> type:
    """A subclass of ``base`` whose every method in ``names`` records its name, then runs the base's."""

    def wrapper(name: str) -> Callable[..., Any]:
        def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls.append(prefix + name)
            return getattr(super(cls, self), name)(*args, **kwargs)

        hook.__name__ = name
        return hook

    cls = type(f"Recording{base.__name__}", (base,), {name: wrapper(name) for name in sorted(names)})
    return cls


def full_run(model: torchplug.Module, callback: torchplug.Callback, tmp_path: Path) -> None:
    """fit (validation inside, a checkpoint saved), then fit on from it, validate, test and predict."""
    args = quiet(
        max_steps=4, limit_val_batches=1, num_sanity_val_steps=1, gradient_clip_val=1.0,
        callbacks=[callback], default_root_dir=tmp_path,
    )  # fmt: skip
    trainer = torchplug.Trainer(**args)
    trainer.fit(model)
    trainer.save_checkpoint(tmp_path / "model.ckpt")
    torchplug.Trainer(**{**args, "max_steps": 6}).fit(model, ckpt_path=tmp_path / "model.ckpt")
    trainer.validate(model, verbose=False)
    trainer.test(model, verbose=False)
    trainer.predict(model)


def test_every_module_hook_runs_when_overridden(tmp_path: Path) -> None:
    hooks = public_methods(torchplug.Module) - MODULE_API - set(MODULE_APART)
    calls: list[str] = []
    model = recording(Small, hooks, calls, "")()
    full_run(model, torchplug.Callback(), tmp_path)
    assert sorted(hooks - set(calls)) == []


def test_every_callback_hook_runs_when_overridden(tmp_path: Path) -> None:
    hooks = public_methods(torchplug.Callback) - CALLBACK_API
    calls: list[str] = []
    callback = recording(torchplug.Callback, hooks, calls, "")()
    full_run(Small(), callback, tmp_path)

    class Failing(Small):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        torchplug.Trainer(**quiet(max_steps=1, callbacks=[callback])).fit(Failing())
    assert sorted(hooks - set(calls)) == []


def test_every_datamodule_hook_runs_when_overridden(tmp_path: Path) -> None:
    hooks = public_methods(torchplug.DataModule) - {"save_hyperparameters", "from_datasets"}
    calls: list[str] = []

    class Data(torchplug.DataModule):
        def train_dataloader(self) -> DataLoader[Any]:
            return DataLoader(data(), batch_size=8)

        val_dataloader = test_dataloader = predict_dataloader = train_dataloader

    datamodule = recording(Data, hooks, calls, "")()

    class NoData(Small):
        train_dataloader = val_dataloader = test_dataloader = predict_dataloader = torchplug.Module.train_dataloader

    args = quiet(max_steps=2, limit_val_batches=1, default_root_dir=tmp_path)
    trainer = torchplug.Trainer(**args)
    trainer.fit(NoData(), datamodule=datamodule)
    trainer.save_checkpoint(tmp_path / "model.ckpt")
    torchplug.Trainer(**{**args, "max_steps": 3}).fit(
        NoData(), datamodule=datamodule, ckpt_path=tmp_path / "model.ckpt"
    )
    trainer.test(NoData(), datamodule=datamodule, verbose=False)
    trainer.predict(NoData(), datamodule=datamodule)

    class Failing(NoData):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        torchplug.Trainer(**quiet(max_steps=1)).fit(Failing(), datamodule=datamodule)
    assert sorted(hooks - set(calls)) == []


# -- the order ----------------------------------------------------------------------------------------

#: What Lightning 2.6 calls, in order, for the model and callback of test_hook_order: sanity check
#: with one batch, two training batches accumulated into one step (clipping, a step scheduler), one
#: validation batch, the epoch end ("M." the module, "C." the callback).
FIT_ORDER = """
M.configure_callbacks M.prepare_data C.setup M.setup M.configure_model C.on_fit_start M.on_fit_start
C.on_sanity_check_start M.val_dataloader M.on_validation_model_eval C.on_validation_start M.on_validation_start
C.on_validation_epoch_start M.on_validation_epoch_start
M.on_before_batch_transfer M.transfer_batch_to_device M.on_after_batch_transfer
C.on_validation_batch_start M.on_validation_batch_start M.validation_step C.on_validation_batch_end
M.on_validation_batch_end C.on_validation_epoch_end M.on_validation_epoch_end C.on_validation_end
M.on_validation_end M.on_validation_model_train C.on_sanity_check_end
M.train_dataloader C.on_train_start M.on_train_start C.on_train_epoch_start M.on_train_epoch_start
M.on_before_batch_transfer M.transfer_batch_to_device M.on_after_batch_transfer
C.on_train_batch_start M.on_train_batch_start M.training_step C.on_before_zero_grad M.on_before_zero_grad
M.optimizer_zero_grad C.on_before_backward M.on_before_backward M.backward C.on_after_backward
M.on_after_backward C.on_train_batch_end M.on_train_batch_end
M.on_before_batch_transfer M.transfer_batch_to_device M.on_after_batch_transfer
C.on_train_batch_start M.on_train_batch_start M.optimizer_step M.training_step C.on_before_backward
M.on_before_backward M.backward C.on_after_backward M.on_after_backward C.on_before_optimizer_step
M.on_before_optimizer_step M.configure_gradient_clipping M.lr_scheduler_step C.on_train_batch_end
M.on_train_batch_end
M.on_validation_model_zero_grad M.on_validation_model_eval C.on_validation_start M.on_validation_start
C.on_validation_epoch_start M.on_validation_epoch_start
M.on_before_batch_transfer M.transfer_batch_to_device M.on_after_batch_transfer
C.on_validation_batch_start M.on_validation_batch_start M.validation_step C.on_validation_batch_end
M.on_validation_batch_end C.on_validation_epoch_end M.on_validation_epoch_end C.on_validation_end
M.on_validation_end M.on_validation_model_train
C.on_train_epoch_end M.on_train_epoch_end C.on_train_end M.on_train_end C.on_fit_end M.on_fit_end
C.teardown M.teardown
""".split()  # noqa: SIM905  (read as a text: one line per phase)


def test_hook_order_of_a_fit() -> None:
    module_hooks = public_methods(torchplug.Module) - MODULE_API - set(MODULE_APART) - {"configure_optimizers"}
    callback_hooks = public_methods(torchplug.Callback) - CALLBACK_API - {"state_dict", "load_state_dict"}
    calls: list[str] = []
    model = recording(Small, module_hooks, calls, "M.")()
    callback = recording(torchplug.Callback, callback_hooks, calls, "C.")()
    trainer = torchplug.Trainer(
        **quiet(
            max_steps=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=1, accumulate_grad_batches=2,
            gradient_clip_val=1.0, callbacks=[callback],
        )
    )  # fmt: skip
    trainer.fit(model)
    assert calls == FIT_ORDER


def test_a_hook_wrapped_by_a_decorator_without_wraps_still_runs() -> None:
    seen: list[int] = []

    def plain_decorator(function: Callable[..., Any]) -> Callable[..., Any]:
        def inner(*args: Any, **kwargs: Any) -> Any:  # no functools.wraps: its __name__ is "inner"
            return function(*args, **kwargs)

        return inner

    class Decorated(Small):
        @plain_decorator
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen.append(batch_idx)

    torchplug.Trainer(**quiet(max_steps=3, limit_val_batches=0)).fit(Decorated())
    assert seen == [0, 1, 2]


# -- the optimization hooks ---------------------------------------------------------------------------


def test_optimizer_step_runs_the_learning_rate_warm_up_recipe() -> None:
    lrs: list[float] = []

    class WarmUp(Small):
        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any) -> None:
            optimizer.step(closure=optimizer_closure)
            if self.trainer.global_step < 4:  # the documented recipe: scale the lr up over the first steps
                scale = min(1.0, float(self.trainer.global_step + 1) / 4.0)
                for group in optimizer.param_groups:
                    group["lr"] = scale * 0.1
            lrs.append(optimizer.param_groups[0]["lr"])

    torchplug.Trainer(**quiet(max_steps=6, limit_val_batches=0)).fit(WarmUp())
    assert lrs == pytest.approx([0.025, 0.05, 0.075, 0.1, 0.1, 0.1])


def test_optimizer_zero_grad_override_decides_how_gradients_are_reset() -> None:
    grads: list[Any] = []

    class ZeroesInPlace(Small):
        def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
            optimizer.zero_grad(set_to_none=False)
            grad = self.layer.weight.grad
            grads.append(None if grad is None else grad.clone())

    torchplug.Trainer(**quiet(max_steps=2, limit_val_batches=0)).fit(ZeroesInPlace())
    assert grads[0] is None  # nothing yet at the first step
    assert grads[1] is not None and not grads[1].any()  # zeroed, not freed


def test_lr_scheduler_step_override_steps_a_scheduler_torch_does_not_know() -> None:
    class Halving:
        def __init__(self, optimizer: torch.optim.Optimizer) -> None:
            self.optimizer = optimizer

        def step(self) -> None:
            for group in self.optimizer.param_groups:
                group["lr"] /= 2

    class Custom(Small):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=1.0)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": Halving(optimizer), "interval": "step"}}

        def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
            scheduler.step()

    model = Custom()
    trainer = torchplug.Trainer(**quiet(max_steps=3, limit_val_batches=0))
    trainer.fit(model)
    assert trainer.optimizers[0].param_groups[0]["lr"] == 1.0 / 8


def test_configure_gradient_clipping_override_clips_as_it_decides() -> None:
    largest: list[float] = []

    class ClipByValue(Small):
        def configure_gradient_clipping(
            self, optimizer: Any, gradient_clip_val: Any = None, algorithm: Any = None
        ) -> None:
            self.clip_gradients(optimizer, gradient_clip_val=0.001, gradient_clip_algorithm="value")
            largest.append(max(float(p.grad.abs().max()) for p in self.parameters()))

    torchplug.Trainer(**quiet(max_steps=2, limit_val_batches=0)).fit(ClipByValue())
    assert largest == [pytest.approx(0.001), pytest.approx(0.001)]


class Plain(Small):
    """Small with a plain SGD optimizer (no scheduler), to compare with a loop written by hand."""

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class DoubledGradients(Plain):
    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        (2 * loss).backward(*args, **kwargs)


class ManualDoubledGradients(DoubledGradients):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(super().training_step(batch, batch_idx))
        optimizer.step()


def sgd_by_hand(loss_factor: float, steps: int = 2) -> torch.Tensor:
    torch.manual_seed(0)
    model = Plain()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for batch_idx, batch in zip(range(steps), model.train_dataloader()):
        optimizer.zero_grad()
        (loss_factor * model.training_step(batch, batch_idx)).backward()
        optimizer.step()
    return model.layer.weight.detach().clone()


@pytest.mark.parametrize("cls", [DoubledGradients, ManualDoubledGradients], ids=["automatic", "manual"])
def test_the_backward_hook_computes_the_gradients(cls: type[Plain]) -> None:
    torch.manual_seed(0)
    model = cls()
    torchplug.Trainer(**quiet(max_steps=2, limit_val_batches=0)).fit(model)
    assert torch.equal(model.layer.weight, sgd_by_hand(loss_factor=2.0))
    assert not torch.equal(model.layer.weight, sgd_by_hand(loss_factor=1.0))


def test_manual_optimization_runs_the_backward_and_before_step_hooks() -> None:
    calls: list[str] = []

    class Manual(Small):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            calls.append("step")
            self.manual_backward(super().training_step(batch, batch_idx))
            optimizer.step()

        def on_before_backward(self, loss: torch.Tensor) -> None:
            calls.append("on_before_backward")

        def on_after_backward(self) -> None:
            calls.append("on_after_backward")

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            calls.append(f"on_before_optimizer_step: gradients {self.layer.weight.grad is not None}")

    torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0)).fit(Manual())
    assert calls == ["step", "on_before_backward", "on_after_backward", "on_before_optimizer_step: gradients True"]


# -- batch, callbacks and model hooks -----------------------------------------------------------------


def test_batch_transfer_hooks_change_the_batch_in_order() -> None:
    seen: list[torch.Tensor] = []

    class Transfers(Small):
        def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            return [batch[0] * 0 + 1, batch[1]]

        def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
            return [batch[0].to(device) + 1, batch[1].to(device)]

        def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
            return [batch[0] * 10, batch[1]]

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            seen.append(batch[0])
            return super().training_step(batch, batch_idx)

    torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0)).fit(Transfers())
    assert bool((seen[0] == 20).all())


def test_configure_callbacks_adds_callbacks_and_replaces_those_of_the_same_type() -> None:
    class Marker(torchplug.Callback):
        def __init__(self, name: str) -> None:
            self.name = name

    class WithCallbacks(Small):
        def configure_callbacks(self) -> Any:
            return [Marker("model's")]

    trainer = torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0, callbacks=[Marker("trainer's")]))
    trainer.fit(WithCallbacks())
    assert [c.name for c in trainer.callbacks if isinstance(c, Marker)] == ["model's"]


def test_configure_model_builds_layers_in_every_run() -> None:
    runs: list[str] = []

    class Lazy(Small):
        def configure_model(self) -> None:
            runs.append(self.trainer.state.fn.value)

    model = Lazy()
    trainer = torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0))
    trainer.fit(model)
    trainer.test(model, verbose=False)
    assert runs == ["fit", "test"]


def test_configure_sharded_model_runs_as_configure_model_with_a_warning() -> None:
    runs: list[str] = []

    class OldName(Small):
        def configure_sharded_model(self) -> None:
            runs.append("configure_sharded_model")

    with pytest.warns(DeprecationWarning, match="older name of configure_model"):
        torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0)).fit(OldName())
    assert runs == ["configure_sharded_model"]


# -- refused: defined, but nothing would call it -------------------------------------------------------


class Manual(Small):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> None:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        self.manual_backward(super().training_step(batch, batch_idx))
        optimizer.step()


def _with(base: type, **methods: Callable[..., Any]) -> type:
    return type(f"{base.__name__}With", (base,), methods)


class EngineBackward(Precision):
    """A precision whose engine computes the gradients itself (as DeepSpeed's does)."""

    def backward(self, tensor: torch.Tensor, module: Any, optimizer: Any, *args: Any, **kwargs: Any) -> None:
        tensor.backward(*args, **kwargs)


def _nothing(self: Any, *args: Any) -> None:
    return None


def _old_lr_scheduler_step(self: Any, scheduler: Any, optimizer_idx: int, metric: Any) -> None:
    return None


def _old_optimizer_step(
    self: Any, epoch: int, batch_idx: int, optimizer: Any, optimizer_idx: int, closure: Any
) -> None:
    return None


@pytest.mark.parametrize(
    ("model", "trainer_args", "message"),
    [
        pytest.param(
            _with(Small, training_epoch_end=_nothing)(), {}, "training_epoch_end: a Lightning 1.x hook", id="1.x-hook"
        ),
        pytest.param(
            _with(Small, on_epoch_end=_nothing)(), {}, "Hint: use on_train_epoch_end", id="1.x-hook-with-replacement"
        ),
        pytest.param(
            _with(Small, lr_scheduler_step=_old_lr_scheduler_step)(), {}, "lr_scheduler_step: its signature has "
            "optimizer_idx", id="1.x-signature",
        ),
        pytest.param(
            _with(Small, optimizer_step=_old_optimizer_step)(), {}, "optimizer_step: its signature has optimizer_idx",
            id="1.x-optimizer_step",
        ),
        pytest.param(
            _with(Manual, optimizer_step=_nothing)(), {}, "optimizer_step: a hook of automatic optimization",
            id="manual-optimizer_step",
        ),
        pytest.param(
            _with(Manual, configure_gradient_clipping=_nothing)(), {}, "configure_gradient_clipping: a hook of "
            "automatic optimization", id="manual-clipping-hook",
        ),
        pytest.param(
            _with(Manual, on_before_zero_grad=_nothing)(), {}, "on_before_zero_grad: a hook of automatic",
            id="manual-on_before_zero_grad",
        ),
        pytest.param(
            Manual(), {"accumulate_grad_batches": 2}, "Trainer(accumulate_grad_batches=2) with manual optimization",
            id="manual-accumulate",
        ),
        pytest.param(
            Manual(), {"gradient_clip_val": 0.5}, "Trainer(gradient_clip_val=0.5) with manual optimization",
            id="manual-clip",
        ),
        pytest.param(
            _with(Small, backward=_nothing)(), {"strategy": SingleDeviceStrategy(precision=EngineBackward())},
            "backward: EngineBackward computes the gradients itself", id="backward-owned-by-an-engine",
        ),
        pytest.param(
            _with(Small, configure_sharded_model=_nothing, configure_model=_nothing)(), {},
            "configure_sharded_model: configure_model is overridden too", id="both-model-hooks",
        ),
    ],
)  # fmt: skip
def test_a_hook_that_nothing_would_call_is_refused_at_fit_start(
    model: torchplug.Module, trainer_args: dict[str, Any], message: str
) -> None:
    trainer = torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0, **trainer_args))
    with pytest.raises(torchplug.MisconfigurationError, match="silently ignored, so the run is refused") as info:
        trainer.fit(model)
    assert message in str(info.value)
    assert model.layer.weight.grad is None  # refused before anything ran


@pytest.mark.parametrize("call", ["validate", "test", "predict"])
def test_both_model_hooks_are_refused_by_every_call_as_in_lightning(call: str) -> None:
    """Lightning refuses the pair whatever the call; the older name alone runs as configure_model."""
    model = _with(Small, configure_sharded_model=_nothing, configure_model=_nothing)()
    trainer = torchplug.Trainer(**quiet())
    with pytest.raises(torchplug.MisconfigurationError, match="configure_sharded_model: configure_model is overridden"):
        getattr(trainer, call)(model, DataLoader(data(), batch_size=8))


def test_a_callback_hook_of_lightning_1_is_refused() -> None:
    class OldCallback(torchplug.Callback):
        def on_batch_end(self, trainer: Any, module: Any) -> None:
            pass

    trainer = torchplug.Trainer(**quiet(max_steps=1, callbacks=[OldCallback()]))
    with pytest.raises(torchplug.MisconfigurationError, match=r"OldCallback\.on_batch_end: a Lightning 1\.x hook"):
        trainer.fit(Small())


class _Data(torchplug.DataModule):
    def train_dataloader(self) -> Any:
        return Small().train_dataloader()


def test_a_datamodule_hook_of_lightning_1_is_refused() -> None:
    """Lightning 2 replaced them with state_dict/load_state_dict; the DataModule's state was silently not saved."""

    class OldData(_Data):
        def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
            checkpoint["position"] = 3

    trainer = torchplug.Trainer(**quiet(max_steps=1))
    with pytest.raises(torchplug.MisconfigurationError) as info:
        trainer.fit(Small(), datamodule=OldData())
    assert "OldData.on_save_checkpoint: a Lightning 1.x DataModule hook that no longer exists" in str(info.value)
    assert "Hint: use state_dict (what it returns is saved in checkpoints)." in str(info.value)


def test_a_module_hook_defined_on_a_datamodule_is_named() -> None:
    """Neither Lightning nor torchplug calls a Module's hooks on a DataModule; it was silent."""
    started: list[int] = []

    class EpochData(_Data):
        def on_train_epoch_start(self) -> None:
            started.append(1)

    reset_warned()
    with pytest.warns(UserWarning, match="EpochData defines on_train_epoch_start: hooks of a Module or Callback"):
        torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0)).fit(Small(), datamodule=EpochData())
    assert started == []


def test_on_before_backward_gets_the_unscaled_loss_and_the_run_says_so() -> None:
    seen: list[tuple[float, float]] = []

    class Watches(Plain):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.returned = super().training_step(batch, batch_idx)
            return self.returned

        def on_before_backward(self, loss: torch.Tensor) -> None:
            seen.append((float(loss.detach()), float(self.returned.detach())))

    reset_warned()
    with pytest.warns(BehaviourNoteWarning, match=r"on_before_backward \(Watches\) receives the loss before"):
        torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0, precision="16-mixed")).fit(Watches())
    assert seen[0][0] == seen[0][1]
