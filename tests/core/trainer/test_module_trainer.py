"""``Module.trainer``: the Trainer a module is attached to, readable in a run and settable by hand."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader

import torchplug
from tests.core.trainer.models import Classifier, blobs, quiet


class Ensemble(torchplug.Module):
    """A module holding another Module (and a plain layer), as ensembles and distillation setups do."""

    def __init__(self) -> None:
        super().__init__()
        self.inner = Classifier()
        self.head = torch.nn.Linear(4, 4)


def test_a_module_outside_a_run_is_not_attached() -> None:
    with pytest.raises(RuntimeError, match="is not attached to a Trainer"):
        _ = Classifier().trainer


def test_setting_the_trainer_attaches_the_module_and_its_module_children() -> None:
    trainer = torchplug.Trainer(**quiet())
    ensemble = Ensemble()

    ensemble.trainer = trainer

    assert ensemble.trainer is trainer
    assert ensemble.inner.trainer is trainer
    assert ensemble.current_epoch == 0 and ensemble.global_step == 0  # read through the Trainer now


def test_setting_none_detaches_the_module_and_its_children() -> None:
    ensemble = Ensemble()
    ensemble.trainer = torchplug.Trainer(**quiet())

    ensemble.trainer = None

    for module in (ensemble, ensemble.inner):
        with pytest.raises(RuntimeError, match="is not attached to a Trainer"):
            _ = module.trainer


def test_fit_attaches_the_module_and_its_children() -> None:
    class Wrapper(torchplug.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Classifier()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.cross_entropy(self.inner(x), y)

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    model = Wrapper()
    trainer = torchplug.Trainer(**quiet(max_steps=1))
    trainer.fit(model, DataLoader(blobs(64), batch_size=32))

    assert model.trainer is trainer
    assert model.inner.trainer is trainer
