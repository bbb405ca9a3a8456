"""Tiny models, data and a recording CheckpointIO for the callback tests: real Trainer runs on the CPU."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from torchplug.callbacks.model_summary import ModelSummary
from torchplug.core.module import Module
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug.trainer.trainer import Trainer


def regression_data(samples: int = 32, batch_size: int = 4, seed: int = 0) -> DataLoader[Any]:
    """``samples`` points of y = sum(x) in batches of ``batch_size`` (8 batches by default)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, 4, generator=generator)
    return DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=batch_size)


class TinyModel(Module):
    """A linear regression that logs ``train_loss`` (step and epoch) and ``val_loss``.

    Args:
        lr: SGD learning rate.
        scores: When given, validation also logs ``score`` = ``scores[current_epoch]`` (a scripted
            metric, so tests know which epochs are best).
        scheduler: ``"step_lr"`` adds a StepLR(step_size=1, gamma=0.5) stepped every epoch.
    """

    def __init__(self, lr: float = 0.05, scores: Sequence[float] | None = None, scheduler: str | None = None) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(4, 1)
        self.scores = list(scores) if scores is not None else None
        self.scheduler = scheduler

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))
        if self.scores is not None:
            self.log("score", float(self.scores[self.current_epoch]))

    def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        if self.scheduler == "step_lr":
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]
        return optimizer


class RecordingCheckpointIO(TorchCheckpointIO):
    """The real torch IO, recording every call: ``("save" | "remove" | "exists" | "flush", path)``."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, str | None]] = []

    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        self.calls.append(("save", path))
        super().save_checkpoint(checkpoint, path, storage_options)

    def remove_checkpoint(self, path: str) -> None:
        self.calls.append(("remove", path))
        super().remove_checkpoint(path)

    def load_checkpoint(self, path: str, map_location: Any | None = None, weights_only: bool = True) -> dict[str, Any]:
        self.calls.append(("load", path))
        return super().load_checkpoint(path, map_location, weights_only)

    def exists(self, path: str) -> bool:
        self.calls.append(("exists", path))
        return super().exists(path)

    def flush(self) -> None:
        self.calls.append(("flush", None))

    def paths(self, kind: str) -> list[str]:
        return [path for call, path in self.calls if call == kind and path is not None]


@pytest.fixture
def tiny_model() -> Callable[..., TinyModel]:
    """Build a :class:`TinyModel` (seeded, so every run starts from the same weights)."""

    def build(**kwargs: Any) -> TinyModel:
        torch.manual_seed(0)
        return TinyModel(**kwargs)

    return build


@pytest.fixture
def data() -> Callable[..., DataLoader[Any]]:
    """Build a regression DataLoader (see :func:`regression_data`)."""
    return regression_data


@pytest.fixture
def make_trainer(tmp_path: Any) -> Callable[..., Trainer]:
    """A CPU Trainer writing under ``tmp_path``: no logger, no progress bar, no sanity check unless asked."""

    def build(**kwargs: Any) -> Trainer:
        kwargs.setdefault("accelerator", "cpu")
        kwargs.setdefault("devices", 1)
        kwargs.setdefault("default_root_dir", str(tmp_path))
        kwargs.setdefault("logger", False)
        kwargs.setdefault("enable_progress_bar", False)
        kwargs.setdefault("num_sanity_val_steps", 0)
        if not any(isinstance(c, ModelSummary) for c in kwargs.get("callbacks") or []):
            kwargs.setdefault("enable_model_summary", False)  # a summary asked for by its callback is printed
        return Trainer(**kwargs)

    return build


@pytest.fixture
def recording_io() -> RecordingCheckpointIO:
    """A fresh :class:`RecordingCheckpointIO`."""
    return RecordingCheckpointIO()


@pytest.fixture
def recording_io_class() -> type[RecordingCheckpointIO]:
    """The :class:`RecordingCheckpointIO` class (for tests that subclass it)."""
    return RecordingCheckpointIO


def reference_weights(
    epochs: int, accumulate: Callable[[int], int] = lambda epoch: 1, lr: float = 0.05
) -> dict[str, torch.Tensor]:
    """The weights a plain PyTorch loop reaches with :class:`TinyModel` on :func:`regression_data`.

    ``accumulate(epoch)`` batches are summed per optimizer step (the loss divided by it, the last
    batch of an epoch always stepping), as the Trainer does.
    """
    torch.manual_seed(0)
    model = TinyModel(lr=lr)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    loader = regression_data()
    batches = len(loader)
    for epoch in range(epochs):
        every = accumulate(epoch)
        for index, (x, y) in enumerate(loader):
            loss = torch.nn.functional.mse_loss(model.layer(x), y) / every
            loss.backward()
            if (index + 1) % every == 0 or index + 1 == batches:
                optimizer.step()
                optimizer.zero_grad()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
