"""The loop arguments (limits, validation schedule, accumulation, clipping, schedulers), logging, and hooks."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

import torchplug
from tests.core.trainer.models import BlobData, Classifier, blobs, quiet
from torchplug.strategies.single_device import SingleDeviceStrategy

TrainerArgs = Callable[..., dict[str, Any]]


class Recorder(torchplug.Callback):
    """Records every hook call as (hook, global_step) and the validation runs."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.validations: list[tuple[int, int]] = []

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        self.calls.append("train_epoch_start")

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("train_epoch_end")

    def on_validation_start(self, trainer: Any, module: Any) -> None:
        self.calls.append("sanity_start" if trainer.sanity_checking else "validation_start")
        if not trainer.sanity_checking:
            self.validations.append((trainer.current_epoch, trainer.fit_loop.progress.batches_done))

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.calls.append("train_start")

    def on_train_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("train_end")

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        self.calls.append("fit_start")

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("fit_end")


def _fit(
    trainer_kwargs: dict[str, Any], model: torchplug.Module | None = None, data: Any = None
) -> tuple[torchplug.Trainer, Recorder]:
    recorder = Recorder()
    torch.manual_seed(0)
    trainer = torchplug.Trainer(**quiet(callbacks=[recorder], **trainer_kwargs))
    trainer.fit(model or Classifier(), datamodule=data or BlobData())
    return trainer, recorder


def test_hook_order_of_a_fit() -> None:
    _, recorder = _fit({"max_epochs": 2, "num_sanity_val_steps": 2})
    assert recorder.calls == [
        "fit_start",
        "sanity_start",
        "train_start",
        "train_epoch_start",
        "validation_start",
        "train_epoch_end",
        "train_epoch_start",
        "validation_start",
        "train_epoch_end",
        "train_end",
        "fit_end",
    ]


@pytest.mark.parametrize(
    ("kwargs", "steps", "epochs"),
    [
        ({"max_steps": 20}, 20, 2),
        ({"max_epochs": 2, "limit_train_batches": 5}, 10, 2),
        ({"max_epochs": 2, "limit_train_batches": 0.25}, 8, 2),
        ({"max_epochs": 1, "accumulate_grad_batches": 4}, 4, 1),
        ({"max_epochs": 1, "accumulate_grad_batches": 5}, 4, 1),  # 16 batches: 3 full groups + the last partial one
        ({"fast_dev_run": True}, 1, 1),
        ({"fast_dev_run": 3}, 3, 1),
    ],
)
def test_steps_and_epochs(kwargs: dict[str, Any], steps: int, epochs: int) -> None:
    trainer, _ = _fit(kwargs)
    assert trainer.global_step == steps
    assert trainer.current_epoch == epochs


@pytest.mark.parametrize(
    ("kwargs", "validations"),
    [
        ({"max_epochs": 2}, [(0, 16), (1, 16)]),
        ({"max_epochs": 1, "val_check_interval": 0.25}, [(0, 4), (0, 8), (0, 12), (0, 16)]),
        ({"max_epochs": 1, "val_check_interval": 5}, [(0, 5), (0, 10), (0, 15)]),
        ({"max_epochs": 4, "check_val_every_n_epoch": 2}, [(1, 16), (3, 16)]),
        ({"max_epochs": 2, "val_check_interval": 10, "check_val_every_n_epoch": None}, [(0, 10), (1, 4), (1, 14)]),
        ({"max_epochs": 2, "limit_val_batches": 0}, []),
    ],
)
def test_validation_schedule(kwargs: dict[str, Any], validations: list[tuple[int, int]]) -> None:
    _, recorder = _fit(kwargs)
    assert recorder.validations == validations


def test_sanity_check_runs_before_training_and_is_not_reported() -> None:
    seen: list[int] = []
    after_sanity: list[dict[str, Any]] = []

    class CountVal(Classifier):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            seen.append(batch_idx)
            super().validation_step(batch, batch_idx)

        def on_train_start(self) -> None:
            after_sanity.append(dict(self.trainer.callback_metrics))

    _, recorder = _fit({"max_epochs": 1, "num_sanity_val_steps": 1}, model=CountVal())
    assert recorder.calls[:2] == ["fit_start", "sanity_start"]
    assert seen == [0, 0, 1]  # one sanity batch, then the two real validation batches
    assert after_sanity == [{}]  # the sanity check's values reach no callback and no logger


def test_epoch_metrics_are_batch_size_weighted_means() -> None:
    class LogSize(Classifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("size", float(len(batch[0])), on_step=False, on_epoch=True)
            return super().training_step(batch, batch_idx)

    trainer, _ = _fit({"max_epochs": 1}, model=LogSize(), data=BlobData(batch_size=100))
    # batches of 100, 100, 100, 100, 100, 12: the weighted mean of the sizes is sum(s*s)/sum(s)
    sizes = [100] * 5 + [12]
    assert trainer.callback_metrics["size"].item() == pytest.approx(sum(s * s for s in sizes) / sum(sizes))


def test_on_step_and_on_epoch_give_two_keys(tmp_path: Any) -> None:
    class Both(Classifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("both", loss, on_step=True, on_epoch=True)
            return loss

    trainer, _ = _fit({"max_epochs": 1}, model=Both())
    assert {"both_step", "both_epoch", "both"} <= set(trainer.callback_metrics)
    assert trainer.callback_metrics["both"] is not None


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (torch.ones(3), ValueError, "needs one number, got a tensor of shape (3,)"),
        ("high", TypeError, "needs a number, a one-element tensor or a torchmetrics Metric, got str"),
    ],
)
def test_log_rejects_values_it_cannot_record(value: Any, error: type[Exception], message: str) -> None:
    class Bad(Classifier):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("bad", value)
            return super().training_step(batch, batch_idx)

    with pytest.raises(error) as info:
        _fit({"max_steps": 1}, model=Bad())
    assert message in str(info.value)


def test_log_outside_a_trainer_warns_once() -> None:
    model = Classifier()
    with pytest.warns(UserWarning, match="outside a Trainer run"):
        model.log("x", 1.0)


def _grad_norm(module: torch.nn.Module) -> float:
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack([g.norm() for g in grads])).item()


def test_gradient_clipping_by_norm_bounds_the_update() -> None:
    seen_before_clipping: list[float] = []
    stepped_with: list[float] = []

    class Watch(torchplug.Callback):
        def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
            seen_before_clipping.append(_grad_norm(module))

    class Recording(Classifier):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
            stepped_with.append(_grad_norm(self))  # the gradients stay until the next zero_grad

    trainer = torchplug.Trainer(**quiet(max_steps=10, gradient_clip_val=0.01, callbacks=[Watch()]))
    trainer.fit(Recording(), datamodule=BlobData())
    assert len(stepped_with) == 10 and max(stepped_with) <= 0.01 + 1e-6
    # on_before_optimizer_step runs before the clipping, as in Lightning: it sees the true gradients
    assert len(seen_before_clipping) == 10 and min(seen_before_clipping) > 0.01


@pytest.mark.parametrize(("scheduler", "expected_lr"), [("step", 0.05 * 0.5**3), ("epoch", 0.05 * 0.8**2)])
def test_schedulers_step_at_their_interval(scheduler: str, expected_lr: float) -> None:
    trainer, _ = _fit(
        {"max_epochs": 2 if scheduler == "epoch" else 1, "limit_train_batches": 16 if scheduler == "epoch" else 15},
        model=Classifier(scheduler=scheduler),
    )
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(expected_lr)


def test_reduce_on_plateau_needs_a_logged_monitor() -> None:
    class Plateau(Classifier):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "nope"}}

    with pytest.raises(
        torchplug.MisconfigurationError, match="ReduceLROnPlateau monitors 'nope', which was not logged"
    ):
        _fit({"max_epochs": 1}, model=Plateau())


def _sgd(module: torch.nn.Module) -> torch.optim.SGD:
    return torch.optim.SGD(module.parameters(), lr=0.1)


def _plateau(optimizer: torch.optim.Optimizer) -> Any:
    return torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0)


@pytest.mark.parametrize("scheduler_dict", [False, True], ids=["scheduler", "scheduler-dict"])
def test_reduce_on_plateau_with_the_monitor_beside_the_scheduler_as_lightning_documents(scheduler_dict: bool) -> None:
    """Lightning's documented form {"optimizer", "lr_scheduler", "monitor"} was refused as if it had no monitor."""

    class Plateau(Classifier):
        def configure_optimizers(self) -> Any:
            optimizer = _sgd(self)
            scheduler = _plateau(optimizer)
            given = {"scheduler": scheduler} if scheduler_dict else scheduler
            return {"optimizer": optimizer, "lr_scheduler": given, "monitor": "train_loss"}

    trainer, _ = _fit({"max_epochs": 1}, model=Plateau())
    assert trainer.lr_scheduler_configs[0].monitor == "train_loss"


def test_reduce_on_plateau_in_manual_optimization_needs_no_monitor_and_ignored_keys_are_named() -> None:
    """As in Lightning: the module steps it itself; keys only the Trainer's stepping reads are said to be ignored."""

    class ManualPlateau(Classifier):
        def __init__(self, with_keys: bool) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.with_keys = with_keys

        def training_step(self, batch: Any, batch_idx: int) -> None:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            loss = super().training_step(batch, batch_idx)
            self.manual_backward(loss)
            optimizer.step()
            self.lr_schedulers().step(loss.detach())

        def configure_optimizers(self) -> Any:
            optimizer = _sgd(self)
            if self.with_keys:
                config = {"scheduler": _plateau(optimizer), "monitor": "val_loss", "frequency": 2}
                return {"optimizer": optimizer, "lr_scheduler": config}
            return [optimizer], [_plateau(optimizer)]

    trainer, _ = _fit({"max_steps": 3}, model=ManualPlateau(with_keys=False))
    assert trainer.global_step == 3
    with pytest.warns(RuntimeWarning, match="sets frequency, monitor, which manual optimization ignores"):
        _fit({"max_steps": 3}, model=ManualPlateau(with_keys=True))


class _Halving:
    """A scheduler torch does not know, without a ``step`` the default ``lr_scheduler_step`` could call."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer


class _Stepping(_Halving):
    """A scheduler with a ``step`` but no state to save."""

    def step(self) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] /= 2


def _returning(case: str, module: torch.nn.Module) -> Any:
    optimizer = _sgd(module)
    if case == "scheduler-class":
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.StepLR}
    if case == "none-in-the-scheduler-list":
        return [optimizer], [None]
    if case == "scheduler-of-another-optimizer":
        return [optimizer], [torch.optim.lr_scheduler.StepLR(_sgd(module), 1)]
    if case == "custom-scheduler-without-step":
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": _Halving(optimizer)}}
    if case == "custom-scheduler-without-state-dict":
        return {"optimizer": optimizer, "lr_scheduler": _Stepping(optimizer)}
    config = {"scheduler": _plateau(optimizer), "monitor": "x"}
    config.update({"strict": "no"} if case == "strict-as-a-string" else {"frequency": True})
    return {"optimizer": optimizer, "lr_scheduler": config}


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            "scheduler-class",
            "lr_scheduler=<class 'torch.optim.lr_scheduler.StepLR'> is not valid: it is the class, not a scheduler "
            "made from it, so it could never step. Hint: return an instance built on your optimizer (StepLR(",
        ),
        ("none-in-the-scheduler-list", "lr_scheduler=None is not valid: it is no step() method"),
        (
            "scheduler-of-another-optimizer",
            "lr_scheduler=StepLR is not valid: it changes the learning rate of an optimizer that "
            "configure_optimizers() did not return",
        ),
        ("custom-scheduler-without-step", "it is no step() method, so it could never step"),
        ("strict-as-a-string", "lr_scheduler strict='no' is not valid: give True"),
        ("frequency-as-a-bool", "lr_scheduler frequency=True: give a positive int."),
    ],
    ids=[
        "scheduler-class",
        "none-in-the-scheduler-list",
        "scheduler-of-another-optimizer",
        "custom-scheduler-without-step",
        "strict-as-a-string",
        "frequency-as-a-bool",
    ],
)
def test_a_scheduler_that_could_never_step_what_is_trained_is_refused_at_setup(case: str, message: str) -> None:
    """These were accepted, then failed at the first epoch end or checkpoint, or changed no optimizer in use."""

    class Bad(Classifier):
        def configure_optimizers(self) -> Any:
            return _returning(case, self)

    with pytest.raises(torchplug.MisconfigurationError) as info:
        _fit({"max_steps": 1}, model=Bad())
    assert message in str(info.value)


def test_a_scheduler_without_state_is_refused_where_checkpoints_are_saved_and_warned_elsewhere(tmp_path: Path) -> None:
    class Stateless(Classifier):
        def configure_optimizers(self) -> Any:
            return _returning("custom-scheduler-without-state-dict", self)

    expected = (
        "lr_scheduler=_Stepping has no state_dict() and no load_state_dict(), so no checkpoint can hold it "
        "and no resume restore it"
    )
    with pytest.raises(torchplug.MisconfigurationError, match=re.escape(expected + ", and this run saves")):
        _fit({"max_steps": 1, "enable_checkpointing": True, "default_root_dir": str(tmp_path)}, model=Stateless())

    with pytest.warns(UserWarning, match=re.escape(expected + ": trainer.save_checkpoint() and the checkpoint")):
        trainer, _ = _fit({"max_steps": 2}, model=Stateless())
    assert trainer.global_step == 2  # it trains
    with pytest.raises(torchplug.MisconfigurationError, match=r"Cannot save a checkpoint: lr_scheduler=_Stepping"):
        trainer.save_checkpoint(tmp_path / "x.ckpt")
    assert not (tmp_path / "x.ckpt").exists()


def test_manual_optimization() -> None:
    class Manual(Classifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(self(batch[0]), batch[1])
            self.manual_backward(loss)
            optimizer.step()
            return loss

    trainer, _ = _fit({"max_epochs": 3}, model=Manual())
    assert trainer.global_step == 48
    (result,) = trainer.validate(datamodule=BlobData())
    assert result["val_acc"] > 0.9


def test_manual_backward_passes_its_arguments_to_backward() -> None:
    """``manual_backward(loss, retain_graph=True)`` keeps the graph, so a second backward of it works."""

    class Twice(Classifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            optimizer = self.optimizers()
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(self(batch[0]), batch[1])
            self.manual_backward(loss, retain_graph=True)
            once = [p.grad.clone() for p in self.parameters()]
            self.manual_backward(loss)  # the graph is still there: gradients add up
            for first, p in zip(once, self.parameters()):
                torch.testing.assert_close(p.grad, 2 * first)
            optimizer.step()
            return loss

    trainer, _ = _fit({"max_steps": 2}, model=Twice())
    assert trainer.global_step == 2


def test_two_optimizers_need_manual_optimization() -> None:
    class Two(Classifier):
        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.Adam(self.parameters())]

    with pytest.raises(torchplug.MisconfigurationError, match=r"set self\.automatic_optimization = False"):
        _fit({"max_steps": 1}, model=Two())


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ("adam", "configure_optimizers() returned str"),
        ({"optimizer": None, "bogus": 1}, "dict has keys ['bogus', 'optimizer']"),
    ],
)
def test_bad_configure_optimizers_output(returned: Any, message: str) -> None:
    class Bad(Classifier):
        def configure_optimizers(self) -> Any:
            return returned

    with pytest.raises(torchplug.MisconfigurationError) as info:
        _fit({"max_steps": 1}, model=Bad())
    assert message in str(info.value)


def test_training_step_returning_none_skips_the_step() -> None:
    changed: list[bool] = []

    class Skip(Classifier):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self._before = [p.detach().clone() for p in self.parameters()]
            return None if batch_idx % 2 else super().training_step(batch, batch_idx)

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            changed.append(any(not torch.equal(a, p) for a, p in zip(self._before, self.parameters())))

    trainer, _ = _fit({"max_epochs": 1}, model=Skip())
    # Lightning counts the skipped batches as optimizer steps (the optimizer is stepped and finds no gradient)
    assert trainer.global_step == 16
    assert changed == [True, False] * 8  # a skipped batch leaves the weights as they were


def test_early_end_of_epoch_from_on_train_batch_start() -> None:
    class Stop(Classifier):
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any:
            return -1 if batch_idx == 3 else None

    trainer, _ = _fit({"max_epochs": 2}, model=Stop())
    assert trainer.global_step == 6


def test_should_stop_respects_min_epochs() -> None:
    class StopEarly(torchplug.Callback):
        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            trainer.should_stop = True

    trainer = torchplug.Trainer(**quiet(max_epochs=10, min_epochs=3, callbacks=[StopEarly()]))
    trainer.fit(Classifier(), datamodule=BlobData())
    assert trainer.current_epoch == 3


class _Stream(IterableDataset[Any]):
    def __iter__(self) -> Any:
        data = blobs(96)
        return iter(zip(data.tensors[0].split(32), data.tensors[1].split(32)))


def test_loader_without_a_length_runs_to_exhaustion_and_validates_at_epoch_end() -> None:
    recorder = Recorder()
    trainer = torchplug.Trainer(**quiet(max_epochs=2, callbacks=[recorder], accumulate_grad_batches=2))
    val = DataLoader(blobs(64), batch_size=32)
    trainer.fit(Classifier(), DataLoader(_Stream(), batch_size=None), val)
    assert trainer.global_step == 4  # 3 batches per epoch: one full group of 2, then the leftover one
    assert [epoch for epoch, _ in recorder.validations] == [0, 1]


_ONE_RECORDER = Recorder()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"max_epochs": -2}, "max_epochs=-2 is not valid: give an int >= 0 or one of (None, -1)."),
        ({"accumulate_grad_batches": 0}, "accumulate_grad_batches=0 is not valid"),
        ({"gradient_clip_algorithm": "max"}, "gradient_clip_algorithm='max': choose 'norm' or 'value'."),
        ({"num_sanity_val_steps": -2}, "num_sanity_val_steps=-2: give an int >= 0, or -1 for all batches."),
        ({"deterministic": "sometimes"}, "deterministic='sometimes': choose True, False or 'warn'."),
        ({"callbacks": [object()]}, "which is not a torchplug Callback"),
        (
            {"callbacks": [_ONE_RECORDER, _ONE_RECORDER]},
            "callbacks= holds the same Recorder object twice, so each of its hooks would run twice",
        ),
    ],
)
def test_bad_trainer_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        torchplug.Trainer(**quiet(**kwargs))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"limit_train_batches": 1.5}, "limit_train_batches=1.5: a float is a fraction of the batches, at most 1.0."),
        ({"val_check_interval": 100}, "val_check_interval=100 is more than the 16 training batches of an epoch"),
        ({"limit_train_batches": 0.01}, "limit_train_batches=0.01 of 16 batches is less than one batch"),
    ],
)
def test_bad_loop_arguments_fail_at_fit(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        _fit({"max_epochs": 1, **kwargs})
    assert message in str(info.value)


def test_fit_without_training_data_says_where_to_put_it() -> None:
    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    with pytest.raises(torchplug.MisconfigurationError, match="fit\\(\\) needs training data"):
        trainer.fit(Classifier())


def _loader() -> DataLoader[Any]:
    return DataLoader(blobs(64), batch_size=32)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        pytest.param(
            lambda t: t.fit(Classifier(), train_dataloaders=_loader(), datamodule=BlobData()),
            "trainer.fit(train_dataloaders=DataLoader, datamodule=BlobData) gives two sources of data",
            id="fit-train-loaders-and-datamodule",
        ),
        pytest.param(
            lambda t: t.fit(Classifier(), val_dataloaders=_loader(), datamodule=BlobData()),
            "trainer.fit(val_dataloaders=DataLoader, datamodule=BlobData) gives two sources of data",
            id="fit-val-loaders-and-datamodule",
        ),
        pytest.param(
            lambda t: t.fit(Classifier(), BlobData(), datamodule=BlobData()),
            "trainer.fit(train_dataloaders=BlobData, datamodule=BlobData) gives two sources of data",
            id="fit-two-datamodules",
        ),
        pytest.param(
            lambda t: t.test(Classifier(), dataloaders=_loader(), datamodule=BlobData()),
            "trainer.test(dataloaders=DataLoader, datamodule=BlobData) gives two sources of data",
            id="test-loaders-and-datamodule",
        ),
        pytest.param(
            lambda t: t.predict(Classifier(), _loader(), datamodule=BlobData()),
            "trainer.predict(dataloaders=DataLoader, datamodule=BlobData) gives two sources of data",
            id="predict-loaders-and-datamodule",
        ),
    ],
)
def test_dataloaders_and_a_datamodule_together_are_refused(call: Callable[[Any], Any], message: str) -> None:
    """Lightning refuses it too: one of the two sources would be silently ignored."""
    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    with pytest.raises(torchplug.MisconfigurationError) as info:
        call(trainer)
    assert message in str(info.value)
    assert "Hint: pass the dataloaders or the DataModule, not both" in str(info.value)


def test_estimated_stepping_batches() -> None:
    trainer, _ = _fit({"max_epochs": 3, "accumulate_grad_batches": 3})
    assert trainer.estimated_stepping_batches == 3 * 6


class _NoInferenceMode(SingleDeviceStrategy):
    """A strategy that, like FSDP, cannot evaluate under ``torch.inference_mode``."""

    @property
    def supports_inference_mode(self) -> bool:
        return False


class _GradModes(Classifier):
    """Records whether each validation, test and predict step ran under inference mode."""

    def __init__(self) -> None:
        super().__init__()
        self.inference: list[bool] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.inference.append(torch.is_inference_mode_enabled())

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.inference.append(torch.is_inference_mode_enabled())

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        self.inference.append(torch.is_inference_mode_enabled())
        return None


@pytest.mark.parametrize(("strategy", "expected"), [("auto", True), ("no-inference-mode", False)])
def test_evaluation_uses_inference_mode_only_where_the_strategy_supports_it(strategy: str, expected: bool) -> None:
    chosen: Any = _NoInferenceMode(torch.device("cpu")) if strategy == "no-inference-mode" else strategy
    trainer = torchplug.Trainer(**quiet(strategy=chosen, limit_val_batches=1, limit_test_batches=1, max_epochs=1))
    trainer.fit(model := _GradModes(), BlobData(n=64))
    trainer.test(model, BlobData(n=64))
    trainer.predict(model, BlobData(n=64))
    assert model.inference == [expected] * 3
    assert torch.is_grad_enabled()
