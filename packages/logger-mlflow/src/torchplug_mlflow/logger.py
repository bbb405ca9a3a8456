"""``MLFlowLogger``: metrics, hyperparameters and tags to an MLflow tracking store, checkpoints as artifacts."""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from typing_extensions import Self, override

from torchplug import MisconfigurationError
from torchplug.loggers.logger import Logger, flatten_params, metric_value
from torchplug.utilities.rank_zero import log, rank_zero_warn
from torchplug_mlflow._vendor import import_mlflow

if TYPE_CHECKING:
    from torchplug.callbacks import ModelCheckpoint

__all__ = ["MLFlowLogger"]

#: MLflow's limits: characters of a parameter value, parameters and metrics per ``log_batch`` call.
MAX_PARAM_LENGTH: Final = 6000
PARAMS_PER_BATCH: Final = 100
METRICS_PER_BATCH: Final = 1000

#: The run status MLflow records for each way a torchplug run ends.
RUN_STATUS: Final = {"success": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}

_KEY_ALLOWED: Final = re.compile(r"[^\w\-. :/]")

#: Runs this process set to ``RUNNING`` (started, or reopened from another status) and has not ended yet,
#: by (tracking URI, run id): the end of the process ends them (``_end_open_runs``). Kept by id, not by
#: logger, so a run stays known when its logger is garbage-collected.
_OPEN_RUNS: dict[tuple[str, str], Any] = {}


class MLFlowLogger(Logger):
    """Log to an MLflow tracking store: a local sqlite file, a database, or a tracking server.

    The client is created and the run started (or resumed) on first use, from global rank 0 only;
    ``mlflow`` is imported then. The run ends with each stage (``fit``, ``validate``, ``test``,
    ``predict``): ``FINISHED``, ``FAILED`` or ``KILLED``; a later stage reopens it. A run the logger
    started or reopened and that no stage ended (only ``logger.experiment`` was used) ends with the
    process: ``FINISHED``, or ``FAILED``/``KILLED`` when an exception or Ctrl+C ended it.

    Example:
        >>> trainer = Trainer(logger=MLFlowLogger(experiment_name="mnist", tracking_uri="http://127.0.0.1:5000"))
        >>> trainer = Trainer(logger="mlflow")   # MLFLOW_TRACKING_URI, else <default_root_dir>/mlruns/mlflow.db

    Args:
        experiment_name: The experiment the run belongs to (created when missing).
        run_name: The run's display name (MLflow picks one when None).
        tracking_uri: Where the store is (``http://host:5000``, ``sqlite:///path.db``, ``databricks``...).
            Default: the ``MLFLOW_TRACKING_URI`` environment variable, else a sqlite database
            ``<save_dir>/mlflow.db``.
        tags: Tags set on the run when it starts (``mlflow.source.name``, user and git commit are added,
            as ``mlflow.start_run`` adds them).
        save_dir: The folder of the default local store (``mlflow.db`` and ``artifacts/``), used only
            when no tracking URI is given.
        log_model: Checkpoints written by ``ModelCheckpoint`` uploaded as run artifacts under
            ``checkpoints/<name>/`` (with a ``metadata.yaml``: score, monitor, best or last): ``"all"``
            as each is written, True once at the end of the fit (as each is written when
            ``save_top_k=-1``), False (default) never.
        prefix: Put before every metric name, joined with ``-``.
        artifact_location: Where a new experiment stores artifacts (default: ``artifacts/`` beside the
            database of a ``sqlite:///`` store, so the default store keeps them in ``<save_dir>/artifacts``;
            the server's or store's choice otherwise).
        run_id: Resume this run: metrics, parameters and artifacts are added to it (its steps go on
            where a checkpoint resumed with ``fit(ckpt_path=...)`` left off). It is set back to
            ``RUNNING`` when something is written to it, not when ``version`` or ``name`` is read.
        synchronous: Passed to MLflow's ``log_batch``: False logs in MLflow's background thread
            (None: MLflow's default, ``MLFLOW_ENABLE_ASYNC_LOGGING``).

    Raises:
        MisconfigurationError: ``log_model`` is not True, False or ``"all"``.
    """

    def __init__(
        self,
        experiment_name: str = "torchplug_logs",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        tags: Mapping[str, Any] | None = None,
        save_dir: str | os.PathLike[str] = "./mlruns",
        log_model: Literal[True, False, "all"] = False,
        prefix: str = "",
        artifact_location: str | None = None,
        run_id: str | None = None,
        synchronous: bool | None = None,
    ) -> None:
        if log_model not in (True, False, "all"):
            raise MisconfigurationError(f"MLFlowLogger(log_model={log_model!r}): give True, False or 'all'.")
        self._experiment_name = experiment_name
        self._run_name = run_name
        self._save_dir = os.path.abspath(os.fspath(save_dir))
        uri = tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        self._local_default = not uri
        self._tracking_uri = uri or f"sqlite:///{self._save_dir}/mlflow.db"
        if artifact_location is None and self._tracking_uri.startswith("sqlite:///"):
            # Beside the database, not MLflow's ./mlruns in whatever directory the run started from.
            database = self._tracking_uri.removeprefix("sqlite:///").partition("?")[0]
            artifact_location = f"{os.path.dirname(os.path.abspath(database))}/artifacts"
        self._tags = {str(k): str(v) for k, v in (tags or {}).items()}
        self._log_model = log_model
        self._prefix = prefix
        self._artifact_location = artifact_location
        self._run_id = run_id
        self._experiment_id: str | None = None
        self._open = False  # the run is RUNNING for this logger: written to since the last finalize
        self._synchronous = synchronous
        self._client: Any = None
        self._checkpoint_callback: ModelCheckpoint | None = None
        self._uploaded: set[tuple[str, Any]] = set()
        self._renamed: dict[str, str] = {}

    @classmethod
    @override
    def for_trainer(cls, default_root_dir: str, **init_params: Any) -> Self:
        """``Trainer(logger="mlflow")``: ``MLFLOW_TRACKING_URI``, else a store in ``<default_root_dir>/mlruns``."""
        if "tracking_uri" not in init_params and "save_dir" not in init_params:
            init_params["save_dir"] = os.path.join(default_root_dir, "mlruns")
        return cls(**init_params)

    # -- the run ----------------------------------------------------------------------------------

    @property
    def experiment(self) -> Any:
        """The ``mlflow.MlflowClient`` of the store, with the run started or resumed: call it for the rest.

        Example:
            >>> logger.experiment.log_text(logger.run_id, "notes", "notes.txt")
        """
        client = self._connect()
        if not self._open:
            if self._run_id is None:
                self._start(client)
            else:
                self._reopen(client)
            self._open = True
        return client

    def _connect(self) -> Any:
        """The client of the store, made once; the run is neither started nor reopened."""
        if self._client is None:
            self._client = import_mlflow().MlflowClient(self._tracking_uri)
        return self._client

    def _look_up(self, client: Any) -> Any:
        """The run given as ``run_id``, its experiment noted; an error saying so when the store has none."""
        exceptions = import_mlflow("mlflow.exceptions")
        assert self._run_id is not None
        try:
            run = client.get_run(self._run_id)
        except exceptions.MlflowException as exc:
            raise MisconfigurationError(
                f"MLFlowLogger(run_id={self._run_id!r}): no such run in {self._tracking_uri}: {exc}. "
                "Hint: pass the run_id of a run of this store (logger.run_id of the run to resume), or None."
            ) from exc
        self._experiment_id = run.info.experiment_id
        return run

    def _reopen(self, client: Any) -> None:
        """Set the run back to ``RUNNING`` to write to it; one already running is someone's, left to them at exit."""
        assert self._run_id is not None
        if self._look_up(client).info.status != "RUNNING":
            client.update_run(self._run_id, status="RUNNING")
            _end_at_exit(self._tracking_uri, self._run_id, client)

    def _start(self, client: Any) -> None:
        experiment = client.get_experiment_by_name(self._experiment_name)
        if experiment is None:
            self._experiment_id = client.create_experiment(
                self._experiment_name, artifact_location=self._artifact_location
            )
        else:
            self._experiment_id = experiment.experiment_id
        tags = dict(self._tags)
        resolve = getattr(import_mlflow("mlflow.tracking.context.registry"), "resolve_tags", None)
        if callable(resolve):
            tags = resolve(tags)
        run = client.create_run(self._experiment_id, tags=tags, run_name=self._run_name)
        self._run_id = run.info.run_id
        _end_at_exit(self._tracking_uri, self._run_id, client)

    @property
    def run_id(self) -> str:
        """The run's id: give it to ``MLFlowLogger(run_id=...)`` to resume it.

        Reading it starts a new run when none was given; a run given as ``run_id`` is left as it is.
        """
        if self._run_id is None:
            self.experiment  # noqa: B018  (starts the run)
        assert self._run_id is not None
        return self._run_id

    @property
    def experiment_id(self) -> str:
        """The experiment's id (reading it starts a new run when none was given, as :attr:`run_id`)."""
        if self._experiment_id is None:
            if self._run_id is None:
                self.experiment  # noqa: B018  (starts the run)
            else:
                self._look_up(self._connect())
        assert self._experiment_id is not None
        return self._experiment_id

    @property
    def tracking_uri(self) -> str:
        """Where the store is."""
        return self._tracking_uri

    @property
    @override
    def name(self) -> str:
        """The experiment's id (as Lightning's MLFlowLogger)."""
        return self.experiment_id

    @property
    @override
    def version(self) -> str:
        """The run's id."""
        return self.run_id

    @property
    @override
    def save_dir(self) -> str | None:
        """The folder of the local store (the default sqlite store, or a ``file:`` URI); None for a remote one."""
        if self._local_default:
            return self._save_dir
        if self._tracking_uri.startswith("file:"):
            return self._tracking_uri.removeprefix("file:").removeprefix("//")
        return None

    # -- what -------------------------------------------------------------------------------------

    @override
    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Log ``params`` as run parameters: nested dicts flattened to ``outer/inner``, values as text.

        On a resumed run, parameters already logged with the same value are skipped (MLflow refuses
        to log one twice); a changed value raises MLflow's error, which names it.
        """
        entities = import_mlflow("mlflow.entities")
        flat = {key: self._param_value(key, value) for key, value in flatten_params(params).items()}
        client, run_id = self.experiment, self.run_id
        logged = client.get_run(run_id).data.params
        pending = [entities.Param(k, v) for k, v in flat.items() if logged.get(k) != v]
        for start in range(0, len(pending), PARAMS_PER_BATCH):
            client.log_batch(run_id, params=pending[start : start + PARAMS_PER_BATCH], **self._batch_kwargs())

    def _param_value(self, key: str, value: Any) -> str:
        text = str(value)
        if len(text) > MAX_PARAM_LENGTH:
            rank_zero_warn(
                f"MLFlowLogger: hyperparameter {key!r} is {len(text)} characters long; MLflow keeps "
                f"{MAX_PARAM_LENGTH}, so it is logged truncated."
            )
            text = text[:MAX_PARAM_LENGTH]
        return text

    @override
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log each metric at ``step`` in one ``log_batch`` call.

        A name MLflow refuses has its other characters replaced by ``_`` and a text value is not
        logged, each with a warning.
        """
        entities = import_mlflow("mlflow.entities")
        now = int(time.time() * 1000)
        batch = []
        for key, value in metrics.items():
            if isinstance(value, str):
                rank_zero_warn(f"MLFlowLogger: metric {key!r} is text ({value!r}); MLflow keeps numbers: not logged.")
                continue
            batch.append(entities.Metric(self._key(key), metric_value(value), now, step))
        client, run_id = self.experiment, self.run_id
        for start in range(0, len(batch), METRICS_PER_BATCH):
            client.log_batch(run_id, metrics=batch[start : start + METRICS_PER_BATCH], **self._batch_kwargs())

    def _key(self, key: str) -> str:
        name = f"{self._prefix}-{key}" if self._prefix else key
        if name not in self._renamed:
            renamed = _KEY_ALLOWED.sub("_", name)
            if renamed != name:
                rank_zero_warn(
                    f"MLFlowLogger: MLflow refuses the metric name {name!r}; it is logged as {renamed!r} "
                    "(MLflow allows letters, digits and _ - . space : /)."
                )
            self._renamed[name] = renamed
        return self._renamed[name]

    def _batch_kwargs(self) -> dict[str, Any]:
        return {} if self._synchronous is None else {"synchronous": self._synchronous}

    # -- checkpoints ------------------------------------------------------------------------------

    @override
    def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
        """Upload the new checkpoints now with ``log_model="all"`` (or True and ``save_top_k=-1``), else at the end."""
        self._checkpoint_callback = checkpoint_callback
        if self._log_model == "all" or (self._log_model is True and checkpoint_callback.save_top_k == -1):
            self._upload_checkpoints(checkpoint_callback, final=False)

    def _upload_checkpoints(self, callback: ModelCheckpoint, final: bool) -> None:
        import fsspec
        import yaml

        missing = []
        for path, metadata in _checkpoints(callback).items():
            fs, local = fsspec.url_to_fs(path)
            if not fs.exists(local):  # an asynchronous write still in flight: uploaded on a later call
                missing.append(path)
                continue
            stem = os.path.splitext(os.path.basename(local))[0]
            with tempfile.TemporaryDirectory() as staging:
                copy = os.path.join(staging, os.path.basename(local))
                fs.get(local, copy)  # also a local file: MLflow then uploads a stable copy
                # Known by content: two saves of last.ckpt within one tick of the file system's clock (a few
                # ms) have the same size and mtime, and the second would go unlogged.
                identity = (path, _digest(copy))
                if identity in self._uploaded:
                    continue
                with open(os.path.join(staging, "metadata.yaml"), "w", encoding="utf-8") as out:
                    yaml.safe_dump(metadata, out, sort_keys=False)
                self.experiment.log_artifacts(self.run_id, staging, f"checkpoints/{stem}")
            self._uploaded.add(identity)
        if final and missing:
            rank_zero_warn(f"MLFlowLogger(log_model={self._log_model!r}): not uploaded, never written: {missing}")

    # -- the end ----------------------------------------------------------------------------------

    @override
    def finalize(self, status: str) -> None:
        """Upload the checkpoints (``log_model``) and end the run with the status MLflow knows for ``status``.

        Called at the end of each stage. Nothing happens for a run nothing was written to since the
        last call (a new run that never started, a resumed run only read).
        """
        if not self._open:
            return
        if self._log_model and self._checkpoint_callback is not None and status == "success":
            self._upload_checkpoints(self._checkpoint_callback, final=True)
        self._connect().set_terminated(self.run_id, RUN_STATUS.get(status, "FINISHED"))
        self._open = False
        _OPEN_RUNS.pop((self._tracking_uri, self.run_id), None)

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the client: a copy makes its own and goes on logging to the same run."""
        state = self.__dict__.copy()
        state["_client"] = None
        state["_checkpoint_callback"] = None
        return state

    @override
    def __repr__(self) -> str:
        return f"MLFlowLogger(experiment_name={self._experiment_name!r}, tracking_uri={self._tracking_uri!r})"


def _end_at_exit(tracking_uri: str, run_id: str, client: Any) -> None:
    """Note a run this process set to ``RUNNING``: the end of the process ends it unless a stage did."""
    _OPEN_RUNS[(tracking_uri, run_id)] = client


def _end_open_runs() -> None:
    """At the end of the process: end the runs it opened and left ``RUNNING``, as ``mlflow.end_run`` would.

    ``FAILED`` when an uncaught exception ended the process, ``KILLED`` for Ctrl+C, ``FINISHED``
    otherwise. A run that someone else ended meanwhile (another process's copy of the logger) is
    left as they ended it.
    """
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)  # set for an uncaught exception
    if isinstance(error, KeyboardInterrupt):
        status = RUN_STATUS["interrupted"]
    else:
        status = RUN_STATUS["failed"] if error is not None else RUN_STATUS["success"]
    runs = list(_OPEN_RUNS.items())
    _OPEN_RUNS.clear()
    for (tracking_uri, run_id), client in runs:
        try:
            if client.get_run(run_id).info.status == "RUNNING":
                client.set_terminated(run_id, status)
        except Exception as exc:  # the store may be gone at exit; the other runs still end
            log.warning(
                "MLFlowLogger: run %s in %s was left RUNNING: ending it at exit failed: %r", run_id, tracking_uri, exc
            )


# Registered when this module is imported, before mlflow is: exit hooks run last-registered first, so
# this one runs after mlflow's own (its asynchronous logging queue is flushed by then).
atexit.register(_end_open_runs)


def _checkpoints(callback: ModelCheckpoint) -> dict[str, dict[str, Any]]:
    """Every checkpoint the callback keeps, with what MLflow records beside it."""
    found: dict[str, dict[str, Any]] = {}

    def add(paths: Iterable[str], alias: str | None) -> None:
        for path in paths:
            if not path:
                continue
            entry = found.setdefault(path, {"path": path, "monitor": callback.monitor, "aliases": []})
            score = callback.best_k_models.get(path)
            if score is not None:
                entry["score"] = float(score)
            if alias is not None and alias not in entry["aliases"]:
                entry["aliases"].append(alias)

    add(callback.best_k_models, None)
    add([callback.best_model_path], "best")
    add([callback.last_model_path], "last")
    return found


def _digest(path: str) -> str:
    digest = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
