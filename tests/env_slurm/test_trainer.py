"""The Trainer with the real SLURMEnvironment in one process: detected from the variables of a 1-task step,
a real SIGUSR1, a checkpoint, ``scontrol requeue`` (the stand-in on PATH), and the automatic resume.

``test_cluster.py`` runs the same flow as a real requeued sbatch job with 2 ranks.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import torchplug
from tests.env_slurm.conftest import calls
from tests.env_slurm.scripts.train import MLP, dataset
from tests.env_slurm.test_detection import SRUN_TASK
from tests.environment_support import set_env
from torchplug_slurm import RequeueError, SLURMEnvironment

ONE_TASK = {
    **SRUN_TASK,
    "SLURM_JOB_NAME": "train",
    "SLURM_NTASKS": "1",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_STEP_TASKS_PER_NODE": "1",
    "SLURM_TASKS_PER_NODE": "1",
}
STEPS_PER_EPOCH = 16


class SignalAt(torchplug.Callback):
    def __init__(self, step: int, signum: int = signal.SIGUSR1) -> None:
        self.step, self.signum = step, signum

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


def fit(root: Path, callbacks: list[Any] | None = None) -> tuple[torchplug.Trainer, dict[str, torch.Tensor]]:
    torch.manual_seed(0)
    model = MLP()
    trainer = torchplug.Trainer(
        accelerator="cpu",
        devices="auto",
        max_epochs=3,
        enable_progress_bar=False,
        logger=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        callbacks=callbacks,
        default_root_dir=root,
    )
    trainer.fit(model, DataLoader(dataset(), batch_size=16, shuffle=True))
    return trainer, {k: v.detach().clone() for k, v in model.state_dict().items()}


@pytest.fixture
def one_task(monkeypatch: pytest.MonkeyPatch) -> None:
    set_env(monkeypatch, ONE_TASK)


@pytest.mark.usefixtures("one_task")
def test_preempt_requeue_and_resume_exactly(
    tmp_path: Path, fake_scontrol: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference_trainer, reference = fit(tmp_path / "reference")
    assert isinstance(reference_trainer.cluster_environment, SLURMEnvironment)
    assert "slurm: detected (SLURM_JOB_ID=12, SLURM_STEP_ID=0, SLURM_NTASKS=1)" in reference_trainer.describe()
    assert calls(fake_scontrol) == []

    before = signal.getsignal(signal.SIGUSR1)
    with pytest.warns(UserWarning, match=r"Preempted at step 10"):
        trainer, _ = fit(tmp_path / "run", [SignalAt(step=10)])
    assert trainer.preempted and trainer.global_step == 10
    assert calls(fake_scontrol) == [["requeue", "12"]]
    checkpoint = tmp_path / "run" / "hpc_ckpt_12.ckpt"
    assert torch.load(checkpoint, weights_only=True)["global_step"] == 10
    assert signal.getsignal(signal.SIGUSR1) is before

    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")  # what SLURM sets when the requeued job runs again
    trainer, resumed = fit(tmp_path / "run")
    assert not trainer.preempted and trainer.global_step == 3 * STEPS_PER_EPOCH
    assert calls(fake_scontrol) == [["requeue", "12"]]
    assert all(torch.equal(reference[k], resumed[k]) for k in reference)


@pytest.mark.usefixtures("one_task")
def test_a_failed_requeue_fails_fit_and_keeps_the_checkpoint(
    tmp_path: Path, fake_scontrol: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_EXIT", "1")
    monkeypatch.setenv("FAKE_OUTPUT", "Requested operation is presently disabled for job 12")
    with pytest.raises(RequeueError, match=r"Hint: submit the job with sbatch --requeue"):
        fit(tmp_path, [SignalAt(step=3)])
    assert (tmp_path / "hpc_ckpt_12.ckpt").exists()


@pytest.mark.usefixtures("one_task")
def test_no_requeue_without_auto_requeue(tmp_path: Path, fake_scontrol: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_SLURM_AUTO_REQUEUE", "0")
    handler = signal.signal(signal.SIGUSR1, lambda s, f: None)  # SIGUSR1 would otherwise end pytest
    try:
        trainer, _ = fit(tmp_path, [SignalAt(step=3)])
    finally:
        signal.signal(signal.SIGUSR1, handler)
    assert not trainer.preempted and trainer.global_step == 3 * STEPS_PER_EPOCH
    assert calls(fake_scontrol) == []
