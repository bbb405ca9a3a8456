"""StochasticWeightAveraging: the average of the SWA epochs' weights, the SWA schedule, batch norm, checkpoints."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.core.callbacks.conftest import regression_data
from torchplug import Module
from torchplug._errors import MisconfigurationError
from torchplug.callbacks import LambdaCallback, ModelCheckpoint, StochasticWeightAveraging


class BatchNormNet(Module):
    """Linear, batch norm, linear: SWA must recompute the statistics for the averaged weights."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(), torch.nn.Linear(8, 1)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


def weights_at_epoch_starts() -> tuple[list[dict[str, torch.Tensor]], LambdaCallback]:
    seen: list[dict[str, torch.Tensor]] = []

    def record(trainer, module):
        seen.append({k: v.detach().clone() for k, v in module.named_parameters()})

    return seen, LambdaCallback(on_train_epoch_start=record)


def test_the_model_ends_with_the_mean_of_the_swa_epochs_weights(make_trainer, tiny_model, data):
    seen, record = weights_at_epoch_starts()
    model = tiny_model(scheduler="step_lr")
    make_trainer(max_epochs=5, callbacks=[record, StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=3)]).fit(
        model, data()
    )

    # SWA starts in the 3rd epoch (index 2) and averages the weights at the start of epochs 2, 3 and 4.
    for name, param in model.named_parameters():
        expected = torch.stack([seen[epoch][name] for epoch in (2, 3, 4)]).mean(0)
        torch.testing.assert_close(param.detach(), expected)


def test_swalr_replaces_the_models_scheduler(make_trainer, tiny_model, data):
    rates: list[float] = []
    record = LambdaCallback(
        on_train_epoch_end=lambda trainer, module: rates.append(trainer.optimizers[0].param_groups[0]["lr"])
    )
    swa = StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2, annealing_epochs=2, annealing_strategy="linear")
    trainer = make_trainer(max_epochs=5, callbacks=[swa, record])
    trainer.fit(tiny_model(scheduler="step_lr"), data())

    assert rates[0] == 0.025  # epoch 0: the model's StepLR halved 0.05 after the epoch's last batch
    assert rates[-1] == pytest.approx(0.01)  # annealed to swa_lrs
    assert type(trainer.lr_scheduler_configs[0].scheduler).__name__ == "SWALR"


def test_batch_norm_statistics_are_recomputed_for_the_averaged_weights(make_trainer):
    model = BatchNormNet()
    make_trainer(max_epochs=4, callbacks=[StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=0.5)]).fit(
        model, regression_data()
    )
    reference = BatchNormNet()
    reference.load_state_dict(model.state_dict())
    torch.optim.swa_utils.update_bn(regression_data(), reference.net)  # torch's own recomputation

    for name in ("running_mean", "running_var"):
        torch.testing.assert_close(getattr(model.net[1], name), getattr(reference.net[1], name))
    assert model.net[1].momentum == 0.1  # put back after the pass


def test_a_resume_during_swa_continues_the_average(tmp_path, make_trainer, tiny_model, data):
    uninterrupted = tiny_model(scheduler="step_lr")
    make_trainer(max_epochs=5, callbacks=[StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2)]).fit(
        uninterrupted, data()
    )
    checkpoints = ModelCheckpoint(dirpath=tmp_path / "ckpts", save_top_k=-1, every_n_epochs=1)
    make_trainer(max_epochs=3, callbacks=[StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2), checkpoints]).fit(
        tiny_model(scheduler="step_lr"), data()
    )
    path = str(tmp_path / "ckpts" / "epoch=2-step=24.ckpt")
    state = torch.load(path, weights_only=True)["callbacks"]["StochasticWeightAveraging"]
    assert state["n_averaged"] == 2 and state["scheduler_state"] is not None

    resumed = tiny_model(scheduler="step_lr")
    make_trainer(max_epochs=5, callbacks=[StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=2)]).fit(
        resumed, data(), ckpt_path=path
    )
    for key, value in uninterrupted.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value)


def test_stopped_before_the_end_the_model_keeps_its_own_weights(make_trainer, tiny_model, data):
    model = tiny_model()
    trainer = make_trainer(
        max_epochs=5, max_steps=20, callbacks=[StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=1)]
    )
    with pytest.warns(
        UserWarning,
        match=r"training stopped after epoch 2, before the last SWA epoch 4 \(max_epochs=5\), so the model keeps its "
        r"own weights; the average of 3 epoch\(s\) is in average_model. Hint",
    ):
        trainer.fit(model, data())
    swa = trainer.callbacks[0]
    assert not all(torch.equal(a, b) for a, b in zip(swa.average_model.parameters(), model.parameters()))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"swa_lrs": -1.0}, "give a positive float"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 0}, "an int epoch is 1-based"),
        ({"swa_lrs": 0.1, "swa_epoch_start": 1.5}, "a float is a fraction of max_epochs"),
        ({"swa_lrs": 0.1, "annealing_strategy": "step"}, "choose 'cos' or 'linear'"),
        ({"swa_lrs": 0.1, "annealing_epochs": 2.5}, r"annealing_epochs=2.5\) is not valid: give an int >= 0"),
        ({"swa_lrs": 0.1, "annealing_epochs": -1}, r"annealing_epochs=-1\) is not valid"),
    ],
    ids=["negative-lr", "epoch-0", "fraction-above-1", "unknown-annealing", "annealing-float", "annealing-negative"],
)
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(MisconfigurationError, match=message):
        StochasticWeightAveraging(**kwargs)


def test_a_start_after_the_last_epoch_is_warned_and_averages_nothing(make_trainer, tiny_model, data):
    model = tiny_model()
    swa = StochasticWeightAveraging(swa_lrs=0.01, swa_epoch_start=4)
    with pytest.warns(UserWarning, match=r"swa_epoch_start=4\) starts in epoch 3 .*max_epochs=3: no weights"):
        make_trainer(max_epochs=3, callbacks=[swa]).fit(model, data())
    assert swa.n_averaged is None


def test_several_optimizers_are_refused(make_trainer, tiny_model, data):
    model = tiny_model()
    model.configure_optimizers = lambda: [
        torch.optim.SGD([model.layer.weight], lr=0.1),
        torch.optim.SGD([model.layer.bias], lr=0.1),
    ]
    model.automatic_optimization = False
    with pytest.raises(MisconfigurationError, match="works with one optimizer"):
        make_trainer(max_epochs=1, callbacks=[StochasticWeightAveraging(swa_lrs=0.1)]).fit(model, data())


def test_a_fraction_needs_a_finite_max_epochs(make_trainer, tiny_model, data):
    trainer = make_trainer(max_epochs=-1, max_steps=3, callbacks=[StochasticWeightAveraging(swa_lrs=0.1)])
    with pytest.raises(MisconfigurationError, match="max_epochs=-1"):
        trainer.fit(tiny_model(), data())
