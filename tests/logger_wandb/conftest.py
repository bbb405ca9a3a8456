"""W&B in offline mode (no network here), and a reader of the run files it writes, with W&B's own record schema."""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug

#: W&B's run file: a ":W&B" header, then LevelDB's log format (32 KiB blocks of checksummed record chunks).
HEADER = b":W&B"
HEADER_SIZE = 7
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every test runs W&B offline and quiet, with its settings and cache in the test's own folder."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setenv("WANDB_CACHE_DIR", str(tmp_path / "wandb-cache"))
    monkeypatch.setenv("WANDB_DATA_DIR", str(tmp_path / "wandb-data"))


def _chunks(data: bytes) -> Iterator[bytes]:
    """The payloads of the log's records, reassembled from their chunks."""
    position, pending = HEADER_SIZE, b""
    while position + 7 <= len(data):
        left_in_block = BLOCK - position % BLOCK
        if left_in_block < 7:  # the block's trailer is padding
            position += left_in_block
            continue
        _crc, length, kind = struct.unpack_from("<IHB", data, position)
        payload = data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind == FULL:
            yield payload
        elif kind == FIRST:
            pending = payload
        elif kind == MIDDLE:
            pending += payload
        elif kind == LAST:
            yield pending + payload
        elif kind == 0 and length == 0:  # zero padding at the end of a block
            position += BLOCK - position % BLOCK if position % BLOCK else 0


def _json(item: Any) -> Any:
    return json.loads(item.value_json)


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


@dataclass
class OfflineRun:
    """What one offline run file holds, as W&B recorded it."""

    run_id: str = ""
    project: str = ""
    display_name: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    artifacts: list[Any] = field(default_factory=list)
    exit_code: int | None = None

    def series(self, key: str) -> list[tuple[int, float]]:
        """(trainer/global_step, value) of every history row that has ``key``."""
        return [(row["trainer/global_step"], row[key]) for row in self.history if key in row]


def read_run(path: Path, timeout: float = 120.0) -> OfflineRun:
    """Parse ``run-<id>.wandb`` with W&B's protobuf ``Record``, once it holds the run's exit record.

    W&B's service process writes the file behind ``finish()``; the reader waits for it to get there.
    """
    deadline = time.monotonic() + timeout
    while True:
        run = _parse(path)
        if run.exit_code is not None or time.monotonic() > deadline:
            return run
        time.sleep(0.2)


def _parse(path: Path) -> OfflineRun:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data.startswith(HEADER), f"{path} is not a W&B run file"
    run = OfflineRun()
    for payload in _chunks(data):
        record = wandb_internal_pb2.Record()
        record.ParseFromString(payload)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.run_id, run.project, run.display_name = record.run.run_id, record.run.project, record.run.display_name
            run.config.update({_key(i): _json(i) for i in record.run.config.update})
        elif kind == "history":
            run.history.append({_key(i): _json(i) for i in record.history.item})
        elif kind == "config":
            run.config.update({_key(i): _json(i) for i in record.config.update})
        elif kind == "artifact":
            run.artifacts.append(record.artifact)
        elif kind == "exit":
            run.exit_code = record.exit.exit_code
    return run


def run_files(root: Path) -> list[Path]:
    """Every offline run file under ``root`` (``<root>/wandb/offline-run-*/run-<id>.wandb``), oldest first."""
    return sorted(root.glob("wandb/offline-run-*/run-*.wandb"))


class Regressor(torchplug.Module):
    """A linear regression with saved hyperparameters (one nested) that logs its loss on every step."""

    def __init__(self, lr: float = 0.05, optimizer: dict[str, Any] | None = None, fail_at: int = -1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        if self.global_step == self.hparams.fail_at:
            raise RuntimeError("the model failed on purpose")
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
