"""``CSVLogger``: metrics to ``metrics.csv`` and hyperparameters to ``hparams.yaml``, with no dependency."""

from __future__ import annotations

import csv
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

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
from torchplug.loggers.logger import Logger, convert_params
from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from argparse import Namespace

__all__ = ["CSVLogger", "ExperimentWriter"]


class ExperimentWriter:
    """What :class:`CSVLogger` writes with (its ``experiment``): rows to ``metrics.csv``, ``hparams.yaml``.

    Rows are kept in :attr:`metrics` until :meth:`save` appends them to :attr:`metrics_file_path`
    (the file is rewritten when a row brings new columns). The directory is made when the writer is.

    Example:
        >>> writer = trainer.logger.experiment
        >>> writer.log_metrics({"custom": 0.5}, step=10)
        >>> writer.save()

    Args:
        log_dir: The run's directory (a local path or fsspec URL).
        label: How warnings name the writer (:class:`CSVLogger` gives ``CSVLogger(version=...)``).
    """

    NAME_METRICS_FILE: Final = "metrics.csv"
    NAME_HPARAMS_FILE: Final = "hparams.yaml"

    def __init__(self, log_dir: str, label: str = "ExperimentWriter") -> None:
        import fsspec  # on first use: building a Trainer should not pay for it

        self.log_dir = log_dir
        self.metrics_file_path = f"{log_dir.rstrip('/')}/{self.NAME_METRICS_FILE}"
        #: The rows logged and not yet written (``save`` writes and clears them).
        self.metrics: list[dict[str, Any]] = []
        #: Every hyperparameter logged so far (``hparams.yaml`` holds them all).
        self.hparams: dict[str, Any] = {}
        self._label = label
        self._fs: Any = fsspec.url_to_fs(log_dir)[0]
        self._columns: list[str] = []
        self._written_columns: list[str] | None = None
        self._rows = 0
        self._fs.makedirs(log_dir, exist_ok=True)

    def log_metrics(self, metrics_dict: Mapping[str, Any], step: int | None = None) -> None:
        """Keep one row: ``step`` (None: the number of rows logged before it) and the metrics.

        A tensor or NumPy value is written as its Python number; other values as they are.
        """
        row = {"step": self._rows if step is None else step}
        row.update({key: _plain(value) for key, value in metrics_dict.items()})
        for key in row:
            if key not in self._columns:
                self._columns.append(key)
        self.metrics.append(row)
        self._rows += 1

    def log_hparams(self, params: Mapping[str, Any]) -> None:
        """Add ``params`` to :attr:`hparams` and write them all to ``hparams.yaml`` (see ``yaml_value``)."""
        self.hparams.update(params)
        write_hparams(self._fs, self.log_dir, self.hparams)

    def save(self) -> None:
        """Append the rows kept to ``metrics.csv`` (rewriting it when new columns appeared)."""
        if not self.metrics:
            return
        self._fs.makedirs(self.log_dir, exist_ok=True)
        if self._written_columns == self._columns:
            with self._fs.open(self.metrics_file_path, "a", newline="") as stream:
                csv.DictWriter(stream, fieldnames=self._columns).writerows(self.metrics)
        else:
            if self._written_columns is None:
                self._warn_if_replacing()
            old = self._read_existing()
            with self._fs.open(self.metrics_file_path, "w", newline="") as stream:
                writer = csv.DictWriter(stream, fieldnames=self._columns)
                writer.writeheader()
                writer.writerows(old + self.metrics)
            self._written_columns = list(self._columns)
        self.metrics = []

    def _warn_if_replacing(self) -> None:
        """The first write of this run: say so when it replaces an earlier run's ``metrics.csv``."""
        if self._fs.exists(self.metrics_file_path):
            rank_zero_warn(
                f"{self._label}: {self.metrics_file_path} exists already (an earlier run's metrics); this run "
                "replaces it. Hint: leave version unset to write to the next free version_<n>, or give another "
                "version."
            )

    def _read_existing(self) -> list[dict[str, Any]]:
        if self._written_columns is None or not self._fs.exists(self.metrics_file_path):
            return []
        with self._fs.open(self.metrics_file_path, "r", newline="") as stream:
            return [{k: v for k, v in row.items() if v != ""} for row in csv.DictReader(stream)]


def _plain(value: Any) -> Any:
    item = getattr(value, "item", None)
    return item() if callable(item) else value


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
        self._experiment: ExperimentWriter | None = None
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
        base, name = self._save_dir.rstrip("/"), self.name  # a subclass's name property counts
        return f"{base}/{name}" if name else base

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

    @property
    def experiment(self) -> ExperimentWriter:
        """The :class:`ExperimentWriter` of this run, made on first use (with the run's directory).

        Call its methods to write rows of your own: ``self.logger.experiment.log_metrics({...}, step)``.
        """
        if self._experiment is None:
            self._experiment = ExperimentWriter(self.log_dir, label=f"CSVLogger(version={self.version!r})")
        return self._experiment

    @override
    def log_hyperparams(self, params: Mapping[str, Any] | Namespace | None = None) -> None:
        """Add ``params`` (a dict or an argparse ``Namespace``; None: none) to ``hparams.yaml``.

        Values that YAML cannot represent are written as text.
        """
        self.experiment.log_hparams(convert_params(params))

    @override
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Keep one row (``step`` plus the metrics); written every ``flush_logs_every_n_steps`` rows.

        Args:
            metrics: Metric names to numbers (tensors are written as their Python number).
            step: The row's step; None: the number of rows logged before it, as Lightning counts.
        """
        if self._prefix:
            metrics = {f"{self._prefix}-{key}": value for key, value in metrics.items()}
        experiment = self.experiment
        experiment.log_metrics(metrics, step)
        if len(experiment.metrics) >= self._flush_every:
            experiment.save()

    @override
    def save(self) -> None:
        """Append the rows kept to ``metrics.csv`` (rewriting it when new columns appeared)."""
        if self._experiment is not None:
            self._experiment.save()
