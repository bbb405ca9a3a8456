"""ModelPruning: weights pruned each epoch with torch.nn.utils.prune, permanent in checkpoints and at the end."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.nn.utils import prune

from tests.core.callbacks.conftest import regression_data
from torchplug import Module
from torchplug._errors import MisconfigurationError
from torchplug.callbacks import LambdaCallback, ModelPruning


class Wide(Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.first = torch.nn.Linear(4, 32)
        self.second = torch.nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.second(torch.relu(self.first(x)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self(x), y))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def zeros(tensor: torch.Tensor) -> int:
    return int((tensor == 0).sum())


def test_global_l1_pruning_each_epoch_made_permanent(make_trainer):
    model = Wide()
    pruning = ModelPruning(
        "l1_unstructured", parameter_names=["weight"], amount=0.5, use_lottery_ticket_hypothesis=False
    )
    make_trainer(max_epochs=2, callbacks=[pruning]).fit(model, regression_data())

    total = model.first.weight.numel() + model.second.weight.numel()
    assert zeros(model.first.weight) + zeros(model.second.weight) == total - total // 4  # half, then half of the rest
    assert isinstance(model.first.weight, torch.nn.Parameter)  # permanent: no mask, no weight_orig any more
    assert not hasattr(model.first, "weight_mask")


def test_checkpoints_hold_plain_pruned_weights(tmp_path, make_trainer):
    model = Wide()
    path = str(tmp_path / "pruned.ckpt")
    save = LambdaCallback(on_train_epoch_end=lambda trainer, module: trainer.save_checkpoint(path))
    pruning = ModelPruning("l1_unstructured", amount=0.5, make_pruning_permanent=True)
    make_trainer(max_epochs=1, callbacks=[pruning, save]).fit(model, regression_data())
    state = torch.load(path, weights_only=True)["state_dict"]

    assert sorted(state) == ["first.bias", "first.weight", "second.bias", "second.weight"]
    fresh = Wide()
    fresh.load_state_dict(state)  # loads into the model class as it is
    assert zeros(fresh.first.weight) > 0


def test_lottery_ticket_resets_the_survivors_to_their_first_values(make_trainer):
    model = Wide()
    start = model.first.weight.detach().clone()
    pruning = ModelPruning("l1_unstructured", parameters_to_prune=[(model.first, "weight")], amount=0.25)
    make_trainer(max_epochs=1, callbacks=[pruning]).fit(model, regression_data())
    kept = model.first.weight != 0

    assert int(kept.sum()) == 96  # 128 weights, a quarter pruned
    assert torch.equal(model.first.weight[kept], start[kept])


def test_structured_pruning_removes_whole_rows(make_trainer):
    model = Wide()
    pruning = ModelPruning(
        "ln_structured",
        parameters_to_prune=[(model.first, "weight")],
        amount=0.25,
        use_global_unstructured=False,
        pruning_dim=0,
        pruning_norm=2,
        use_lottery_ticket_hypothesis=False,
    )
    make_trainer(max_epochs=1, callbacks=[pruning]).fit(model, regression_data())
    assert int((model.first.weight.abs().sum(dim=1) == 0).sum()) == 8  # 8 of 32 rows


def test_schedules_of_amount_and_pruning(make_trainer):
    model = Wide()
    amounts: list[int] = []

    def amount(epoch: int) -> float:
        amounts.append(epoch)
        return 0.1

    pruning = ModelPruning(
        "random_unstructured", amount=amount, apply_pruning=lambda epoch: epoch % 2 == 1, verbose=2,
        use_lottery_ticket_hypothesis=lambda epoch: False, parameter_names=["weight"],
    )  # fmt: skip
    make_trainer(max_epochs=4, callbacks=[pruning]).fit(model, regression_data())
    assert amounts == [0, 1, 2, 3]
    total = model.first.weight.numel() + model.second.weight.numel()
    assert zeros(model.first.weight) + zeros(model.second.weight) == round(total * 0.1) + round(
        (total - round(total * 0.1)) * 0.1
    )


def test_verbose_reports_the_sparsity(make_trainer, torchplug_log):
    pruning = ModelPruning("l1_unstructured", amount=0.5, verbose=1, parameter_names=["weight"])
    make_trainer(max_epochs=1, callbacks=[pruning]).fit(Wide(), regression_data())
    assert "Applied L1Unstructured. Pruned: 0/160 (0.00%) -> 80/160 (50.00%)" in torchplug_log.text


def test_prune_after_validation_instead(make_trainer):
    model = Wide()
    pruning = ModelPruning("l1_unstructured", amount=0.5, prune_on_train_epoch_end=False, make_pruning_permanent=False)
    make_trainer(max_epochs=1, num_sanity_val_steps=2, callbacks=[pruning]).fit(
        model, regression_data(), regression_data()
    )
    assert hasattr(model.first, "weight_mask")  # pruned once (not in the sanity check), not made permanent
    assert zeros(model.first.weight_mask) + zeros(model.second.weight_mask) > 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"pruning_fn": "magnitude"}, r"pruning_fn='magnitude'\): choose one of"),
        ({"pruning_fn": "ln_structured", "use_global_unstructured": False}, r"is structured: give pruning_dim"),
        ({"pruning_fn": "ln_structured", "use_global_unstructured": False, "pruning_dim": 0}, "needs pruning_norm"),
        ({"pruning_fn": "random_structured", "pruning_dim": 0}, "needs an unstructured method"),
        ({"pruning_fn": prune.L1Unstructured, "use_global_unstructured": False}, "use_global_unstructured=True only"),
        ({"pruning_fn": "l1_unstructured", "parameter_names": ["kernel"]}, r"parameter_names=\['kernel'\]"),
        ({"pruning_fn": "l1_unstructured", "verbose": 3}, r"verbose=3"),
        ({"pruning_fn": "l1_unstructured", "amount": "half"}, r"amount='half'"),
    ],
    ids=[
        "unknown-name", "no-dim", "no-norm", "structured-global", "method-local", "bad-parameter", "bad-verbose",
        "bad-amount",
    ],
)  # fmt: skip
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(MisconfigurationError, match=message):
        ModelPruning(**kwargs)


def test_parameters_not_in_the_model_are_refused(make_trainer):
    pruning = ModelPruning("l1_unstructured", parameters_to_prune=[(torch.nn.Linear(2, 2), "weight")])
    with pytest.raises(MisconfigurationError, match="not in the model: modules"):
        make_trainer(max_epochs=1, callbacks=[pruning]).fit(Wide(), regression_data())
