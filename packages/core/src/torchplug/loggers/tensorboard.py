"""``TensorBoardLogger``: metrics and hyperparameters as TensorBoard event files (needs ``tensorboard``)."""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import fsspec
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.loggers._availability import tensorboard_available
from torchplug.loggers._versions import (
    check_save_dir,
    check_version,
    next_version,
    numbered_versions,
    version_folder,
    write_hparams,
)
from torchplug.loggers.logger import Logger, convert_params, flatten_params, metric_value
from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from argparse import Namespace

__all__ = ["TensorBoardLogger"]

_MISSING = "TensorBoardLogger needs tensorboard. Hint: pip install tensorboard"


def __getattr__(name: str) -> bool:
    # ``_TENSORBOARD_AVAILABLE``: whether tensorboard is installed (found, not imported), as Lightning code asks.
    # Looked up on first access: finding a top-level package costs more than the rest of this module's import.
    if name != "_TENSORBOARD_AVAILABLE":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    available = tensorboard_available()
    globals()[name] = available
    return available


def _require_tensorboard() -> None:
    if not tensorboard_available():
        raise ImportError(_MISSING)


def _summary_writer_class() -> Any:
    try:
        import tensorboard  # noqa: F401  (torch.utils.tensorboard needs it; checked first for a clear error)
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as exc:
        raise ImportError(_MISSING) from exc
    return SummaryWriter


@functools.cache
def _summary_class() -> Any:
    from tensorboard.compat.proto.summary_pb2 import Summary

    return Summary


def _summary_value_class() -> Any:
    return _summary_class().Value


class TensorBoardLogger(Logger):
    """Write metrics to TensorBoard event files in ``<save_dir>/<name>/version_<n>`` (the CSVLogger layout).

    ``torch.utils.tensorboard`` is imported when the first event is written; a missing
    ``tensorboard`` package is reported when the logger is created. Watch the run with
    ``tensorboard --logdir <save_dir>``.

    Example:
        >>> Trainer(logger=TensorBoardLogger("tb_logs", name="mnist"))

    Args:
        save_dir: Root directory (a local path or fsspec URL for the layout; the event writer itself
            supports what ``SummaryWriter`` supports).
        name: Experiment name, a subdirectory of ``save_dir``.
        version: Run version; by default the next free ``version_<n>``. A string is used as the directory name.
        log_graph: Add the model's graph when ``fit`` starts (traced with its ``example_input_array``).
        default_hp_metric: When hyperparameters are logged without metrics, log ``hp_metric = -1`` so the
            HPARAMS tab of TensorBoard lists the run. Log ``hp_metric`` yourself to fill it.
        prefix: Put before every metric name, joined with ``-``.
        sub_dir: A subdirectory of the version directory for the event files.
        **writer_kwargs: Passed to ``torch.utils.tensorboard.SummaryWriter`` (``flush_secs``, ``max_queue``...).

    Raises:
        ImportError: tensorboard is not installed (the message says how to install it).
        MisconfigurationError: A keyword that ``SummaryWriter`` does not take (or ``log_dir``, which is this
            logger's to decide).
    """

    def __init__(
        self,
        save_dir: str | os.PathLike[str],
        name: str = "torchplug_logs",
        version: int | str | None = None,
        log_graph: bool = False,
        default_hp_metric: bool = True,
        prefix: str = "",
        sub_dir: str | None = None,
        **writer_kwargs: Any,
    ) -> None:
        _require_tensorboard()
        if writer_kwargs:
            _check_writer_kwargs(writer_kwargs)
        self._save_dir = check_save_dir("TensorBoardLogger", save_dir)
        self._name = name or ""
        check_version("TensorBoardLogger", version)
        self._version = version
        self._log_graph = log_graph
        self._default_hp_metric = default_hp_metric
        self._prefix = prefix
        self._sub_dir = sub_dir
        self._writer_kwargs = writer_kwargs
        self._fs = fsspec.url_to_fs(self._save_dir)[0]
        self._experiment: Any = None
        #: The hyperparameters logged so far (also written to ``hparams.yaml``).
        self.hparams: dict[str, Any] = {}

    # -- where ----------------------------------------------------------------------------------

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
        check_version("TensorBoardLogger", value)
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
        """``<save_dir>/<name>/version_<n>`` (``<version>`` for a string), plus ``sub_dir`` when given."""
        path = f"{self.root_dir}/{version_folder(self.version)}"
        return f"{path}/{self._sub_dir}" if self._sub_dir else path

    @override
    def sibling_log_dirs(self) -> list[str]:
        """The other ``version_<n>`` run directories of this experiment (see :meth:`Logger.sibling_log_dirs`)."""
        own = version_folder(self.version)
        suffix = f"/{self._sub_dir}" if self._sub_dir else ""
        return [f"{self.root_dir}/{name}{suffix}" for name in numbered_versions(self._fs, self.root_dir) if name != own]

    def _next_version(self) -> int:
        return next_version(self._fs, self.root_dir)

    @property
    def experiment(self) -> Any:
        """The ``SummaryWriter``, created on first use: call its methods to log images, histograms..."""
        if self._experiment is None:
            writer_class = _summary_writer_class()
            self._fs.makedirs(self.log_dir, exist_ok=True)
            self._experiment = writer_class(log_dir=self.log_dir, **self._writer_kwargs)
        return self._experiment

    # -- what -----------------------------------------------------------------------------------

    @override
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        """Add each metric as a scalar at ``step`` (a dict value becomes one chart of several scalars).

        Without a ``step`` the event has none, and TensorBoard shows it at step 0.

        The scalars of one call travel to the event writer's thread as one summary (what
        ``add_scalar`` writes for each, in one event): one hand-off per logging step instead of
        one per metric, which is most of what logging costs the training loop.
        """
        writer = self.experiment
        values = []
        value_class = _summary_value_class()
        for key, value in metrics.items():
            tag = f"{self._prefix}-{key}" if self._prefix else key
            if isinstance(value, Mapping):
                writer.add_scalars(tag, {k: metric_value(v) for k, v in value.items()}, step)
            else:
                values.append(value_class(tag=tag, simple_value=metric_value(value)))
        if values:
            writer._get_file_writer().add_summary(_summary_class()(value=values), step)

    @override
    def log_hyperparams(
        self, params: Mapping[str, Any] | Namespace | None = None, metrics: Mapping[str, float] | None = None
    ) -> None:
        """Record ``params`` in TensorBoard's HPARAMS tab and in ``hparams.yaml``.

        Args:
            params: The hyperparameters (a dict or an argparse ``Namespace``; None: none); nested dicts
                are flattened to ``outer/inner`` names and values TensorBoard cannot show are written as text.
            metrics: Metrics to show beside them (default: ``hp_metric = -1`` with ``default_hp_metric``).
        """
        from torch.utils.tensorboard.summary import hparams

        params = convert_params(params)
        flat = {key: _hparam_value(value) for key, value in flatten_params(params).items()}
        self.hparams.update(params)
        if metrics is None and self._default_hp_metric:
            metrics = {"hp_metric": -1}
        if metrics:
            self.log_metrics(metrics, 0)
        writer = self.experiment._get_file_writer()
        for summary in hparams(flat, dict(metrics or {})):
            writer.add_summary(summary)

    @override
    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Add ``model``'s graph, traced with ``input_array`` (default: its ``example_input_array``), if ``log_graph``.

        Without an input, or with one that cannot be traced (not a tensor or a tuple of ``forward``'s
        arguments), it warns and logs no graph.
        """
        if not self._log_graph:
            return
        import torch

        from torchplug.utilities.apply import move_to_device

        example = getattr(model, "example_input_array", None) if input_array is None else input_array
        if example is None or not isinstance(example, (torch.Tensor, tuple)):
            given = "none" if example is None else type(example).__name__
            rank_zero_warn(
                f"TensorBoardLogger(log_graph=True) logs no graph: the input to trace it with is {given}. Hint: set "
                "self.example_input_array = torch.randn(...) (a tensor, or a tuple of forward's arguments) in the "
                "module's __init__."
            )
            return
        device = getattr(model, "device", None)
        if isinstance(device, torch.device):
            example = move_to_device(example, device)
        self.experiment.add_graph(model, example)

    @override
    def save(self) -> None:
        """Flush pending events and write ``hparams.yaml`` (empty when none were logged) into the version directory.

        The directory is made if no event was written yet, so that every run, even one that logged
        nothing, leaves its version directory with its ``hparams.yaml`` (as in Lightning).
        """
        if self._experiment is not None:
            self._experiment.flush()
        if self.hparams or not self._fs.exists(f"{self.log_dir}/hparams.yaml"):
            write_hparams(self._fs, self.log_dir, self.hparams)

    @override
    def finalize(self, status: str) -> None:
        """Flush, write ``hparams.yaml`` and close the event file."""
        self.save()
        if self._experiment is not None:
            self._experiment.close()
            self._experiment = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the event writer (it holds a thread and a lock): a copy opens its own on first use."""
        state = self.__dict__.copy()
        state["_experiment"] = None
        return state

    @override
    def __repr__(self) -> str:
        return f"TensorBoardLogger(save_dir={self._save_dir!r}, name={self._name!r}, version={self._version!r})"


def _check_writer_kwargs(writer_kwargs: dict[str, Any]) -> None:
    """Refuse keywords ``SummaryWriter`` does not take now, rather than when the first event is written."""
    import inspect

    names = [name for name in inspect.signature(_summary_writer_class()).parameters if name != "self"]
    unknown = sorted(set(writer_kwargs) - set(names) | ({"log_dir"} & set(writer_kwargs)))
    if unknown:
        taken = ", ".join(name for name in names if name != "log_dir")
        raise MisconfigurationError(
            f"TensorBoardLogger({', '.join(f'{k}={writer_kwargs[k]!r}' for k in unknown)}) is not valid: the "
            f"extra keywords go to torch.utils.tensorboard.SummaryWriter, which takes {taken} (log_dir is this "
            "logger's: <save_dir>/<name>/<version>). Hint: check the spelling, or set save_dir, name and version."
        )


def _hparam_value(value: Any) -> Any:
    if isinstance(value, (bool, int, float, str)):
        return value
    if hasattr(value, "item") and getattr(value, "numel", lambda: 0)() == 1:
        return value.item()
    return str(value)
