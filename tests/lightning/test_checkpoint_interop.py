"""Checkpoints move between PyTorch Lightning 2.x and torchplug, in both directions.

Lightning is installed only in this tox env (``tox -e lightning``); torchplug never imports it. The
same small model is written twice, once per framework, and trained on the same unshuffled data:
a run resumed across frameworks must end with the weights of an uninterrupted run, which shows
that the weights, the optimizer's momentum, the scheduler and the loop position all came across.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from torchplug.callbacks import EarlyStopping, ModelCheckpoint

pl = pytest.importorskip("lightning.pytorch", reason="the lightning tox env installs lightning==2.6.*")

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning", "ignore::DeprecationWarning", "ignore::FutureWarning")


def data(n: int = 48) -> TensorDataset:
    generator = torch.Generator().manual_seed(7)
    x = torch.randn(n, 6, generator=generator)
    return TensorDataset(x, (x.sum(-1) > 0).long())


def loaders() -> tuple[DataLoader[Any], DataLoader[Any]]:
    return DataLoader(data(), batch_size=8), DataLoader(data(16), batch_size=8)


class _Steps:
    """The model's math, shared by the two frameworks' classes (no dropout, so resuming needs no random state)."""

    net: torch.nn.Module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)  # type: ignore[attr-defined]
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))  # type: ignore[attr-defined]

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)  # type: ignore[attr-defined]
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.7)]


def _net() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


class PlugModel(_Steps, torchplug.Module):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = _net()


class LitModel(_Steps, pl.LightningModule):
    def __init__(self, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = _net()


class PlugData(torchplug.DataModule):
    """A DataModule with state, to check that its state crosses over too."""

    def __init__(self) -> None:
        self.counter = 0

    def train_dataloader(self) -> DataLoader[Any]:
        return loaders()[0]

    def val_dataloader(self) -> DataLoader[Any]:
        return loaders()[1]

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.counter = state_dict["counter"]


class LitData(pl.LightningDataModule):
    def __init__(self) -> None:
        super().__init__()
        self.counter = 0

    def train_dataloader(self) -> DataLoader[Any]:
        return loaders()[0]

    def val_dataloader(self) -> DataLoader[Any]:
        return loaders()[1]

    def state_dict(self) -> dict[str, Any]:
        return {"counter": self.counter}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.counter = state_dict["counter"]


# Both frameworks keep a DataModule's state under its class's name; a ported class keeps its name.
PlugData.__qualname__ = LitData.__qualname__ = "Data"


def plug_trainer(root: Path, **kwargs: Any) -> torchplug.Trainer:
    kwargs.setdefault("callbacks", [])
    return torchplug.Trainer(
        accelerator="cpu",
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(root),
        **kwargs,
    )


def lit_trainer(root: Path, **kwargs: Any) -> Any:
    kwargs.setdefault("callbacks", [])
    return pl.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        default_root_dir=str(root),
        **kwargs,
    )


def weights(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def assert_same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-6, msg=key)


def lit_run(root: Path, max_epochs: int, ckpt_path: str | None = None, **kwargs: Any) -> tuple[Any, Any]:
    model = LitModel()
    trainer = lit_trainer(root, max_epochs=max_epochs, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, datamodule=LitData(), ckpt_path=ckpt_path)
    return trainer, model


def plug_run(root: Path, max_epochs: int, ckpt_path: str | None = None, **kwargs: Any) -> tuple[Any, Any]:
    model = PlugModel()
    trainer = plug_trainer(root, max_epochs=max_epochs, **kwargs)
    trainer.fit(model, datamodule=PlugData(), ckpt_path=ckpt_path)
    return trainer, model


# -- Lightning -> torchplug ---------------------------------------------------------------------


def test_torchplug_resumes_a_lightning_epoch_end_checkpoint_to_the_weights_of_an_uninterrupted_run(tmp_path):
    _, uninterrupted = plug_run(tmp_path / "whole", max_epochs=4)
    lit_run(
        tmp_path / "lit",
        max_epochs=2,
        callbacks=[pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "lit", save_last=True)],
    )

    trainer, resumed = plug_run(tmp_path / "plug", max_epochs=4, ckpt_path=str(tmp_path / "lit" / "last.ckpt"))

    assert trainer.global_step == 24 and trainer.current_epoch == 4
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 4
    assert_same_weights(weights(resumed), weights(uninterrupted))


def test_torchplug_resumes_a_lightning_mid_epoch_checkpoint_at_the_next_batch(tmp_path):
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "lit", every_n_train_steps=9, save_top_k=-1)
    lit_run(tmp_path / "lit", max_epochs=2, callbacks=[checkpoint])
    path = tmp_path / "lit" / "epoch=1-step=9.ckpt"
    seen: list[tuple[int, int, int]] = []

    class Watch(torchplug.Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            seen.append((trainer.current_epoch, batch_idx, trainer.global_step))

    _, uninterrupted = plug_run(tmp_path / "whole", max_epochs=2)
    _, resumed = plug_run(tmp_path / "plug", max_epochs=2, ckpt_path=str(path), callbacks=[Watch()])

    assert seen[0] == (1, 3, 9)  # 6 batches an epoch: step 9 is epoch 1's batch 2, so batch 3 comes next
    assert_same_weights(weights(resumed), weights(uninterrupted))


def test_a_lightning_checkpoint_restores_torchplug_callbacks_and_the_datamodule(tmp_path):
    lit_checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_last=True)
    lit_stopping = pl.callbacks.EarlyStopping("val_loss", patience=5)
    datamodule = LitData()
    datamodule.counter = 42
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit_trainer(tmp_path, max_epochs=2, callbacks=[lit_checkpoint, lit_stopping]).fit(
            LitModel(), datamodule=datamodule
        )
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss")
    stopping = EarlyStopping("val_loss", patience=5)
    plug_data = PlugData()

    trainer = plug_trainer(tmp_path, max_epochs=2, callbacks=[checkpoint, stopping])
    trainer.fit(PlugModel(), datamodule=plug_data, ckpt_path=str(tmp_path / "last.ckpt"))

    assert plug_data.counter == 42
    assert checkpoint.best_model_path == lit_checkpoint.best_model_path
    assert float(checkpoint.best_model_score) == pytest.approx(float(lit_checkpoint.best_model_score))
    assert float(stopping.best_score) == pytest.approx(float(lit_stopping.best_score))
    assert stopping.wait_count == lit_stopping.wait_count


def test_module_load_from_checkpoint_reads_a_lightning_file(tmp_path):
    trainer, lit_model = lit_run(tmp_path, max_epochs=1)
    trainer.save_checkpoint(tmp_path / "lit.ckpt")

    loaded = PlugModel.load_from_checkpoint(tmp_path / "lit.ckpt")

    assert loaded.hparams.lr == 0.1
    assert_same_weights(weights(loaded), weights(lit_model))


# -- torchplug -> Lightning ---------------------------------------------------------------------


def test_lightning_resumes_a_torchplug_epoch_end_checkpoint_to_the_weights_of_an_uninterrupted_run(tmp_path):
    _, uninterrupted = lit_run(tmp_path / "whole", max_epochs=4)
    plug_run(tmp_path / "plug", max_epochs=2, callbacks=[ModelCheckpoint(dirpath=tmp_path / "plug", save_last=True)])

    trainer, resumed = lit_run(tmp_path / "lit", max_epochs=4, ckpt_path=str(tmp_path / "plug" / "last.ckpt"))

    assert trainer.global_step == 24 and trainer.current_epoch == 4
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 4
    assert_same_weights(weights(resumed), weights(uninterrupted))


def test_lightning_resumes_a_torchplug_mid_epoch_checkpoint_as_it_resumes_its_own(tmp_path):
    """Lightning restarts a plain DataLoader from its first batch after a mid-epoch resume (it warns that such a
    loader is not resumable), so the reference is Lightning resuming its own checkpoint of the same step."""
    every_9 = {"every_n_train_steps": 9, "save_top_k": -1}
    plug_run(tmp_path / "plug", max_epochs=2, callbacks=[ModelCheckpoint(dirpath=tmp_path / "plug", **every_9)])
    lit_run(
        tmp_path / "lit", max_epochs=2, callbacks=[pl.callbacks.ModelCheckpoint(dirpath=tmp_path / "lit", **every_9)]
    )
    seen: list[tuple[int, int, int]] = []

    class Watch(pl.Callback):
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            seen.append((trainer.current_epoch, batch_idx, trainer.global_step))

    _, from_own = lit_run(tmp_path / "a", max_epochs=2, ckpt_path=str(tmp_path / "lit" / "epoch=1-step=9.ckpt"))
    trainer, from_ours = lit_run(
        tmp_path / "b", max_epochs=2, ckpt_path=str(tmp_path / "plug" / "epoch=1-step=9.ckpt"), callbacks=[Watch()]
    )

    assert seen[0] == (1, 3, 9)  # 6 batches an epoch: step 9 is epoch 1's batch 2, so batch 3 comes next
    assert trainer.global_step == 12
    assert_same_weights(weights(from_ours), weights(from_own))


def test_a_torchplug_checkpoint_restores_lightning_callbacks_and_the_datamodule(tmp_path):
    checkpoint = ModelCheckpoint(dirpath=tmp_path, monitor="val_loss", save_last=True)
    stopping = EarlyStopping("val_loss", patience=5)
    plug_data = PlugData()
    plug_data.counter = 42
    plug_trainer(tmp_path, max_epochs=2, callbacks=[checkpoint, stopping]).fit(PlugModel(), datamodule=plug_data)
    lit_checkpoint = pl.callbacks.ModelCheckpoint(dirpath=tmp_path, monitor="val_loss")
    lit_stopping = pl.callbacks.EarlyStopping("val_loss", patience=5)
    datamodule = LitData()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lit_trainer(tmp_path, max_epochs=2, callbacks=[lit_checkpoint, lit_stopping]).fit(
            LitModel(), datamodule=datamodule, ckpt_path=str(tmp_path / "last.ckpt")
        )

    assert datamodule.counter == 42
    assert lit_checkpoint.best_model_path == checkpoint.best_model_path
    assert float(lit_stopping.best_score) == pytest.approx(float(stopping.best_score))


def test_lightning_module_load_from_checkpoint_reads_a_torchplug_file(tmp_path):
    trainer, plug_model = plug_run(tmp_path, max_epochs=1)
    trainer.save_checkpoint(tmp_path / "plug.ckpt")

    loaded = LitModel.load_from_checkpoint(tmp_path / "plug.ckpt", weights_only=True)

    assert loaded.hparams.lr == 0.1
    assert_same_weights(weights(loaded), weights(plug_model))


def test_a_torchplug_checkpoint_holds_every_key_of_a_lightning_checkpoint(tmp_path):
    lit_trainer_, _ = lit_run(tmp_path / "lit", max_epochs=1)
    lit_trainer_.save_checkpoint(tmp_path / "lit.ckpt")
    plug, _ = plug_run(tmp_path / "plug", max_epochs=1)
    plug.save_checkpoint(tmp_path / "plug.ckpt")

    lit = torch.load(tmp_path / "lit.ckpt", weights_only=True)
    ours = torch.load(tmp_path / "plug.ckpt", weights_only=True)

    assert set(lit) <= set(ours)
    assert set(lit["loops"]) <= set(ours["loops"])
    assert set(lit["loops"]["fit_loop"]) <= set(ours["loops"]["fit_loop"])
