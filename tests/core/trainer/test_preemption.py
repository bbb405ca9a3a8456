"""The Trainer's side of preemption: a flag at a step boundary, a checkpoint, a requeue, and an automatic resume.

The cluster environment here is a real ClusterEnvironment subclass whose scheduler is a signal
sent by the test itself; env-slurm tests the same path against a real SLURM cluster.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.core.trainer.models import BlobData, Classifier, quiet, weights
from torchplug.environments.local import LocalEnvironment


class SignalledEnvironment(LocalEnvironment):
    """A local environment that treats SIGUSR2 as a preemption notice and 'requeues' by recording it."""

    def __init__(self, restarted: bool = False, signal_at_step: int | None = None) -> None:
        super().__init__()
        self.restarted = restarted
        self.signal_at_step = signal_at_step
        self.flag = False
        self.requeued = False
        self._previous: Any = None

    def setup_preemption(self) -> bool:
        self._previous = signal.signal(signal.SIGUSR2, self._on_signal)
        return True

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.flag = True  # only a flag: the Trainer does the work at the next step boundary

    def preemption_requested(self) -> bool:
        return self.flag

    def requeue(self) -> None:
        self.requeued = True

    def resume_checkpoint_path(self, root_dir: str, checkpoint_io: Any) -> str | None:
        path = self.preemption_checkpoint_path(root_dir)
        return path if self.restarted and checkpoint_io.exists(path) else None

    def teardown_preemption(self) -> None:
        signal.signal(signal.SIGUSR2, self._previous)


class SendSignal(torchplug.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGUSR2)


def _fit(tmp_path: Path, environment: SignalledEnvironment, callbacks: list[Any]) -> tuple[Any, dict[str, Any]]:
    torch.manual_seed(0)
    model = Classifier()
    torch.manual_seed(7)
    trainer = torchplug.Trainer(
        **quiet(max_epochs=2, plugins=[environment], callbacks=callbacks, default_root_dir=tmp_path)
    )
    trainer.fit(model, datamodule=BlobData())
    return trainer, weights(model)


def test_preemption_saves_requeues_and_the_restart_resumes_exactly(tmp_path: Path) -> None:
    _, reference = _fit(tmp_path / "reference", SignalledEnvironment(), [])

    first = SignalledEnvironment()
    trainer, _ = _fit(tmp_path, first, [SendSignal(step=11)])
    assert first.requeued
    assert trainer.global_step == 11  # stopped at the next step boundary
    checkpoint_path = Path(first.preemption_checkpoint_path(str(tmp_path)))
    assert torch.load(checkpoint_path, weights_only=True)["global_step"] == 11
    assert signal.getsignal(signal.SIGUSR2) is not first._on_signal  # handler removed after fit

    restarted = SignalledEnvironment(restarted=True)
    trainer, resumed = _fit(tmp_path, restarted, [])
    assert trainer.global_step == 32
    assert not restarted.requeued
    assert all(torch.equal(reference[k], resumed[k]) for k in reference)


def test_no_preemption_watch_without_support(tmp_path: Path) -> None:
    class NoPreemption(LocalEnvironment):
        """An environment that cannot announce preemptions: the Trainer must never poll it."""

        polled = 0

        def preemption_requested(self) -> bool:
            NoPreemption.polled += 1
            return False

    trainer = torchplug.Trainer(**quiet(max_steps=2, default_root_dir=tmp_path, plugins=[NoPreemption()]))
    trainer.fit(Classifier(), datamodule=BlobData())
    assert trainer.global_step == 2
    assert NoPreemption.polled == 0 and not trainer.preempted


@pytest.mark.parametrize("step", [3])
def test_preemption_waits_for_the_end_of_gradient_accumulation(tmp_path: Path, step: int) -> None:
    environment = SignalledEnvironment()

    class SignalMidAccumulation(torchplug.Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == 4:  # batch 5 of a group of 3: accumulation is in progress
                os.kill(os.getpid(), signal.SIGUSR2)

    torch.manual_seed(0)
    trainer = torchplug.Trainer(
        **quiet(
            max_epochs=1,
            accumulate_grad_batches=step,
            plugins=[environment],
            callbacks=[SignalMidAccumulation()],
            default_root_dir=tmp_path,
        )
    )
    trainer.fit(Classifier(), datamodule=BlobData())
    assert environment.requeued
    assert trainer.fit_loop.progress.batches_done == 6  # the group of batches 4-6 finished first
