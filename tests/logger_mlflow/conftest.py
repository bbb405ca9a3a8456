"""Real MLflow stores for the tests: a sqlite database, and an ``mlflow server`` on loopback started here."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import torch

import torchplug


@pytest.fixture(scope="session")
def sqlite_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A sqlite store shared by the tests of a session (MLflow takes seconds to create its tables)."""
    root = tmp_path_factory.mktemp("mlflow-sqlite")
    return f"sqlite:///{root}/mlflow.db"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def server_uri(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``mlflow server`` on 127.0.0.1 with its own sqlite store, serving artifacts over HTTP."""
    root = tmp_path_factory.mktemp("mlflow-server")
    port = _free_port()
    command = [
        sys.executable, "-m", "mlflow", "server",
        "--backend-store-uri", f"sqlite:///{root}/mlflow.db",
        "--artifacts-destination", str(root / "artifacts"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    log = (root / "server.log").open("w")
    server = subprocess.Popen(
        command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}
    )
    uri = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180  # a loaded machine: the server creates its tables first
    try:
        while True:
            try:
                with urllib.request.urlopen(f"{uri}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"mlflow server did not start:\n{(root / 'server.log').read_text()}")
            time.sleep(0.5)
        yield uri
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


class Regressor(torchplug.Module):
    """A linear regression with saved hyperparameters (one of them nested) that logs its loss on every step."""

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
        self.log("loss@scaled", loss * 2)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def history(client: Any, run_id: str, key: str) -> list[tuple[int, float]]:
    """(step, value) of every value of ``key`` in the run, by step."""
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))
