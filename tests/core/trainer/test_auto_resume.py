"""``fit(ckpt_path="auto")``, and the automatic resume of a restarted job (``ClusterEnvironment.restart_count()``).

"auto" resumes from the newest complete checkpoint of the run (the ModelCheckpoint directories and
the preemption checkpoint), or starts from the beginning when there is none. A job its launcher
or scheduler restarted (torchrun's ``--max-restarts``, a requeued SLURM job) does the same without
being asked. Also here: the checkpoint IO's ``prepare`` hook, called once after the first step.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.core.trainer.models import BlobData, Classifier, quiet, weights
from torchplug.callbacks.model_checkpoint import ModelCheckpoint
from torchplug.environments.local import LocalEnvironment
from torchplug.environments.torchelastic import TorchElasticEnvironment
from torchplug.io.torch_io import TorchCheckpointIO


class Crash(Exception):
    """Stands in for a killed process."""


class CrashAt(torchplug.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            raise Crash(f"killed at step {self.step}")


class Restarted(LocalEnvironment):
    """This machine, in a job that its scheduler has restarted once."""

    def restart_count(self) -> int:
        return 1


def fit(root: Path, *callbacks: Any, ckpt_path: str | None = None, **kwargs: Any) -> torchplug.Trainer:
    torch.manual_seed(0)
    model = Classifier()
    torch.manual_seed(1234)
    checkpoint = ModelCheckpoint(dirpath=root / "ckpts", every_n_train_steps=5, save_top_k=2, save_last=True)
    trainer = torchplug.Trainer(
        **quiet(
            max_epochs=3, enable_checkpointing=True, callbacks=[checkpoint, *callbacks], default_root_dir=root, **kwargs
        )
    )
    trainer.fit(model, datamodule=BlobData(), ckpt_path=ckpt_path)
    trainer.final_weights = weights(model)  # type: ignore[attr-defined]
    return trainer


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    return fit(tmp_path_factory.mktemp("reference")).final_weights  # type: ignore[attr-defined,no-any-return]


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_auto_without_any_checkpoint_starts_from_the_beginning(
    tmp_path: Path, reference: dict[str, torch.Tensor], caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO, logger="torchplug"):
        trainer = fit(tmp_path, ckpt_path="auto")
    assert trainer.ckpt_path is None
    assert "no complete checkpoint yet, training starts from the beginning" in caplog.text
    assert same(trainer.final_weights, reference)  # type: ignore[attr-defined]


@pytest.mark.parametrize("io", ["torch", "dcp"])
def test_auto_resumes_from_the_newest_complete_checkpoint(
    tmp_path: Path, reference: dict[str, torch.Tensor], io: str
) -> None:
    with pytest.raises(Crash):
        fit(tmp_path, CrashAt(step=23), plugins=[io])
    ckpts = tmp_path / "ckpts"
    assert sorted(p.name for p in ckpts.iterdir()) == ["epoch=0-step=15.ckpt", "epoch=1-step=20.ckpt", "last.ckpt"]
    # A newer save that never finished is no candidate: a hidden temporary, or a directory without metadata.
    (ckpts / ".last.ckpt.tmp-0123456789ab").mkdir()
    torn = ckpts / "epoch=9-step=99.ckpt"
    torn.mkdir()
    (torn / "__0_0.distcp").write_bytes(b"half a shard")
    future = time.time() + 60
    os.utime(torn, (future, future))
    trainer = fit(tmp_path, ckpt_path="auto", plugins=[io])
    assert trainer.ckpt_path in (str(ckpts / "last.ckpt"), str(ckpts / "epoch=1-step=20.ckpt"))  # both step 20
    assert same(trainer.final_weights, reference)  # type: ignore[attr-defined]


def test_a_restarted_job_resumes_by_itself(tmp_path: Path, reference: dict[str, torch.Tensor]) -> None:
    with pytest.raises(Crash):
        fit(tmp_path, CrashAt(step=12))
    trainer = fit(tmp_path, plugins=[Restarted()])  # no ckpt_path: the environment says it was restarted
    assert trainer.ckpt_path == str(tmp_path / "ckpts" / "last.ckpt")
    assert same(trainer.final_weights, reference)  # type: ignore[attr-defined]


def test_a_restarted_job_without_a_checkpoint_says_it_starts_over(tmp_path: Path) -> None:
    with pytest.warns(UserWarning, match=r"Restarted says this job was restarted \(1 time\(s\)\), but there is no"):
        trainer = fit(tmp_path, plugins=[Restarted()])
    assert trainer.ckpt_path is None and trainer.global_step == 48


def test_the_preemption_checkpoint_is_a_candidate_too(tmp_path: Path, reference: dict[str, torch.Tensor]) -> None:
    with pytest.raises(Crash):
        fit(tmp_path / "first", CrashAt(step=30))
    # The newest: written later than the ModelCheckpoint's, where the environment keeps it.
    preemption = LocalEnvironment().preemption_checkpoint_path(str(tmp_path / "first"))
    with pytest.raises(Crash):
        fit(tmp_path / "second", _SaveAt(step=33, path=preemption), CrashAt(step=33))
    trainer = fit(tmp_path / "first", ckpt_path="auto")
    assert trainer.ckpt_path == preemption
    assert same(trainer.final_weights, reference)  # type: ignore[attr-defined]


class _SaveAt(torchplug.Callback):
    def __init__(self, step: int, path: str) -> None:
        self.step, self.path = step, path

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def test_torchrun_restarts_are_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "job")
    assert TorchElasticEnvironment().restart_count() == 0
    monkeypatch.setenv("TORCHELASTIC_RESTART_COUNT", "2")
    assert TorchElasticEnvironment().restart_count() == 2
    assert LocalEnvironment().restart_count() == 0


# -- the checkpoint IO's prepare hook ------------------------------------------------------------


class PreparedIO(TorchCheckpointIO):
    def __init__(self) -> None:
        super().__init__()
        self.prepared: list[dict[str, Any]] = []

    def prepare(self, checkpoint: dict[str, Any]) -> None:
        self.prepared.append(checkpoint)


def test_the_checkpoint_io_is_prepared_once_after_the_first_optimizer_step(tmp_path: Path) -> None:
    io = PreparedIO()
    trainer = fit(tmp_path, plugins=[io])
    assert len(io.prepared) == 1
    (state,) = io.prepared
    assert sorted(state) == ["optimizer_states", "state_dict"]
    momentum = state["optimizer_states"][0]["state"]
    assert len(momentum) == 4  # SGD's momentum buffers exist: the first step has run
    assert state["state_dict"]["net.0.weight"].data_ptr() == trainer.model.net[0].weight.data_ptr()  # the live tensors
    fit(tmp_path / "again", plugins=[io])  # once per fit
    assert len(io.prepared) == 2


def fit_logged(root: Path, *callbacks: Any, **kwargs: Any) -> torchplug.Trainer:
    """As :func:`fit`, with the default checkpoint directory: under the CSV logger's version of this run."""
    from torchplug.loggers.csv_logs import CSVLogger

    torch.manual_seed(0)
    model = Classifier()
    torch.manual_seed(1234)
    checkpoint = ModelCheckpoint(every_n_train_steps=5, save_top_k=2, save_last=True)
    trainer = torchplug.Trainer(
        **quiet(
            max_epochs=3,
            enable_checkpointing=True,
            callbacks=[checkpoint, *callbacks],
            logger=CSVLogger(root, name="exp"),
            **kwargs,
        )
    )
    trainer.fit(model, datamodule=BlobData())
    trainer.final_weights = weights(model)  # type: ignore[attr-defined]
    return trainer


def test_a_restart_that_logs_into_a_new_version_resumes_from_the_earlier_versions_checkpoints(
    tmp_path: Path, reference: dict[str, torch.Tensor]
) -> None:
    with pytest.raises(Crash):
        fit_logged(tmp_path, CrashAt(step=12))
    assert (tmp_path / "exp" / "version_0" / "checkpoints" / "last.ckpt").exists()
    with pytest.warns(UserWarning, match="only best_model_path is restored"):  # this run writes to version_1
        trainer = fit_logged(tmp_path, plugins=[Restarted()])
    assert trainer.logger is not None and trainer.logger.version == 1
    assert trainer.ckpt_path == str(tmp_path / "exp" / "version_0" / "checkpoints" / "last.ckpt")
    assert same(trainer.final_weights, reference)  # type: ignore[attr-defined]
