"""How a callback's hooks are called: Lightning's parameter names and keywords, and logging through the module."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from tests.core.callbacks.conftest import TinyModel
from torchplug import Callback, DataModule
from torchplug.loggers.csv_logs import CSVLogger

HOOKS = [
    name
    for name, value in vars(Callback).items()
    if callable(value) and (name.startswith("on_") or name in ("setup", "teardown"))
]


@pytest.mark.parametrize("name", HOOKS)
def test_every_hook_names_its_first_parameters_as_lightning_does(name: str) -> None:
    parameters = list(inspect.signature(getattr(Callback, name)).parameters)
    assert parameters[:3] == ["self", "trainer", "pl_module"]


class SuperCalling(Callback):
    """A callback written for Lightning: it calls the base class's hooks by keyword."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        super().on_fit_start(trainer=trainer, pl_module=pl_module)
        self.calls.append("on_fit_start")

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        super().on_train_batch_end(
            trainer=trainer, pl_module=pl_module, outputs=outputs, batch=batch, batch_idx=batch_idx
        )
        self.calls.append("on_train_batch_end")

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        super().setup(trainer=trainer, pl_module=pl_module, stage=stage)
        self.calls.append(f"setup:{stage}")


def test_a_callback_calling_the_base_hooks_by_keyword_runs(make_trainer, tiny_model, data) -> None:
    callback = SuperCalling()
    trainer = make_trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=0, callbacks=[callback])
    trainer.fit(tiny_model(), data())

    assert callback.calls == ["setup:fit", "on_fit_start", "on_train_batch_end", "on_train_batch_end"]


class KeywordsOnly(Callback):
    """Lightning passes ``stage`` to setup/teardown by keyword: a hook taking ``**kwargs`` finds it there."""

    def __init__(self) -> None:
        self.stages: list[tuple[str, str]] = []

    def setup(self, trainer: Any, pl_module: Any, **kwargs: Any) -> None:
        self.stages.append(("setup", kwargs["stage"]))

    def teardown(self, trainer: Any, *args: Any, **kwargs: Any) -> None:
        self.stages.append(("teardown", kwargs["stage"]))


class KeywordData(DataModule):
    def __init__(self, loader: Any) -> None:
        super().__init__()
        self.loader = loader
        self.stages: list[str] = []

    def setup(self, **kwargs: Any) -> None:
        self.stages.append(kwargs["stage"])

    def train_dataloader(self) -> Any:
        return self.loader


def test_setup_and_teardown_get_stage_by_keyword(make_trainer, tiny_model, data) -> None:
    class KeywordModel(TinyModel):
        def setup(self, **kwargs: Any) -> None:
            self.stage = kwargs["stage"]

    callback, datamodule, model = KeywordsOnly(), KeywordData(data()), KeywordModel()
    trainer = make_trainer(max_epochs=1, limit_train_batches=1, limit_val_batches=0, callbacks=[callback])
    trainer.fit(model, datamodule=datamodule)

    assert callback.stages == [("setup", "fit"), ("teardown", "fit")]
    assert datamodule.stages == ["fit"]
    assert model.stage == "fit"


class LogsThroughTheModule(Callback):
    """Logs from the training and validation hooks, as Lightning callbacks do with ``pl_module.log``."""

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        pl_module.log("cb_batch", float(batch_idx))

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        pl_module.log("cb_epoch", 2.0)

    def on_validation_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        pl_module.log("cb_val", 3.0, prog_bar=True)


def test_callbacks_log_through_the_module(tmp_path, make_trainer, tiny_model, data) -> None:
    trainer = make_trainer(
        max_epochs=1,
        limit_train_batches=3,
        log_every_n_steps=1,
        logger=CSVLogger(tmp_path),
        callbacks=[LogsThroughTheModule()],
    )
    trainer.fit(tiny_model(), data(), data())

    metrics = trainer.callback_metrics
    assert (float(metrics["cb_batch"]), float(metrics["cb_epoch"]), float(metrics["cb_val"])) == (2.0, 2.0, 3.0)
    assert {"cb_batch", "cb_epoch", "cb_val"} <= set(trainer.logged_metrics)
    assert trainer.progress_bar_metrics["cb_val"] == 3.0
