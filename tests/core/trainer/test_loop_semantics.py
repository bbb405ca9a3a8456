"""Loop semantics Lightning users rely on: which loops run, what steps receive, what counts as a step."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from tests.core.trainer.models import quiet


def data(n: int = 64, seed: int = 0) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 8, generator=generator)
    return TensorDataset(x, (x.sum(1) > 0).long())


class Dropout(torchplug.Module):
    """A classifier with dropout and a shuffled loader: its result depends on every random number drawn."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Dropout(0.5), torch.nn.Linear(16, 2)
        )
        self.requested: list[str] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[Any]:
        self.requested.append(f"train_dataloader at step {self.global_step}")
        return DataLoader(data(), batch_size=8, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        self.requested.append(
            f"val_dataloader at step {self.global_step}, sanity checking: {self.trainer.sanity_checking}"
        )
        return DataLoader(data(16, 1), batch_size=8, shuffle=True)


class WithValidation(Dropout):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1]))


def trained(model: Dropout, **trainer_args: Any) -> torch.Tensor:
    torch.manual_seed(0)
    model.load_state_dict(_initial(type(model)))
    torchplug.Trainer(**quiet(max_epochs=2, **trainer_args)).fit(model)
    return torch.cat([p.detach().flatten() for p in model.parameters()])


def _initial(cls: type[Dropout]) -> dict[str, torch.Tensor]:
    torch.manual_seed(1)
    return cls().state_dict()


def test_without_validation_step_no_validation_runs_and_the_loader_is_never_requested() -> None:
    model = Dropout()
    weights = trained(model, num_sanity_val_steps=2)
    assert model.requested == ["train_dataloader at step 0"]  # val_dataloader() was never called
    assert torch.equal(weights, trained(Dropout(), limit_val_batches=0))


class StepWithoutData(Dropout):
    """validation_step, but no val_dataloader: fit has nothing to validate on."""

    val_dataloader = torchplug.Module.val_dataloader  # type: ignore[assignment]

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass


@pytest.mark.parametrize(
    ("model", "fit_args", "message"),
    [
        pytest.param(
            Dropout,
            {},
            "Validation is skipped: val_dataloader() is defined, but Dropout defines no validation_step",
            id="val-dataloader-without-step",
        ),
        pytest.param(
            Dropout,
            {"val_dataloaders": DataLoader(data(16), batch_size=8)},
            "Validation is skipped: val_dataloaders were given to fit(), but Dropout defines no validation_step",
            id="val-dataloaders-argument-without-step",
        ),
        pytest.param(
            StepWithoutData,
            {},
            "Validation never runs: StepWithoutData defines validation_step, but fit() has no validation data",
            id="step-without-validation-data",
        ),
    ],
)
def test_validation_that_cannot_run_is_announced(model: type[Dropout], fit_args: dict[str, Any], message: str) -> None:
    """Lightning warns about both; a run that silently never validates would look validated."""
    with pytest.warns(UserWarning, match="Hint: ") as record:
        torchplug.Trainer(**quiet(max_steps=1)).fit(model(), **fit_args)
    assert any(message in str(w.message) for w in record), [str(w.message) for w in record]


def test_limit_val_batches_zero_says_that_no_validation_is_intended() -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Validation (is skipped|never runs)")
        torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0)).fit(Dropout())
        torchplug.Trainer(**quiet(max_steps=1, limit_val_batches=0)).fit(StepWithoutData())
        torchplug.Trainer(**quiet(max_steps=1)).fit(WithValidation())  # data and step together: nothing to say


def test_the_sanity_check_leaves_the_random_state_as_it_found_it() -> None:
    """The sanity check draws random numbers (its shuffled loader); training draws the same ones with or without it."""
    without = trained(WithValidation(), num_sanity_val_steps=0)
    assert torch.equal(trained(WithValidation(), num_sanity_val_steps=2), without)
    assert torch.equal(trained(WithValidation(), num_sanity_val_steps=-1), without)


def test_validation_during_training_draws_from_the_same_random_state() -> None:
    """As in Lightning: a shuffled validation loader after epoch 0 changes the shuffling of epoch 1."""
    assert not torch.equal(trained(WithValidation()), trained(Dropout()))


@pytest.mark.parametrize(
    ("sanity_steps", "requested"),
    [
        (1, ["val_dataloader at step 0, sanity checking: True", "train_dataloader at step 0"]),
        (0, ["train_dataloader at step 0", "val_dataloader at step 0, sanity checking: False"]),
    ],
    ids=["sanity-check", "no-sanity-check"],
)
def test_dataloaders_are_requested_when_the_loops_need_them(sanity_steps: int, requested: list[str]) -> None:
    """The validation loaders at the sanity check, else right after the training loader, before on_train_start."""
    model = WithValidation()
    trained(model, num_sanity_val_steps=sanity_steps)
    assert model.requested == requested


def test_estimated_stepping_batches_in_configure_optimizers_requests_the_training_loader_early() -> None:
    class OneCycle(WithValidation):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            total = int(self.trainer.estimated_stepping_batches)
            scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=0.1, total_steps=total)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    model = OneCycle()
    trainer = torchplug.Trainer(**quiet(max_epochs=2, num_sanity_val_steps=1))
    trainer.fit(model)  # OneCycleLR raises if stepped more than total_steps times
    assert trainer.global_step == 16
    assert model.requested == ["train_dataloader at step 0", "val_dataloader at step 0, sanity checking: True"]


@pytest.mark.parametrize("stage", ["training_step", "predict_step"])
def test_steps_without_batch_idx(stage: str) -> None:
    seen: list[int] = []

    class NoBatchIdx(Dropout):
        def training_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
            seen.append(len(batch[0]))
            return super().training_step(batch, 0)

        def predict_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
            seen.append(len(batch[0]))
            return self.net(batch[0]).argmax(-1)

    model = NoBatchIdx()
    trainer = torchplug.Trainer(**quiet(max_steps=2))
    if stage == "training_step":
        trainer.fit(model)
        assert seen == [8, 8]
    else:
        predictions = trainer.predict(model, DataLoader(data(16), batch_size=8))
        assert seen == [8, 8] and [p.shape for p in predictions] == [(8,), (8,)]


def test_training_step_returning_none_skips_the_update_and_still_counts_the_step() -> None:
    """As in Lightning: no backward, the optimizer finds no gradients (SGD leaves the weights), global_step counts."""
    snapshots: list[torch.Tensor] = []

    class SkipsOdd(Dropout):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor | None:
            loss = super().training_step(batch, batch_idx)
            return None if batch_idx % 2 else loss

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            snapshots.append(self.net[0].weight.detach().clone())

    trainer = torchplug.Trainer(**quiet(max_steps=4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "training_step returned None", once per process
        trainer.fit(SkipsOdd())
    assert trainer.global_step == 4
    assert torch.equal(snapshots[0], snapshots[1])  # batch 1 returned None: no update
    assert not torch.equal(snapshots[1], snapshots[2])


@pytest.mark.parametrize("loss", [0.5, "0.5", [1.0]], ids=["float", "str", "list"])
def test_a_dict_whose_loss_is_not_a_tensor_is_refused_naming_it(loss: Any) -> None:
    class FloatLoss(Dropout):
        def training_step(self, batch: Any, batch_idx: int) -> dict[str, Any]:
            super().training_step(batch, batch_idx)
            return {"loss": loss}

    trainer = torchplug.Trainer(**quiet(max_steps=2))
    with pytest.raises(torchplug.MisconfigurationError, match=r"training_step returned a dict whose 'loss' is a "):
        trainer.fit(FloatLoss())


def test_gradients_stay_populated_until_the_next_zero_grad() -> None:
    seen: list[tuple[int, bool]] = []

    class Watches(Dropout):
        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            grad = self.net[0].weight.grad
            seen.append((batch_idx, grad is not None and bool(grad.abs().sum() > 0)))

        def on_before_zero_grad(self, optimizer: Any) -> None:
            seen.append((-1, self.net[0].weight.grad is not None))

    torchplug.Trainer(**quiet(max_steps=2, accumulate_grad_batches=2)).fit(Watches())
    # (-1, ...) is the zero_grad at the start of each accumulation window: the gradients of the last one are there
    assert seen == [(-1, False), (0, True), (1, True), (-1, True), (2, True), (3, True)]


@pytest.mark.parametrize(
    ("data", "shapes"),
    [
        (torch.ones(2, 3), (2, 3)),
        (torch.tensor(1.5), ()),
        ({"a": torch.zeros(4), "b": [torch.ones(1, 2)]}, {"a": (4,), "b": [(1, 2)]}),
        (7, ()),
    ],
    ids=["tensor", "scalar", "collection", "number"],
)
def test_all_gather_on_one_process_keeps_the_shape(data: Any, shapes: Any) -> None:
    gathered: list[Any] = []

    class Gathers(Dropout):
        def on_train_start(self) -> None:
            gathered.append(self.all_gather(data))

    torchplug.Trainer(**quiet(max_steps=1)).fit(Gathers())

    def shape_of(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: shape_of(v) for k, v in value.items()}
        if isinstance(value, list):
            return [shape_of(v) for v in value]
        assert isinstance(value, torch.Tensor)
        return tuple(value.shape)

    assert shape_of(gathered[0]) == shapes


class SkipsFromBatch(torchplug.Module):
    """A model whose ``on_train_batch_start`` returns -1 at batch ``skip_at`` (the rest of each epoch is skipped)."""

    def __init__(self, skip_at: int, interval: str = "epoch") -> None:
        super().__init__()
        self.layer = torch.nn.Linear(8, 2)
        self.skip_at = skip_at
        self.interval = interval
        self.lrs: list[float] = []

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any:
        return -1 if batch_idx == self.skip_at else None

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.layer(x), y)

    def on_train_epoch_start(self) -> None:
        self.lrs.append(self.trainer.optimizers[0].param_groups[0]["lr"])

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": self.interval}}


@pytest.mark.parametrize("skip_at", [0, 2], ids=["first-batch", "mid-epoch"])
def test_skipping_the_rest_of_an_epoch_still_steps_the_epoch_schedulers(skip_at: int) -> None:
    """As in Lightning 2.6: returning -1 ends the epoch, and an ended epoch steps the epoch-interval schedulers."""
    model = SkipsFromBatch(skip_at)
    trainer = torchplug.Trainer(**quiet(max_epochs=2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an epoch that took no optimizer step (skip_at=0) is said, not tested here
        trainer.fit(model, DataLoader(data(), batch_size=8))

    assert trainer.global_step == 2 * skip_at
    assert model.lrs == pytest.approx([0.1, 0.01])  # at the start of each epoch
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.001)


def test_skipping_the_rest_of_an_epoch_does_not_step_the_step_schedulers_for_the_skipped_batch() -> None:
    model = SkipsFromBatch(2, interval="step")
    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    trainer.fit(model, DataLoader(data(), batch_size=8))

    assert trainer.global_step == 2
    assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.1 * 0.1**2)  # one step per optimizer step
