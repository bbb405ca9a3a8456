"""A NaN or infinite training loss never trains on silently: ``Trainer(nonfinite_loss="raise" | "skip" | "ignore")``."""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import torchplug
from tests.core.trainer.models import BlobData, Classifier, quiet, weights


class Diverging(Classifier):
    """The classifier, whose loss is ``bad`` (NaN by default) at the global steps in ``at``."""

    def __init__(self, at: tuple[int, ...] = (5,), bad: float = math.nan, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.at = at
        self.bad = bad

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        if self.trainer.global_step in self.at:
            return loss * self.bad
        return loss


class BatchCounter(torchplug.Callback):
    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.batches += 1


def fit(model: type[Classifier] | Classifier, **kwargs: Any) -> torchplug.Trainer:
    torch.manual_seed(0)
    trainer = torchplug.Trainer(**quiet(**kwargs))
    trainer.fit(model() if isinstance(model, type) else model, datamodule=BlobData())
    return trainer


# -- "raise" (the default) ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf], ids=["nan", "inf", "-inf"])
def test_a_nonfinite_loss_stops_fit_naming_the_step(bad: float) -> None:
    with pytest.raises(torchplug.NonFiniteLossError) as info:
        fit(Diverging(at=(21,), bad=bad), max_epochs=3)  # 16 batches per epoch: step 21 is epoch 1, batch 5
    message = str(info.value)
    # found at the end of epoch 1 (batch 15, after step 31): the check before was at the end of epoch 0.
    # By then the weights updated from the bad loss made every loss NaN.
    assert message.startswith(
        "The training loss is nan at global step 32 (epoch 1, batch 15); it was still finite at global step 16, "
        "the check before. Training stopped"
    )
    assert "log_every_n_steps=1 finds the exact step" in message
    assert "nonfinite_loss='skip'" in message


def test_the_check_runs_every_log_every_n_steps_batches_not_at_every_step() -> None:
    counter = BatchCounter()
    with pytest.raises(torchplug.NonFiniteLossError, match=r"at global step 8 \(epoch 0, batch 7\); it was still "
                       r"finite at global step 4"):  # fmt: skip
        fit(Diverging(at=(5,)), max_epochs=1, log_every_n_steps=4, callbacks=[counter])
    assert counter.batches == 8  # checked after batches 3 and 7: the NaN of batch 5 was found after batch 7


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_log_every_n_steps_1_finds_the_exact_step(bad: float) -> None:
    with pytest.raises(torchplug.NonFiniteLossError, match=rf"is {bad} at global step 6 \(epoch 0, batch 5\); it "
                       r"was still finite at global step 5"):  # fmt: skip
        fit(Diverging(at=(5,), bad=bad), max_epochs=1, log_every_n_steps=1)


def test_the_end_of_fit_checks_the_last_loss() -> None:
    counter = BatchCounter()
    with pytest.raises(torchplug.NonFiniteLossError, match=r"at global step 3 \(epoch 0, batch 2\); no check before"):
        fit(Diverging(at=(2,)), max_steps=3, callbacks=[counter])  # stops at step 3, long before 50 batches
    assert counter.batches == 3


def test_a_run_with_finite_losses_is_untouched_by_the_check() -> None:
    checked = fit(Classifier, max_epochs=2, log_every_n_steps=3)
    unchecked = fit(Classifier, max_epochs=2, log_every_n_steps=3, nonfinite_loss="ignore")
    assert all(torch.equal(a, b) for a, b in zip(weights(checked.module).values(), weights(unchecked.module).values()))


# -- "skip" -------------------------------------------------------------------------------------------


def test_skip_drops_the_step_of_a_nonfinite_loss_and_trains_on() -> None:
    seen: dict[int, dict[str, torch.Tensor]] = {}

    class Watch(torchplug.Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen[trainer.global_step] = weights(module)

    with pytest.warns(
        UserWarning, match=r"nonfinite_loss='skip': a non-finite training loss at epoch 0, global step 3"
    ):
        trainer = fit(Diverging(at=(3, 7)), max_epochs=1, nonfinite_loss="skip", callbacks=[Watch()])
    assert trainer.fit_loop.loss_check.skipped == 2
    assert trainer.global_step == 16  # a skipped step still counts, as a training_step returning None does
    same = [step for step in range(2, 17) if all(torch.equal(seen[step - 1][k], seen[step][k]) for k in seen[step])]
    assert same == [4, 8]  # the steps of the NaN batches (global steps 3 and 7 in training_step) left the weights
    assert all(torch.isfinite(value).all() for value in weights(trainer.module).values())


def test_skip_drops_a_whole_accumulation_window() -> None:
    with pytest.warns(UserWarning, match="nonfinite_loss='skip'"):
        trainer = fit(Diverging(at=(1,)), max_epochs=1, nonfinite_loss="skip", accumulate_grad_batches=4)
    assert trainer.fit_loop.loss_check.skipped == 1  # one bad batch of four: that step is skipped
    assert all(torch.isfinite(value).all() for value in weights(trainer.module).values())


def test_skip_works_with_the_loss_scaler_of_16_mixed() -> None:
    with pytest.warns(UserWarning, match="nonfinite_loss='skip'"):
        trainer = fit(Diverging(at=(3,)), max_epochs=1, nonfinite_loss="skip", precision="16-mixed")
    assert trainer.fit_loop.loss_check.skipped == 1
    assert all(torch.isfinite(value).all() for value in weights(trainer.module).values())


def test_skip_needs_automatic_optimization() -> None:
    class Manual(Classifier):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.manual_backward(loss)
            self.optimizers().step()
            return loss

    with pytest.raises(torchplug.MisconfigurationError, match="nonfinite_loss='skip' needs automatic optimization"):
        fit(Manual, max_epochs=1, nonfinite_loss="skip")


# -- "ignore" -----------------------------------------------------------------------------------------


def test_ignore_trains_on_as_asked() -> None:
    trainer = fit(Diverging(at=(3,)), max_epochs=1, nonfinite_loss="ignore")
    assert trainer.global_step == 16
    assert not all(torch.isfinite(value).all() for value in weights(trainer.module).values())
