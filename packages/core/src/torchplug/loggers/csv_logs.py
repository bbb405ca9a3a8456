"""``CSVLogger``: metrics to ``metrics.csv`` and hyperparameters to ``hparams.yaml``, with no dependency."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from typing import Any

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.loggers._versions import (
    check_save_dir,
    check_version,
    next_version,
    numbered_versions,
    version_folder,
    write_hparams,
)
from torchplug.loggers.logger import Logger
from torchplug.utilities.rank_zero import rank_zero_warn

__all__ = ["CSVLogger"]


class CSVLogger(Logger):
    """Write metrics to ``<save_dir>/<name>/version_<n>/metrics.csv`` (one row per step) and ``hparams.yaml``.

    A ``version`` whose directory holds a ``metrics.csv`` already (an earlier run's) gets a new
    one: the old file is replaced at the first write, with a warning naming it.

    Args:
        save_dir: Root directory (a local path or fsspec URL).
        name: Experiment name, a subdirectory of ``save_dir``; None or ``""``: the versions go
            directly in ``save_dir``.
        version: Run version; by default the next free ``version_<n>``. A string is used as the directory name.
        prefix: Put before every metric name, joined with ``-`` (``"train"``: ``train-loss``).
        flush_logs_every_n_steps: Write buffered rows to disk every this many logged steps (an int >= 1).

    Raises:
        MisconfigurationError: ``flush_logs_every_n_steps`` is not an int >= 1.
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str] = ".",
        name: str | None = "torchplug_logs",
        version: int | str | None = None,
        prefix: str = "",
        flush_logs_every_n_steps: int = 100,
    ) -> None:
        # The parameters are in Lightning 2.6's order, so that its positional calls mean the same here.
        if not isinstance(prefix, str):
            raise MisconfigurationError(f"CSVLogger(prefix={prefix!r}) is not valid: give a string ('' for none).")
        every = flush_logs_every_n_steps
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise MisconfigurationError(
                f"CSVLogger(flush_logs_every_n_steps={every!r}) is not valid: give an int >= 1, the number of "
                "logged rows kept before they are written. Hint: 1 writes every row at once."
            )
        self._save_dir = check_save_dir("CSVLogger", save_dir)
        self._name = name or ""
        check_version("CSVLogger", version)
        self._version = version
        self._flush_every = flush_logs_every_n_steps
        self._prefix = prefix
        self._rows: list[dict[str, Any]] = []
        self._columns: list[str] = []
        self._written_columns: list[str] | None = None
        self._filesystem: Any = None

    @property
    def _fs(self) -> Any:
        # fsspec is imported on first write: building a Trainer should not pay for it.
        if self._filesystem is None:
            import fsspec

            self._filesystem = fsspec.url_to_fs(self._save_dir)[0]
        return self._filesystem

    @property
    @override
    def name(self) -> str:
        """The experiment name."""
        return self._name

    @property
    @override
    def version(self) -> int | str:
        """The run version (the next free number unless given)."""
        if self._version is None:
            self._version = self._next_version()
        return self._version

    @version.setter
    def version(self, value: int | str) -> None:
        check_version("CSVLogger", value)
        self._version = value

    @property
    @override
    def save_dir(self) -> str:
        """The root directory."""
        return self._save_dir

    @property
    def root_dir(self) -> str:
        """``<save_dir>/<name>``: the experiment's directory, holding one directory per version."""
        base = self._save_dir.rstrip("/")
        return f"{base}/{self._name}" if self._name else base

    @property
    @override
    def log_dir(self) -> str:
        """``<save_dir>/<name>/version_<n>`` (or ``<save_dir>/<name>/<version>`` for a string version)."""
        return f"{self.root_dir}/{version_folder(self.version)}"

    @override
    def sibling_log_dirs(self) -> list[str]:
        """The other ``version_<n>`` directories of this experiment (see :meth:`Logger.sibling_log_dirs`)."""
        own = version_folder(self.version)
        return [f"{self.root_dir}/{name}" for name in numbered_versions(self._fs, self.root_dir) if name != own]

    @property
    def metrics_file(self) -> str:
        """Path of ``metrics.csv``."""
        return f"{self.log_dir}/metrics.csv"

    def _next_version(self) -> int:
        return next_version(self._fs, self.root_dir)

    @override
    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Write ``hparams.yaml`` (values that YAML cannot represent are written as text)."""
        write_hparams(self._fs, self.log_dir, params)

    @override
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Buffer one row (``step`` plus the metrics); written every ``flush_logs_every_n_steps`` rows."""
        if self._prefix:
            metrics = {f"{self._prefix}-{key}": value for key, value in metrics.items()}
        row = {"step": step, **metrics}
        for key in row:
            if key not in self._columns:
                self._columns.append(key)
        self._rows.append(row)
        if len(self._rows) >= self._flush_every:
            self.save()

    @override
    def save(self) -> None:
        """Append buffered rows to ``metrics.csv`` (rewriting it when new columns appeared)."""
        if not self._rows:
            return
        self._fs.makedirs(self.log_dir, exist_ok=True)
        if self._written_columns == self._columns:
            with self._fs.open(self.metrics_file, "a", newline="") as stream:
                csv.DictWriter(stream, fieldnames=self._columns).writerows(self._rows)
        else:
            if self._written_columns is None:
                self._warn_if_replacing()
            old = self._read_existing()
            with self._fs.open(self.metrics_file, "w", newline="") as stream:
                writer = csv.DictWriter(stream, fieldnames=self._columns)
                writer.writeheader()
                writer.writerows(old + self._rows)
            self._written_columns = list(self._columns)
        self._rows = []

    def _warn_if_replacing(self) -> None:
        """The first write of this run: say so when it replaces an earlier run's ``metrics.csv``."""
        if self._fs.exists(self.metrics_file):
            rank_zero_warn(
                f"CSVLogger(version={self.version!r}): {self.metrics_file} exists already (an earlier run's metrics); "
                "this run replaces it. Hint: leave version unset to write to the next free version_<n>, or give "
                "another version."
            )

    def _read_existing(self) -> list[dict[str, Any]]:
        if self._written_columns is None or not self._fs.exists(self.metrics_file):
            return []
        with self._fs.open(self.metrics_file, "r", newline="") as stream:
            return [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(stream)]
