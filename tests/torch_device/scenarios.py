"""Training runs on ``tpdev`` with no torchplug plugin for it, for the tests in this folder.

``python scenarios.py NAME OUT [ARGS...]`` runs one scenario in a process where torch has loaded
the ``tpdev`` device (torchplug-testdevice on ``PYTHONPATH``) and writes what it saw to
``OUT/<name>-rank<N>.json``. A script rather than snippets: ``strategy="ddp"`` re-runs the script
once per extra rank, as ``torchrun`` would.
"""

from __future__ import annotations

import json
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import DataLoader

import torchplug
from tests.core.trainer.models import BlobData, Classifier, blobs

QUIET: dict[str, Any] = {"logger": False, "enable_progress_bar": False, "num_sanity_val_steps": 0}


class Recording(Classifier):
    """The test Classifier, noting where its parameters live and what autocast does inside ``training_step``."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.seen: dict[str, set[str]] = {"parameter_devices": set(), "batch_devices": set(), "matmul_dtypes": set()}

    def on_fit_start(self) -> None:
        self.seen["parameter_devices"] |= {str(p.device) for p in self.parameters()}

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        self.seen["parameter_devices"] |= {str(p.device) for p in self.parameters()}
        self.seen["batch_devices"].add(str(x.device))
        self.seen["matmul_dtypes"].add(str((x @ self.net[0].weight.T).dtype).removeprefix("torch."))
        return super().training_step(batch, batch_idx)

    def report(self) -> dict[str, list[str]]:
        return {key: sorted(values) for key, values in self.seen.items()}


class Sequential(BlobData):
    """The blob data in a fixed order (so a DDP run and a one-process run see the same global batches)."""

    def __init__(self, batch_size: int) -> None:
        super().__init__(batch_size=batch_size, n=256, shuffle=False)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(self.n, seed=0), batch_size=self.batch_size, shuffle=False)


def weights(module: torch.nn.Module) -> dict[str, list[Any]]:
    return {k: v.detach().cpu().tolist() for k, v in module.state_dict().items()}


def write(out: Path, name: str, rank: int, report: dict[str, Any]) -> None:
    (out / f"{name}-rank{rank}.json").write_text(json.dumps(report))


def auto_fit(out: Path) -> None:
    """``accelerator="auto"`` with only the core installed: trains on tpdev, and says why."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = torchplug.Trainer(accelerator="auto", devices=1, max_epochs=2, enable_checkpointing=False, **QUIET)
        torchplug.Trainer(accelerator="auto", devices=1, **QUIET)  # a second Trainer warns nothing new
    torch.manual_seed(0)
    model = Recording(dropout=0.0)
    started = time.perf_counter()
    trainer.fit(model, datamodule=BlobData(n=256))
    report = {
        "seconds": time.perf_counter() - started,
        "describe": trainer.describe(),
        "accelerator": repr(trainer.accelerator),
        "strategy": type(trainer.strategy).__name__,
        "root_device": str(trainer.strategy.root_device),
        "stats": trainer.accelerator.get_device_stats(trainer.strategy.root_device),
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        "val_acc": float(trainer.callback_metrics["val_acc"]),
        **model.report(),
    }
    write(out, "auto_fit", trainer.global_rank, report)


def _fit(root: Path, max_epochs: int, ckpt_path: str | None = None) -> tuple[torchplug.Trainer, Recording]:
    torch.manual_seed(0)
    model = Recording(dropout=0.3)  # dropout draws from tpdev's generator: a resume must restore it
    torch.manual_seed(1234)
    trainer = torchplug.Trainer(accelerator="tpdev", devices=1, max_epochs=max_epochs, default_root_dir=root, **QUIET)
    trainer.fit(model, datamodule=BlobData(n=256), ckpt_path=ckpt_path)
    return trainer, model


def resume(out: Path) -> None:
    """Two epochs, a checkpoint, two more from it: the weights of four epochs in one go."""
    _, straight = _fit(out / "straight", 4)
    first, _ = _fit(out / "first", 2)
    path = out / "after-2.ckpt"
    first.save_checkpoint(path)
    resumed_trainer, resumed = _fit(out / "resumed", 4, ckpt_path=str(path))
    checkpoint = torch.load(path, weights_only=True)
    rng = checkpoint["rng"]["accelerator"]
    report = {
        "straight": weights(straight),
        "resumed": weights(resumed),
        "epochs": resumed_trainer.current_epoch,
        "rng_device_type": rng["device_type"],
        "rng_states": len(rng["states"]),
        "checkpoint_tensor_devices": sorted({str(v.device) for v in checkpoint["state_dict"].values()}),
        **resumed.report(),
    }
    write(out, "resume", 0, report)


def autocast(out: Path, precision: str) -> None:
    """A fit under ``precision``: the dtype of a matmul inside ``training_step``, and the scaler's device."""
    torch.manual_seed(0)
    model = Recording(dropout=0.0)
    trainer = torchplug.Trainer(
        accelerator="auto", devices=1, max_epochs=1, precision=precision, enable_checkpointing=False, **QUIET
    )
    trainer.fit(model, datamodule=BlobData(n=128))
    plugin = trainer.precision_plugin
    scaler = getattr(plugin, "scaler", None)
    report = {
        "precision": type(plugin).__name__,
        "autocast_device_type": getattr(plugin, "device_type", None),
        "scaler_device": None if scaler is None else scaler._device,
        "scale": None if scaler is None else float(scaler.get_scale()),
        "weights_dtype": str(model.net[0].weight.dtype),
        "train_loss": float(trainer.callback_metrics["train_loss"]),
        **model.report(),
    }
    write(out, f"autocast-{precision}", 0, report)


def data_parallel(out: Path, devices: int, batch_size: int) -> None:
    """``strategy="ddp"`` over ``devices`` tpdev devices (or one process), on a fixed global batch."""
    torch.manual_seed(0)
    model = Recording(dropout=0.0, momentum=0.0)
    strategy = "ddp" if devices > 1 else "auto"
    trainer = torchplug.Trainer(
        accelerator="auto", devices=devices, strategy=strategy, max_epochs=2, enable_checkpointing=False, **QUIET
    )
    started = time.perf_counter()
    trainer.fit(model, datamodule=Sequential(batch_size))
    seconds = time.perf_counter() - started
    report: dict[str, Any] = {
        "seconds": seconds,
        "steps": trainer.global_step,
        "world_size": trainer.world_size,
        "weights": weights(model),
        "describe": trainer.describe(),
        **model.report(),
    }
    if torch.distributed.is_initialized():
        report["backend"] = str(torch.distributed.get_backend())
        report["backend_config"] = str(torch.distributed.get_backend_config())
        report["group"] = type(torch.distributed.group.WORLD).__name__
    write(out, f"ddp-{devices}", trainer.global_rank, report)


def main(name: str, out: str, *args: str) -> None:
    path = Path(out)
    if name == "auto_fit":
        auto_fit(path)
    elif name == "resume":
        resume(path)
    elif name == "autocast":
        autocast(path, args[0])
    elif name == "ddp":
        data_parallel(path, int(args[0]), int(args[1]))
    else:
        raise SystemExit(f"unknown scenario {name!r}")


if __name__ == "__main__":
    main(*sys.argv[1:])
