"""DeviceStatsMonitor: whatever the accelerator reports about its device reaches the loggers, at the logging steps."""

from __future__ import annotations

import csv
import sys
from typing import Any

import pytest
import torch

from torchplug._errors import MisconfigurationError
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.callbacks import DeviceStatsMonitor
from torchplug.loggers.csv_logs import CSVLogger


class GaugedAccelerator(CPUAccelerator):
    """An accelerator with statistics of its own: the monitor must ask it, whatever the device."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[torch.device] = []

    def get_device_stats(self, device: torch.device) -> dict[str, Any]:
        self.asked.append(device)
        return {"memory_allocated": 1234.0, "utilisation": 0.5}


def columns(logger: CSVLogger) -> list[dict[str, str]]:
    with open(logger.metrics_file, newline="") as stream:
        return list(csv.DictReader(stream))


def test_logs_what_the_accelerator_reports(tmp_path, make_trainer, tiny_model, data):
    accelerator = GaugedAccelerator()
    logger = CSVLogger(tmp_path)
    trainer = make_trainer(
        accelerator=accelerator, max_epochs=1, logger=logger, log_every_n_steps=2, callbacks=[DeviceStatsMonitor()]
    )
    trainer.fit(tiny_model(), data(), data())
    rows = columns(logger)
    key = "DeviceStatsMonitor.on_train_batch_end/memory_allocated"

    assert [int(r["step"]) for r in rows if r.get(key)] == [1, 3, 5, 7]  # every 2 steps, as the step metrics
    assert {float(r[key]) for r in rows if r.get(key)} == {1234.0}
    assert any(r.get("DeviceStatsMonitor.on_train_batch_start/utilisation") for r in rows)
    assert any(r.get("DeviceStatsMonitor.on_validation_batch_end/memory_allocated") for r in rows)
    assert set(accelerator.asked) == {torch.device("cpu")}


def test_the_cpu_accelerator_reports_load_and_memory(tmp_path, make_trainer, tiny_model, data):
    logger = CSVLogger(tmp_path)
    make_trainer(max_epochs=1, logger=logger, log_every_n_steps=1, callbacks=[DeviceStatsMonitor()]).fit(
        tiny_model(), data()
    )
    key = "DeviceStatsMonitor.on_train_batch_end/rss_bytes"
    rss = [float(r[key]) for r in columns(logger) if r.get(key)]
    assert len(rss) == 8 and min(rss) > 1e6


def test_cpu_stats_add_the_hosts_percentages(tmp_path, make_trainer, tiny_model, data):
    pytest.importorskip("psutil")
    logger = CSVLogger(tmp_path)
    make_trainer(max_epochs=1, logger=logger, log_every_n_steps=4, callbacks=[DeviceStatsMonitor(cpu_stats=True)]).fit(
        tiny_model(), data()
    )
    row = next(r for r in columns(logger) if r.get("DeviceStatsMonitor.on_train_batch_end/cpu_vm_percent"))
    assert 0 < float(row["DeviceStatsMonitor.on_train_batch_end/cpu_vm_percent"]) <= 100


def test_cpu_stats_without_psutil_name_the_extra(monkeypatch, make_trainer, tiny_model, data, tmp_path):
    monkeypatch.setitem(sys.modules, "psutil", None)
    trainer = make_trainer(max_epochs=1, logger=CSVLogger(tmp_path), callbacks=[DeviceStatsMonitor(cpu_stats=True)])
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'core\[psutil\]'"):
        trainer.fit(tiny_model(), data())


def test_needs_a_logger(make_trainer, tiny_model, data):
    with pytest.raises(MisconfigurationError, match=r"DeviceStatsMonitor needs a logger"):
        make_trainer(max_epochs=1, logger=False, callbacks=[DeviceStatsMonitor()]).fit(tiny_model(), data())
