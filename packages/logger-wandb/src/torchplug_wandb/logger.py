"""``WandbLogger``: metrics, hyperparameters and checkpoints to a Weights & Biases run (online or offline)."""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal

from typing_extensions import override

from torchplug import MisconfigurationError
from torchplug.loggers.logger import Logger, metric_value
from torchplug.utilities.rank_zero import rank_zero_warn
from torchplug_wandb._vendor import import_wandb, require

if TYPE_CHECKING:
    from torchplug.callbacks import ModelCheckpoint

__all__ = ["WandbLogger"]

#: The step axis every metric is plotted against (the Trainer's logger step).
STEP_METRIC: Final = "trainer/global_step"


class WandbLogger(Logger):
    """Log to a Weights & Biases run: online, or offline (files under ``<save_dir>/wandb``, ``wandb sync`` later).

    The run starts on first use (``wandb.init``, from global rank 0 only) and finishes with the fit.
    Its id is fixed when the logger is created, so the logger's ``version`` never changes and the
    run can be resumed with ``WandbLogger(id=...)``.

    Example:
        >>> trainer = Trainer(logger=WandbLogger(project="mnist", offline=True))
        >>> trainer = Trainer(logger="wandb")    # under <default_root_dir>/wandb; WANDB_MODE=offline for no network

    Args:
        name: The run's display name.
        save_dir: Where W&B writes its files (a ``wandb/`` folder is made there).
        version: The run id (same as ``id``; a new 8-character id when neither is given).
        offline: Write the run to local files only (``mode="offline"``): nothing goes over the network.
        dir: Same as ``save_dir`` (W&B's own name for it); ``save_dir`` wins when both are given.
        id: The run id; give the id of an earlier run to resume it (``resume="allow"``).
        anonymous: W&B's anonymous mode (``"allow"`` when True).
        project: The W&B project (default ``torchplug_logs``).
        log_model: Checkpoints written by ``ModelCheckpoint`` logged as ``model``-type artifacts named
            ``model-<run id>`` (``checkpoint_name`` to rename), with their score and aliases (``latest``,
            ``best``): ``"all"`` as each is written, True once at the end (as each is written when
            ``save_top_k=-1``), False (default) never. Offline, they are recorded for ``wandb sync``.
        prefix: Put before every metric name, joined with ``-``.
        experiment: A run that already exists (from ``wandb.init``), used instead of starting one.
        checkpoint_name: The artifact name of the checkpoints.
        add_file_policy: Lightning's choice between copying a checkpoint before the upload
            (``"mutable"``) or not (``"immutable"``). Here the checkpoint's bytes are always read
            when it is logged and written into the artifact, so a later save over the same file
            never changes what was logged: both values give that, and are accepted for Lightning code.
        **kwargs: More arguments of ``wandb.init`` (``entity``, ``group``, ``tags``, ``notes``, ``config``,
            ``mode``, ``settings``...).

    Raises:
        WandbUnavailableError: wandb is not installed (the message says how to install it).
        MisconfigurationError: ``log_model`` is not True, False or ``"all"``; ``add_file_policy`` is
            not ``"mutable"`` or ``"immutable"``.
    """

    def __init__(
        self,
        name: str | None = None,
        save_dir: str | os.PathLike[str] = ".",
        version: str | None = None,
        offline: bool = False,
        dir: str | os.PathLike[str] | None = None,
        id: str | None = None,
        anonymous: bool | None = None,
        project: str | None = None,
        log_model: Literal[True, False, "all"] = False,
        experiment: Any = None,
        prefix: str = "",
        checkpoint_name: str | None = None,
        add_file_policy: Literal["mutable", "immutable"] = "mutable",
        **kwargs: Any,
    ) -> None:
        require()
        if log_model not in (True, False, "all"):
            raise MisconfigurationError(f"WandbLogger(log_model={log_model!r}): give True, False or 'all'.")
        if add_file_policy not in ("mutable", "immutable"):
            raise MisconfigurationError(
                f"WandbLogger(add_file_policy={add_file_policy!r}): give 'mutable' or 'immutable'."
            )
        self.add_file_policy = add_file_policy
        if version is not None and id is not None and version != id:
            raise MisconfigurationError(
                f"WandbLogger(version={version!r}, id={id!r}): both name the run id; give one of them."
            )
        directory = os.fspath(save_dir if save_dir != "." or dir is None else dir)
        self._save_dir = os.path.abspath(directory)
        self._project = project or "torchplug_logs"
        self._id = version or id or uuid.uuid4().hex[:8]
        self._log_model = log_model
        self._prefix = prefix
        self._checkpoint_name = checkpoint_name
        self._experiment = experiment
        self._owns_run = experiment is None  # a run the user started is theirs to finish
        if experiment is not None:
            self._id = experiment.id
        init: dict[str, Any] = {"name": name, "project": self._project, "dir": self._save_dir, "id": self._id}
        init["resume"] = "allow"
        if offline:
            init["mode"] = "offline"
        if anonymous:
            init["anonymous"] = "allow"
        self._init = {**init, **kwargs}
        self._checkpoint_callback: ModelCheckpoint | None = None
        self._logged_checkpoints: dict[str, Any] = {}

    # -- the run ----------------------------------------------------------------------------------

    @property
    def experiment(self) -> Any:
        """The ``wandb`` run (started on first use): call it for what the logger does not cover.

        Example:
            >>> logger.experiment.log({"samples": wandb.Image(grid)})
        """
        if self._experiment is None:
            wandb = import_wandb()
            os.makedirs(self._save_dir, exist_ok=True)
            if wandb.run is not None and wandb.run.id != self._id:
                rank_zero_warn(
                    f"WandbLogger: a W&B run ({wandb.run.id}) is already running in this process; "
                    f"starting run {self._id} beside it (finish the other with wandb.finish())."
                )
            run = wandb.init(**self._init)
            run.define_metric(STEP_METRIC)
            run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
            self._experiment = run
        return self._experiment

    @property
    @override
    def name(self) -> str:
        """The W&B project."""
        return self._project

    @property
    @override
    def version(self) -> str:
        """The run id (fixed when the logger is created)."""
        return self._id

    @property
    @override
    def save_dir(self) -> str:
        """The folder W&B writes under (``<save_dir>/wandb``)."""
        return self._save_dir

    # -- what -------------------------------------------------------------------------------------

    @override
    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Add ``params`` to the run's config (nested dicts stay nested; values W&B cannot store become text)."""
        self.experiment.config.update(_plain(params), allow_val_change=True)

    @override
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Log one row: each metric, plus ``trainer/global_step`` = ``step`` as the row's x axis."""
        row: dict[str, Any] = {self._key(k): v if isinstance(v, str) else metric_value(v) for k, v in metrics.items()}
        row[STEP_METRIC] = step
        self.experiment.log(row)

    def _key(self, key: str) -> str:
        return f"{self._prefix}-{key}" if self._prefix else key

    # -- checkpoints ------------------------------------------------------------------------------

    @override
    def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
        """Log new checkpoints now with ``log_model="all"`` (or True and ``save_top_k=-1``), else at the end."""
        self._checkpoint_callback = checkpoint_callback
        if self._log_model == "all" or (self._log_model is True and checkpoint_callback.save_top_k == -1):
            self._log_checkpoints(checkpoint_callback, final=False)

    def _log_checkpoints(self, callback: ModelCheckpoint, final: bool) -> None:
        import fsspec

        wandb = import_wandb()
        paths = {p: float(s) for p, s in callback.best_k_models.items()}
        for extra in (callback.last_model_path, callback.best_model_path):
            if extra:
                paths.setdefault(extra, float("nan"))
        missing = []
        for path, score in sorted(paths.items(), key=lambda item: item[0]):
            fs, local = fsspec.url_to_fs(path)
            if not fs.exists(local):  # an asynchronous write still in flight: logged on a later call
                missing.append(path)
                continue
            with fs.open(local, "rb") as source:
                content = source.read()
            # What was logged is known by its content: two saves of last.ckpt within one tick of the file
            # system's clock (a few ms) have the same size and mtime, and the second would go unlogged.
            identity = hashlib.blake2b(content, digest_size=16).hexdigest()
            if self._logged_checkpoints.get(path) == identity:
                continue
            metadata = {"score": None if score != score else score, "original_filename": os.path.basename(local)}
            metadata["monitor"] = callback.monitor
            artifact = wandb.Artifact(
                name=self._checkpoint_name or f"model-{self._id}", type="model", metadata=metadata
            )
            with artifact.new_file("model.ckpt", mode="wb") as target:
                target.write(content)
            aliases = ["latest", "best"] if path == callback.best_model_path else ["latest"]
            self.experiment.log_artifact(artifact, aliases=aliases)
            self._logged_checkpoints[path] = identity
        if final and missing:
            rank_zero_warn(f"WandbLogger(log_model={self._log_model!r}): not logged, never written: {missing}")

    # -- the end ----------------------------------------------------------------------------------

    @override
    def finalize(self, status: str) -> None:
        """Log the checkpoints (``log_model``) and finish the run (exit code 0 for success, 1 otherwise).

        Nothing happens for a run that never started, and a run given as ``experiment`` is left
        running (it is the caller's). A later use starts the run again with the same id.
        """
        if self._experiment is None:
            return
        if self._log_model and self._checkpoint_callback is not None and status == "success":
            self._log_checkpoints(self._checkpoint_callback, final=True)
        if self._owns_run:
            self._experiment.finish(exit_code=0 if status == "success" else 1)
            self._experiment = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the run: a copy starts its own with the same id (W&B resumes it)."""
        state = self.__dict__.copy()
        state["_experiment"] = None
        state["_checkpoint_callback"] = None
        return state

    @override
    def __repr__(self) -> str:
        return f"WandbLogger(project={self._project!r}, id={self._id!r}, save_dir={self._save_dir!r})"


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
