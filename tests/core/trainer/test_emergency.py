"""Every emergency-checkpoint door goes through one mechanism: one announcement, and a failed save loses nothing.

The doors are the ones a Lightning user knows: ``ModelCheckpoint(save_on_exception=True)``,
``OnExceptionCheckpoint``, SIGTERM (``ModelCheckpoint``'s interruption checkpoint) and a cluster
environment's preemption notice. Each test runs all four the same way and asks the same of them.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from tests.core.conftest import LogRecords
from tests.core.trainer.models import BlobData, Classifier, quiet
from tests.core.trainer.test_preemption import SignalledEnvironment
from torchplug.callbacks import ModelCheckpoint, OnExceptionCheckpoint

#: The one shape of every announcement of an emergency checkpoint written.
ANNOUNCED = re.compile(
    r"^(?P<reason>.+\.) The checkpoint of global step (?P<step>\d+) was written to (?P<path>\S+) "
    r"\(resume with fit\(\.\.\., ckpt_path='(?P=path)'\)\)$"
)
AT_STEP = 5


@dataclass
class Door:
    """One way to ask for an emergency checkpoint: the Trainer's arguments and how the emergency comes."""

    name: str
    emergency: Callable[[], None]  # called at global step AT_STEP
    raises: type[BaseException] | None
    arguments: Callable[[Path], dict[str, Any]]
    previous: Callable[[Path], Path | None] = lambda root: None  # a checkpoint there before the run
    environment: list[SignalledEnvironment] = field(default_factory=list)


def _raise() -> None:
    raise RuntimeError("disk on fire")


def _signal(signum: int) -> Callable[[], None]:
    return lambda: os.kill(os.getpid(), signum)


def _preemption_arguments(door: Door) -> Callable[[Path], dict[str, Any]]:
    def arguments(root: Path) -> dict[str, Any]:
        door.environment[:] = [SignalledEnvironment()]
        return {"plugins": door.environment, "default_root_dir": root}

    return arguments


def _doors() -> list[Door]:
    preemption = Door("preemption", _signal(signal.SIGUSR2), None, lambda root: {})
    preemption.arguments = _preemption_arguments(preemption)
    preemption.previous = lambda root: root / "preemption.ckpt"
    return [
        Door(
            "ModelCheckpoint(save_on_exception=True)",
            _raise,
            RuntimeError,
            lambda root: {
                "enable_checkpointing": True,
                "callbacks": [
                    ModelCheckpoint(root / "ckpts", save_on_exception=True, save_last=True, every_n_train_steps=2)
                ],
            },
        ),
        Door(
            "OnExceptionCheckpoint",
            _raise,
            RuntimeError,
            lambda root: {"callbacks": [OnExceptionCheckpoint(root / "ckpts")]},
            previous=lambda root: root / "ckpts" / "on_exception.ckpt",
        ),
        Door(
            "SIGTERM",
            _signal(signal.SIGTERM),
            SystemExit,
            lambda root: {
                "enable_checkpointing": True,
                "callbacks": [ModelCheckpoint(root / "ckpts", every_n_train_steps=1000)],
            },
            previous=lambda root: root / "ckpts" / "interrupted.ckpt",
        ),
        preemption,
    ]


DOORS = _doors()


class EmergencyAt(torchplug.Callback):
    """At global step ``AT_STEP``: optionally break every later save, then bring the emergency on."""

    def __init__(self, door: Door, break_saves: Callable[[], None] | None = None) -> None:
        self.door, self.break_saves = door, break_saves

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == AT_STEP:
            if self.break_saves is not None:
                self.break_saves()
            self.door.emergency()


def _fit(door: Door, root: Path, break_saves: Callable[[], None] | None = None) -> torchplug.Trainer:
    arguments = door.arguments(root)
    arguments["callbacks"] = [EmergencyAt(door, break_saves), *arguments.get("callbacks", [])]
    torch.manual_seed(0)
    trainer = torchplug.Trainer(**quiet(max_epochs=1, **arguments))
    if door.raises is None:
        trainer.fit(Classifier(), datamodule=BlobData())
    else:
        with pytest.raises(door.raises):
            trainer.fit(Classifier(), datamodule=BlobData())
    return trainer


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("door", DOORS, ids=[d.name for d in DOORS])
def test_every_door_writes_through_the_one_mechanism(tmp_path: Path, door: Door, torchplug_log: LogRecords) -> None:
    _fit(door, tmp_path)

    warnings = torchplug_log.messages(logging.WARNING)
    announced = [m for m in (ANNOUNCED.match(text) for text in warnings) if m is not None]
    assert len(announced) == 1, warnings
    path, step = announced[0]["path"], int(announced[0]["step"])
    assert torch.load(path, weights_only=True)["global_step"] == step  # complete, and of the step it names
    assert not [p for p in Path(path).parent.iterdir() if p.name.startswith(".")]  # no temporary left behind


@pytest.mark.parametrize("door", DOORS, ids=[d.name for d in DOORS])
def test_a_failed_emergency_save_loses_no_checkpoint(
    tmp_path: Path, door: Door, torchplug_log: LogRecords, monkeypatch: pytest.MonkeyPatch
) -> None:
    previous = door.previous(tmp_path)
    if previous is not None:  # an earlier run's checkpoint, at the path this door writes to
        previous.parent.mkdir(parents=True, exist_ok=True)
        torch.save({"global_step": 1, "state_dict": {}}, previous)
    before: dict[str, bytes] = {}

    def disk_full_from_now_on() -> None:
        before.update(_files(tmp_path))

        def save_half_then_fail(checkpoint: Any, target: Any, *args: Any, **kwargs: Any) -> None:
            with open(target, "wb") as stream:
                stream.write(b"half a checkpoint")
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(torch, "save", save_half_then_fail)

    trainer = _fit(door, tmp_path, break_saves=disk_full_from_now_on)  # the run's own ending, not the save's error

    assert before and _files(tmp_path) == before  # every checkpoint there is intact, and nothing half-written is left
    failures = torchplug_log.messages(logging.ERROR)
    assert len(failures) == 1 and "No checkpoint was lost" in failures[0] and "OSError" in failures[0]
    if door.environment:  # the scheduler stops the job anyway: requeued, to resume from what is complete
        assert door.environment[0].requeued and trainer.preempted
