"""ThroughputMonitor and Throughput: rates over a window, logged per stage; the accelerator is asked to synchronise."""

from __future__ import annotations

import csv

import pytest
import torch

from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.callbacks import ThroughputMonitor
from torchplug.loggers.csv_logs import CSVLogger
from torchplug.utilities.throughput import Throughput, measure_flops


class CountingAccelerator(CPUAccelerator):
    def __init__(self) -> None:
        super().__init__()
        self.synchronized = 0

    def synchronize(self, device: torch.device) -> None:
        self.synchronized += 1


def rows(logger: CSVLogger) -> list[dict[str, str]]:
    with open(logger.metrics_file, newline="") as stream:
        return list(csv.DictReader(stream))


def test_logs_training_and_validation_throughput(tmp_path, make_trainer, tiny_model, data):
    logger = CSVLogger(tmp_path)
    accelerator = CountingAccelerator()
    monitor = ThroughputMonitor(
        batch_size_fn=lambda batch: batch[0].shape[0], length_fn=lambda b: 2 * b[0].shape[0], window_size=4
    )
    model = tiny_model()
    model.flops_per_batch = 1000
    trainer = make_trainer(
        accelerator=accelerator, max_epochs=2, logger=logger, log_every_n_steps=4, callbacks=[monitor]
    )
    trainer.fit(model, data(), data())
    table = rows(logger)
    train = [r for r in table if r.get("train/samples")]

    assert [int(r["step"]) for r in train] == [3, 7, 11, 15]
    assert [float(r["train/samples"]) for r in train] == [16, 32, 48, 64]
    assert [float(r["train/lengths"]) for r in train] == [32, 64, 96, 128]
    assert all(float(r["train/device/samples_per_sec"]) > 0 for r in train)
    assert all(
        float(r["train/device/items_per_sec"]) == pytest.approx(2 * float(r["train/device/samples_per_sec"]))
        for r in train
    )
    assert all(float(r["train/device/flops_per_sec"]) > 0 for r in train)
    assert "train/samples_per_sec" not in table[0]  # one process: no global rates
    assert any(r.get("validate/samples") for r in table)
    assert accelerator.synchronized == 16 + 16  # every training and validation batch


def test_mfu_with_the_devices_peak(tmp_path, make_trainer, tiny_model, data):
    logger = CSVLogger(tmp_path)
    model = tiny_model()
    model.flops_per_batch = 1e6
    monitor = ThroughputMonitor(batch_size_fn=lambda b: 4, window_size=2, available_flops=1e12)
    make_trainer(max_epochs=1, logger=logger, log_every_n_steps=2, callbacks=[monitor]).fit(model, data())
    mfu = [float(r["train/device/mfu"]) for r in rows(logger) if r.get("train/device/mfu")]
    assert mfu and all(0 < value < 1 for value in mfu)


def test_a_module_without_flops_gets_a_warning(make_trainer, tiny_model, data, tmp_path):
    with pytest.warns(UserWarning, match="has no flops_per_batch attribute"):
        make_trainer(max_epochs=1, logger=CSVLogger(tmp_path), callbacks=[ThroughputMonitor(lambda b: 4)]).fit(
            tiny_model(), data()
        )


def test_unknown_arguments_are_refused():
    with pytest.raises(TypeError, match=r"unknown arguments \['window'\]"):
        ThroughputMonitor(lambda b: 1, window=3)


def test_throughput_over_a_window():
    throughput = Throughput(world_size=2, window_size=3, available_flops=100.0)
    for i in range(1, 6):
        throughput.update(time=2.0 * i, batches=i, samples=8 * i, lengths=16 * i, flops=10)
    metrics = throughput.compute()

    assert metrics["time"] == 10.0 and metrics["batches"] == 5 and metrics["samples"] == 40
    assert metrics["device/batches_per_sec"] == 0.5  # 2 batches in the window's 4 seconds
    assert metrics["device/samples_per_sec"] == 4.0
    assert metrics["device/items_per_sec"] == 8.0
    assert metrics["samples_per_sec"] == 8.0  # both processes
    assert metrics["flops_per_sec"] == 10.0  # 2 intervals of 10 flops x 2 processes over 4 s
    assert metrics["device/flops_per_sec"] == 5.0
    assert metrics["device/mfu"] == 0.05


def test_throughput_refuses_contradictions():
    throughput = Throughput()
    with pytest.raises(ValueError, match=r"samples \(2\) must be at least batches \(4\)"):
        throughput.update(time=1.0, batches=4, samples=2)
    with pytest.raises(ValueError, match="window_size"):
        Throughput(window_size=1)


def test_measure_flops_of_a_linear_layer():
    with torch.device("meta"):
        layer = torch.nn.Linear(32, 16)
        x = torch.randn(8, 32)
    assert measure_flops(layer, lambda: layer(x)) == 2 * 8 * 32 * 16
    # with the backward: the weights' gradient costs a forward more (the input needs none)
    assert measure_flops(layer, lambda: layer(x), torch.Tensor.sum) == 2 * 2 * 8 * 32 * 16
