"""``DeviceStatsMonitor``: log what the accelerator reports about its device (memory, utilisation...)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks._logging import logger_step, should_update_logs
from torchplug.callbacks.callback import Callback

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["DeviceStatsMonitor", "cpu_stats"]


def cpu_stats() -> dict[str, float]:
    """The host's CPU utilisation, memory and swap use in percent, from psutil.

    Raises:
        ModuleNotFoundError: psutil is not installed (``pip install 'core[psutil]'``).
    """
    try:
        psutil = importlib.import_module("psutil")
    except ImportError as exc:
        raise ModuleNotFoundError(
            "DeviceStatsMonitor(cpu_stats=True) reads the host's CPU statistics with psutil, which is not "
            "installed. Hint: pip install 'core[psutil]' (or pip install psutil), or leave cpu_stats unset."
        ) from exc
    return {
        "cpu_percent": float(psutil.cpu_percent()),
        "cpu_vm_percent": float(psutil.virtual_memory().percent),
        "cpu_swap_percent": float(psutil.swap_memory().percent),
    }


class DeviceStatsMonitor(Callback):
    """Log the device statistics the accelerator reports, around every training, validation and test batch.

    The values come from ``trainer.accelerator.get_device_stats(device)``, whatever the device:
    each accelerator plugin says what it can measure (the CPU's load and resident memory, a
    GPU's allocator statistics...). They are logged as
    ``DeviceStatsMonitor.<hook>/<statistic>`` (``DeviceStatsMonitor.on_train_batch_end/rss_bytes``)
    at the Trainer's logging steps (every ``log_every_n_steps``), so the cost is paid only on
    those steps. Global rank 0 logs its own device's statistics.

    Example:
        >>> Trainer(logger=CSVLogger("logs"), callbacks=[DeviceStatsMonitor()])

    Args:
        cpu_stats: True: also log the host's CPU, memory and swap use in percent (psutil,
            ``pip install 'core[psutil]'``); False or None: only what the accelerator reports.

    Raises:
        MisconfigurationError: At the start of ``fit`` when the Trainer has no logger.
        ModuleNotFoundError: ``cpu_stats=True`` without psutil.
    """

    def __init__(self, cpu_stats: bool | None = None) -> None:
        self._cpu_stats = cpu_stats

    @override
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Check for a logger (and psutil, when CPU statistics are asked for)."""
        if stage != "fit":
            return
        if not trainer.loggers:
            raise MisconfigurationError(
                "DeviceStatsMonitor needs a logger to write to: Trainer(logger=...). Hint: "
                "Trainer(logger=CSVLogger('logs')), or remove the DeviceStatsMonitor."
            )
        if self._cpu_stats:
            cpu_stats()  # fail now, naming the extra, rather than at the first logging step

    def _log(self, trainer: Trainer, hook: str) -> None:
        if not trainer.is_global_zero or not should_update_logs(trainer):
            return
        stats: dict[str, Any] = dict(trainer.accelerator.get_device_stats(trainer.strategy.root_device))
        if self._cpu_stats:
            stats.update(cpu_stats())
        if not stats:
            return
        step = logger_step(trainer)
        prefix = f"{type(self).__qualname__}.{hook}"
        for logger in trainer.loggers:
            separator = getattr(logger, "group_separator", "/")
            logger.log_metrics({f"{prefix}{separator}{k}": float(v) for k, v in stats.items()}, step)

    @override
    def on_train_batch_start(self, trainer: Trainer, module: Module, batch: Any, batch_idx: int) -> None:
        """Log the statistics before the batch."""
        self._log(trainer, "on_train_batch_start")

    @override
    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Log the statistics after the batch."""
        self._log(trainer, "on_train_batch_end")

    @override
    def on_validation_batch_start(
        self, trainer: Trainer, module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Log the statistics before a validation batch."""
        self._log(trainer, "on_validation_batch_start")

    @override
    def on_validation_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Log the statistics after a validation batch."""
        self._log(trainer, "on_validation_batch_end")

    @override
    def on_test_batch_start(
        self, trainer: Trainer, module: Module, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Log the statistics before a test batch."""
        self._log(trainer, "on_test_batch_start")

    @override
    def on_test_batch_end(
        self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        """Log the statistics after a test batch."""
        self._log(trainer, "on_test_batch_end")
