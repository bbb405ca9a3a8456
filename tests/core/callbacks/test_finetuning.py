"""BaseFinetuning and BackboneFinetuning: frozen at first, unfrozen into the optimizer later, resumable."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.core.callbacks.conftest import regression_data
from torchplug import Module
from torchplug._errors import MisconfigurationError
from torchplug.callbacks import BackboneFinetuning, BaseFinetuning, LambdaCallback


class TransferModel(Module):
    """A backbone (with batch norm) and a head; the optimizer gets the trainable parameters only."""

    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.backbone = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU())
        self.head = torch.nn.Linear(8, 1)
        self.lr = lr

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone(x))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(filter(lambda p: p.requires_grad, self.parameters()), lr=self.lr, momentum=0.9)


def lrs_per_epoch() -> tuple[list[list[float]], LambdaCallback]:
    seen: list[list[float]] = []
    return seen, LambdaCallback(
        on_train_epoch_end=lambda trainer, module: seen.append(
            [round(g["lr"], 12) for g in trainer.optimizers[0].param_groups]
        )
    )


def test_backbone_frozen_then_unfrozen_with_a_growing_rate(make_trainer):
    model = TransferModel()
    start = model.backbone[0].weight.detach().clone()
    frozen_at_epoch_end: list[bool] = []
    seen, record = lrs_per_epoch()
    check = LambdaCallback(
        on_train_epoch_end=lambda trainer, module: frozen_at_epoch_end.append(
            torch.equal(module.backbone[0].weight, start)
        )
    )
    callback = BackboneFinetuning(unfreeze_backbone_at_epoch=1, backbone_initial_ratio_lr=0.1)
    make_trainer(max_epochs=5, callbacks=[callback, record, check]).fit(model, regression_data())

    assert frozen_at_epoch_end == [True, False, False, False, False]
    assert seen == [[0.1], [0.1, 0.01], [0.1, 0.02], [0.1, 0.04], [0.1, 0.08]]  # doubles each epoch
    assert all(p.requires_grad for p in model.backbone.parameters())


def test_the_backbone_rate_stops_at_the_models(make_trainer):
    seen, record = lrs_per_epoch()
    callback = BackboneFinetuning(unfreeze_backbone_at_epoch=0, backbone_initial_lr=0.04, lambda_func=lambda e: 3.0)
    make_trainer(max_epochs=3, callbacks=[callback, record]).fit(TransferModel(), regression_data())
    assert seen == [[0.1, 0.04], [0.1, 0.1], [0.1, 0.1]]  # 0.12 would pass the model's 0.1


def test_resuming_after_unfreezing_brings_the_parameter_groups_back(tmp_path, make_trainer):
    uninterrupted = TransferModel()
    make_trainer(max_epochs=4, callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=1)]).fit(
        uninterrupted, regression_data()
    )
    trainer = make_trainer(max_epochs=2, callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=1)])
    trainer.fit(TransferModel(), regression_data())
    trainer.save_checkpoint(tmp_path / "two-groups.ckpt")
    assert len(torch.load(tmp_path / "two-groups.ckpt", weights_only=True)["optimizer_states"][0]["param_groups"]) == 2

    resumed = TransferModel()
    resuming = make_trainer(max_epochs=4, callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=1)])
    resuming.fit(resumed, regression_data(), ckpt_path=str(tmp_path / "two-groups.ckpt"))

    assert len(resuming.optimizers[0].param_groups) == 2
    assert all(p.requires_grad for p in resumed.backbone.parameters())  # trains again, though frozen at setup
    for key, value in uninterrupted.state_dict().items():
        torch.testing.assert_close(resumed.state_dict()[key], value)


def test_a_model_without_a_backbone_is_refused(make_trainer, tiny_model, data):
    with pytest.raises(MisconfigurationError, match="needs the module to have a 'backbone' attribute"):
        make_trainer(max_epochs=1, callbacks=[BackboneFinetuning()]).fit(tiny_model(), data())


@pytest.mark.parametrize("epoch", [-1, 1.5, None], ids=["negative", "float", "none"])
def test_an_unfreeze_epoch_that_is_not_an_int_from_0_is_refused(epoch):
    # -1 failed with a bare AssertionError at the first epoch
    with pytest.raises(MisconfigurationError, match=rf"unfreeze_backbone_at_epoch={epoch!r}\) is not valid.*Hint"):
        BackboneFinetuning(unfreeze_backbone_at_epoch=epoch)


def test_an_unfreeze_epoch_after_the_last_is_warned_about(make_trainer):
    model = TransferModel()
    with pytest.warns(UserWarning, match=r"unfreeze_backbone_at_epoch=3\) unfreezes the backbone after the last epoch"):
        make_trainer(max_epochs=3, callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=3)]).fit(
            model, regression_data()
        )
    assert not model.backbone[0].weight.requires_grad


def test_a_custom_finetuning_callback(make_trainer):
    class HeadLater(BaseFinetuning):
        def freeze_before_training(self, module):
            self.freeze(module.head)

        def finetune_function(self, module, epoch, optimizer):
            if epoch == 2:
                self.unfreeze_and_add_param_group(module.head, optimizer, lr=0.05)

    seen, record = lrs_per_epoch()
    model = TransferModel()
    make_trainer(max_epochs=3, callbacks=[HeadLater(), record]).fit(model, regression_data())
    assert seen == [[0.1], [0.1], [0.1, 0.05]]


def test_the_helpers():
    model = TransferModel()
    layers = BaseFinetuning.flatten_modules(model)
    assert [type(m).__name__ for m in layers] == ["Linear", "BatchNorm1d", "ReLU", "Linear"]

    BaseFinetuning.freeze(model.backbone, train_bn=True)
    assert not model.backbone[0].weight.requires_grad and model.backbone[1].weight.requires_grad
    BaseFinetuning.freeze(model.backbone, train_bn=False)
    assert not model.backbone[1].weight.requires_grad and not model.backbone[1].track_running_stats
    assert list(BaseFinetuning.filter_params(model.backbone, requires_grad=True)) == []

    optimizer = torch.optim.SGD(model.head.parameters(), lr=0.1)
    with pytest.warns(UserWarning, match="already in the optimizer"):
        BaseFinetuning.unfreeze_and_add_param_group([model.backbone, model.head], optimizer, initial_denom_lr=4)
    assert [len(g["params"]) for g in optimizer.param_groups] == [2, 4]
    assert optimizer.param_groups[1]["lr"] == 0.025
