"""SIGINT and SIGTERM during ``fit`` in this very process (the multi-process cases are in tests/core/strategies).

The signal is sent by a callback with ``os.kill`` at a known step, so the step every assertion
names is exact: training stops after the step in progress, ``interrupted.ckpt`` holds it, and
``fit`` ends with ``SystemExit(128 + signal)``.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.core.conftest import LogRecords
from tests.core.trainer.models import BlobData, Classifier, quiet
from torchplug.callbacks import ModelCheckpoint


class SendSignal(torchplug.Callback):
    """Sends ``signum`` to this process at the start of batch ``at`` (global step ``at`` in one epoch)."""

    def __init__(self, signum: int, at: int) -> None:
        self.signum, self.at = signum, at
        self.steps_seen: list[int] = []

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        self.steps_seen.append(trainer.global_step)
        if trainer.global_step == self.at:
            os.kill(os.getpid(), self.signum)


def fit(tmp_path: Path, *callbacks: torchplug.Callback, **kwargs: Any) -> tuple[torchplug.Trainer, ModelCheckpoint]:
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpts", every_n_train_steps=1000, **kwargs)
    torch.manual_seed(0)
    trainer = torchplug.Trainer(**quiet(max_epochs=2, callbacks=[*callbacks, checkpoint], enable_checkpointing=True))
    trainer.fit(Classifier(), datamodule=BlobData())
    return trainer, checkpoint


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_fit_after_the_step_with_a_checkpoint(
    tmp_path: Path, signum: int, capfd: pytest.CaptureFixture[str], torchplug_log: LogRecords
) -> None:
    sender = SendSignal(signum, at=5)
    with pytest.raises(SystemExit) as info:
        fit(tmp_path, sender)
    assert info.value.code == 128 + signum
    assert isinstance(info.value.__cause__, torchplug.TrainingInterrupted)
    assert sender.steps_seen[-1] == 5  # the step in progress finished; no other started
    checkpoint = torch.load(tmp_path / "ckpts" / "interrupted.ckpt", weights_only=True)
    assert checkpoint["global_step"] == 6
    err = capfd.readouterr().err
    name = signal.Signals(signum).name
    assert f"torchplug: {name} received: stopping after the current step, with a checkpoint" in err
    path = f"{tmp_path}/ckpts/interrupted.ckpt"
    said = f"fit() stopped by {name} after global step 6. The checkpoint of global step 6 was written to {path}"
    assert said in torchplug_log.text


def test_the_default_handlers_are_back_after_fit(tmp_path: Path) -> None:
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit):
        fit(tmp_path, SendSignal(signal.SIGTERM, at=2))
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    fit(tmp_path)  # a run without a signal: untouched too
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before


def test_save_on_interrupt_false_writes_no_checkpoint(tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as info:
        fit(tmp_path, SendSignal(signal.SIGTERM, at=3), save_on_interrupt=False)
    assert info.value.code == 143
    assert not (tmp_path / "ckpts" / "interrupted.ckpt").exists()


def test_the_interruption_checkpoint_resumes_where_it_stopped(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        fit(tmp_path, SendSignal(signal.SIGTERM, at=20))
    torch.manual_seed(0)
    resumed = torchplug.Trainer(**quiet(max_epochs=2))
    model = Classifier()
    resumed.fit(model, datamodule=BlobData(), ckpt_path=str(tmp_path / "ckpts" / "interrupted.ckpt"))
    straight, _ = fit(tmp_path / "straight")
    assert resumed.global_step == straight.global_step == 32
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), straight.module.state_dict().values()))


def test_outside_the_main_thread_no_handler_is_installed(tmp_path: Path) -> None:
    seen: list[Any] = []

    class Look(torchplug.Callback):
        def on_train_start(self, trainer: Any, module: Any) -> None:
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=fit, args=(tmp_path, Look()))
    thread.start()
    thread.join()
    assert seen == [signal.SIG_DFL]


def test_a_handler_already_installed_is_kept_and_said_once_per_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, torchplug_log: LogRecords
) -> None:
    from torchplug.trainer import signals

    monkeypatch.setattr(signals, "_INFORMED", set())
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as under nohup or a shell's background job
    try:
        fit(tmp_path)
        fit(tmp_path)  # a second fit in the same process: nothing new to say
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # honoured, not replaced
    finally:
        signal.signal(signal.SIGINT, previous)
    said = [m for m in torchplug_log.messages() if "keeps the handler already installed" in m]
    assert said == ["SIGINT keeps the handler already installed (<Handlers.SIG_IGN: 1>)"]
