"""``ModelCheckpoint``: save the run periodically, keep the best ``k`` by a monitored metric, and a ``last.ckpt``.

Every write goes through ``trainer.save_checkpoint`` (so through the strategy and its CheckpointIO
plugin), every removal through ``trainer.strategy.remove_checkpoint``, and every existence check
through ``checkpoint_io.exists``: a custom or asynchronous CheckpointIO sees all of it. Before an
old file is removed, the CheckpointIO is flushed, so a rotation never deletes a checkpoint while a
write is still pending, and never gives up an old checkpoint before the new one is durable.

What it does beyond the basics:

- In multi-process runs the monitored values and file names are taken from global rank 0 and
  broadcast, so every process keeps exactly the same bookkeeping.
- ``save_top_k=k`` without ``monitor`` keeps the ``k`` most recent checkpoints.
- ``save_last="link"`` writes a second copy through the CheckpointIO (CheckpointIO has no link
  operation, and a symlink would bypass it).
- A monitored metric that can no longer appear (validation ran, or there is none) is an error at
  the save point.
- A NaN or infinite monitored value ranks last, as Lightning ranks NaN: its checkpoint is kept
  only while the top k has room, and it is never the best one (``best_model_path`` stays empty
  while no finite value was seen; ``best_model_score`` then reads ``inf``, ``-inf`` in mode max).
- Files outside ``dirpath`` are never removed, for any filesystem.
"""

from __future__ import annotations

import math
import os
import re
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Final

import torch

from torchplug._errors import MisconfigurationError, TrainingInterrupted
from torchplug.callbacks._validation import no_validation_reason
from torchplug.callbacks.callback import Callback
from torchplug.trainer.emergency import announce_checkpoint, save_emergency_checkpoint
from torchplug.trainer.states import TrainerFn
from torchplug.utilities.rank_zero import log, rank_zero_info, rank_zero_warn
from torchplug.utilities.writable import refuse_unwritable

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.io.checkpoint_io import CheckpointIO
    from torchplug.trainer.trainer import Trainer

__all__ = ["ModelCheckpoint"]

_MODES: Final = ("min", "max")
_TEMPLATE_KEY = re.compile(r"(\{.*?)[:\}]")


class ModelCheckpoint(Callback):
    """Save checkpoints during ``fit``: every epoch (or every n steps), the best ``k``, and optionally the last.

    Example:
        >>> checkpoint = ModelCheckpoint(monitor="val_loss", mode="min", save_top_k=3, save_last=True,
        ...                              filename="{epoch}-{val_loss:.3f}")
        >>> trainer = Trainer(callbacks=[checkpoint])
        >>> trainer.fit(model)
        >>> trainer.test(model, ckpt_path="best")   # the checkpoint with the lowest val_loss

    Args:
        dirpath: Where to write: a local path or any fsspec URL (``memory://run/ckpts``,
            ``s3://bucket/run``), a directory (an existing file there is refused when ``fit`` starts).
            Default: ``<trainer.log_dir>/checkpoints``, decided in :meth:`setup`.
        filename: A template of the file name without ``.ckpt``: ``"{epoch}-{step}"`` (default) gives
            ``epoch=0-step=100.ckpt``; ``"{epoch}-{val_loss:.2f}"`` gives ``epoch=2-val_loss=0.31.ckpt``.
            Any logged metric, ``epoch`` and ``step`` can be used; a metric not logged yet reads as 0
            (with a warning once validation has run without logging it). A template that cannot be
            filled in is refused at once.
        monitor: The logged metric that ranks checkpoints (``self.log("val_loss", ...)``). None: no
            ranking; the ``save_top_k`` most recent checkpoints are kept.
        mode: ``"min"`` (lower is better, for losses) or ``"max"`` (for accuracies).
        save_top_k: How many checkpoints to keep: ``k`` best (or most recent without ``monitor``),
            ``-1`` all of them, ``0`` none (only ``last.ckpt`` when ``save_last``).
        save_last: True: also write ``last.ckpt`` at every save point, so ``fit(ckpt_path="last")``
            resumes from the latest state. ``"link"``: the same (written as a copy, see the module doc).
        every_n_train_steps: Save every this many optimizer steps (instead of every epoch).
        every_n_epochs: Save every this many epochs (default 1 when neither ``every_n_train_steps``
            nor ``train_time_interval`` is set).
        save_weights_only: Write only the model's weights and hyperparameters (fit cannot resume from them).
        save_on_train_epoch_end: Save at the end of the training epoch (True) or after validation
            (False). None decides as Lightning does: at the end of the training epoch unless validation
            runs several times per epoch or not every epoch.
        auto_insert_metric_name: Write ``{epoch}`` as ``epoch=0`` (False: ``0``; useful for metric
            names with ``/``, which would otherwise make subdirectories).
        enable_version_counter: Add ``-v1``, ``-v2``... when a file of the same name exists already.
        verbose: Log every save decision (global rank 0, ``torchplug`` logger at the info level).
        save_on_interrupt: When SIGINT or SIGTERM stops ``fit`` (see :class:`~torchplug.TrainingInterrupted`),
            write ``<dirpath>/interrupted.ckpt`` at the step where every process stopped, to resume from
            with ``fit(ckpt_path=...)``. False: write nothing then.
        save_on_exception: When an exception other than that stop ends ``fit``, write a checkpoint of
            the state at that moment (named by ``filename``, and ``last.ckpt`` with ``save_last``)
            and say where. Its weights are those of the last finished optimizer step, its counters
            those of the last finished batch, so a resume from it runs the failed batch again.
            Under DDP the save waits for every process, as ``OnExceptionCheckpoint``'s does: the
            exception must reach each of them (a failure every rank meets); a failure of one rank
            alone ends in the collective timeout that names the ranks missing, or the launcher
            stopping the job.
        train_time_interval: Save after the first optimizer step that ends at least this long
            (a ``datetime.timedelta``) after training started or after the last such save; global
            rank 0's clock decides for every process (one broadcast per step with several processes).
            Only one of ``every_n_train_steps``, ``every_n_epochs`` and ``train_time_interval``.

    Attributes:
        best_model_path: The best checkpoint so far (the latest one without ``monitor``), or ``""``;
            never one whose monitored value was NaN or infinite.
        best_model_score: Its score (a tensor), or None before the first save; ``inf`` (``-inf`` with
            ``mode="max"``) while only non-finite values were saved, as Lightning reports it.
        best_k_models: Path to score of the checkpoints kept by ``monitor``.
        kth_best_model_path: The worst of the kept checkpoints, the next to be replaced.
        last_model_path: The path of ``last.ckpt`` (with its version), or ``""``.
        interrupted_model_path: The checkpoint written when a signal stopped ``fit``, or ``""``.
    """

    #: Runs after the other callbacks, once the metrics of the step or epoch are complete.
    monitors_metrics = True

    CHECKPOINT_JOIN_CHAR: Final = "-"
    CHECKPOINT_EQUALS_CHAR: Final = "="
    CHECKPOINT_NAME_LAST: Final = "last"
    CHECKPOINT_NAME_INTERRUPTED: Final = "interrupted"
    FILE_EXTENSION: Final = ".ckpt"
    STARTING_VERSION: Final = 1

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        monitor: str | None = None,
        verbose: bool = False,
        save_last: bool | str | None = None,
        save_top_k: int = 1,
        save_on_exception: bool = False,
        save_weights_only: bool = False,
        mode: str = "min",
        auto_insert_metric_name: bool = True,
        every_n_train_steps: int | None = None,
        train_time_interval: timedelta | None = None,
        every_n_epochs: int | None = None,
        save_on_train_epoch_end: bool | None = None,
        enable_version_counter: bool = True,
        save_on_interrupt: bool = True,
    ) -> None:
        # The parameters are in Lightning 2.6's order, so that its positional calls mean the same here.
        _check_arguments(
            mode=mode,
            save_top_k=save_top_k,
            save_last=save_last,
            every_n_train_steps=every_n_train_steps,
            every_n_epochs=every_n_epochs,
            train_time_interval=train_time_interval,
        )
        for name, text in (("monitor", monitor), ("filename", filename)):
            if text is not None and (not isinstance(text, str) or not text):
                raise MisconfigurationError(
                    f"ModelCheckpoint({name}={text!r}) is not valid: give a non-empty string (or None)."
                )
        _check_flags(
            verbose=verbose,
            save_on_exception=save_on_exception,
            save_weights_only=save_weights_only,
            auto_insert_metric_name=auto_insert_metric_name,
            enable_version_counter=enable_version_counter,
            save_on_interrupt=save_on_interrupt,
        )
        self.monitor = monitor
        self.mode = mode
        self.save_top_k = save_top_k
        self.save_last = save_last
        self.save_weights_only = save_weights_only
        self.auto_insert_metric_name = auto_insert_metric_name
        self.verbose = verbose
        self.save_on_interrupt = save_on_interrupt
        self.save_on_exception = save_on_exception
        self.interrupted_model_path = ""
        self._save_on_train_epoch_end = save_on_train_epoch_end
        self._enable_version_counter = enable_version_counter
        self._every_n_train_steps = every_n_train_steps or 0
        self._train_time_interval = train_time_interval
        self._last_time_checked: float | None = None
        untimed = every_n_train_steps is None and train_time_interval is None
        self._every_n_epochs = (1 if untimed else 0) if every_n_epochs is None else every_n_epochs
        #: Whether on_train_batch_end has anything to do (read once per step, so one attribute).
        self._saves_in_steps = bool(self._every_n_train_steps) or train_time_interval is not None
        self._user_dirpath = _normalise_dir(dirpath) if dirpath is not None else None
        self.dirpath: str | None = self._user_dirpath
        # With the default dirpath: the checkpoint folders of the logger's other versions, which a resume
        # with ckpt_path="auto" looks in too (a restarted run logs into a new version). Rank 0 only.
        self._sibling_dirs: list[str] = []
        if filename is not None and filename.endswith(self.FILE_EXTENSION):
            filename = filename[: -len(self.FILE_EXTENSION)]
        self.filename = filename
        self._template_keys = _template_keys(filename or "{epoch}-{step}")
        self._fill(filename or "{epoch}-{step}", {})  # a template that cannot be filled is refused now
        self._unlogged_warned: set[str] = set()
        self.best_model_path = ""
        self.best_model_score: torch.Tensor | None = None
        self.current_score: torch.Tensor | None = None
        self.best_k_models: dict[str, torch.Tensor] = {}
        self.kth_best_model_path = ""
        self.kth_value: torch.Tensor | None = None
        self.last_model_path = ""
        self._recent_paths: list[str] = []  # without monitor: the kept checkpoints, oldest first
        self._last_global_step_saved = 0  # nothing to save before the first optimizer step
        self._last_checkpoint_saved = ""
        self._validated = False
        self._warned_missing = False
        self._logged_names: list[str] = []
        self._removing: list[str] = []  # removed once the checkpoint being written is complete
        self._orphans: list[str] = []  # files of a killed run to remove when training resumes
        self._resumed = False  # the state came from a checkpoint of this directory
        self._resumed_step: int | None = None

    # -- identity and state ---------------------------------------------------------------------

    @property
    def state_key(self) -> str:
        """Unique per configuration, so several ModelCheckpoints keep separate state in a checkpoint."""
        settings = {
            "monitor": self.monitor,
            "mode": self.mode,
            "every_n_train_steps": self._every_n_train_steps,
            "every_n_epochs": self._every_n_epochs,
            "train_time_interval": self._train_time_interval,
        }
        return f"{type(self).__qualname__}{settings!r}"

    def state_dict(self) -> dict[str, Any]:
        """The bookkeeping (paths, scores), as plain data and tensors: safe for ``weights_only`` loading."""
        return {
            "monitor": self.monitor,
            "best_model_score": self.best_model_score,
            "best_model_path": self.best_model_path,
            "current_score": self.current_score,
            "dirpath": self.dirpath,
            "best_k_models": dict(self.best_k_models),
            "kth_best_model_path": self.kth_best_model_path,
            "kth_value": self.kth_value,
            "last_model_path": self.last_model_path,
            "recent_model_paths": list(self._recent_paths),
            "removing": list(self._removing),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the bookkeeping when the checkpoint was written to the same ``dirpath``.

        From another directory only ``best_model_path`` is restored (with a warning): the files
        listed there are not this run's to rotate. A callback that has not decided its directory
        yet (no ``dirpath`` given and :meth:`setup` not run in this process) takes the saved
        directory with the rest: this is how the caller of ``ddp_spawn``/``ddp_fork`` workers gets
        back the state of the copy that ran in rank 0.
        """
        saved_dir = state_dict.get("dirpath", self.dirpath)
        if self.dirpath is None:
            # Nothing was decided here, so nothing can conflict: the saved state is this callback's own.
            self.dirpath = saved_dir
        if saved_dir == self.dirpath:
            self.best_model_score = state_dict.get("best_model_score")
            self.current_score = state_dict.get("current_score")
            self.best_k_models = dict(state_dict.get("best_k_models", {}))
            self.kth_best_model_path = state_dict.get("kth_best_model_path", "")
            self.kth_value = state_dict.get("kth_value")
            self.last_model_path = state_dict.get("last_model_path", "")
            self._recent_paths = list(state_dict.get("recent_model_paths", []))
            self._orphans = list(state_dict.get("removing", []))
            self._resumed = True
        else:
            rank_zero_warn(
                f"ModelCheckpoint: the checkpoint was written to {saved_dir!r}, this run writes to "
                f"{self.dirpath!r}; only best_model_path is restored, the top-k and last checkpoints "
                "there are left alone."
            )
        self.best_model_path = state_dict.get("best_model_path", "")

    @property
    def every_n_epochs(self) -> int:
        """Save every this many epochs (0: not by epochs; 1 by default, when no other schedule was given)."""
        return self._every_n_epochs

    def to_yaml(self, filepath: str | os.PathLike[str] | None = None) -> None:
        """Write :attr:`best_k_models` (checkpoint path to its score, as numbers) to a YAML file.

        Args:
            filepath: Where (a local path or an fsspec URL); default ``<dirpath>/best_k_models.yaml``.

        Raises:
            MisconfigurationError: No ``filepath`` and no :attr:`dirpath` yet (before ``fit`` sets it up).
        """
        import yaml
        from fsspec.core import url_to_fs

        if filepath is None:
            if self.dirpath is None:
                raise MisconfigurationError(
                    "ModelCheckpoint.to_yaml(): no filepath given, and dirpath is decided only when fit starts. "
                    "Hint: give to_yaml(filepath=...), or call it after fit."
                )
            filepath = f"{self.dirpath.rstrip('/')}/best_k_models.yaml"
        fs, path = url_to_fs(os.fspath(filepath))
        if "/" in path:
            fs.makedirs(path.rsplit("/", 1)[0] or "/", exist_ok=True)
        with fs.open(path, "w") as stream:
            yaml.safe_dump({name: float(score) for name, score in self.best_k_models.items()}, stream)

    # -- hooks ------------------------------------------------------------------------------------

    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Decide ``dirpath`` (``<trainer.log_dir>/checkpoints`` unless given); every process gets rank 0's."""
        if self.dirpath is None:
            default = _normalise_dir(f"{trainer.log_dir.rstrip('/')}/checkpoints") if trainer.is_global_zero else None
            self.dirpath = trainer.strategy.broadcast(default)
            logger = trainer.logger
            if trainer.is_global_zero and logger is not None and logger.log_dir:
                self._sibling_dirs = [_normalise_dir(f"{d.rstrip('/')}/checkpoints") for d in logger.sibling_log_dirs()]
        if stage == "fit":
            self._validated = False
            self._refuse_a_file_for_dirpath()
            assert self.dirpath is not None
            refuse_unwritable(self.dirpath, f"ModelCheckpoint(dirpath={self.dirpath!r})", trainer.strategy)

    def _refuse_a_file_for_dirpath(self) -> None:
        from fsspec.core import url_to_fs

        assert self.dirpath is not None
        fs, path = url_to_fs(self.dirpath)
        if fs.isfile(path):
            raise MisconfigurationError(
                f"ModelCheckpoint(dirpath={self.dirpath!r}) is not valid: it is a file, and checkpoints are written "
                "into a directory. Hint: give the path of a directory (it is created when missing), or move the file."
            )

    def on_load_checkpoint(self, trainer: Trainer, module: Module, checkpoint: dict[str, Any]) -> None:
        """Note the global step of the checkpoint ``fit`` resumes from (files of later steps are a killed run's)."""
        step = checkpoint.get("global_step")
        self._resumed_step = int(step) if step is not None else None

    def on_train_start(self, trainer: Trainer, module: Module) -> None:
        """When resuming in this directory: remove what a killed run left untracked, so ``save_top_k`` holds.

        That is the file it was about to remove when it was killed, and the checkpoints it wrote
        after the one resumed from (their step, read from the name, is not earlier, and this callback
        does not track them): this run writes them again.

        Also warns when this callback saves only after validation and the fit will run none: it
        would write no checkpoint.
        """
        self._last_time_checked = time.monotonic()
        self._warn_if_never_saving(trainer)
        if not self._resumed:
            return
        self._resumed = False
        orphans: list[str] | None = self._find_orphans(trainer) if trainer.is_global_zero else None
        if trainer.world_size > 1:
            orphans = trainer.strategy.broadcast(orphans)
        for path in orphans or []:
            self._remove(trainer, path)
        if orphans:
            rank_zero_warn(
                f"ModelCheckpoint: removed {len(orphans)} checkpoint(s) that the interrupted run left untracked in "
                f"{self.dirpath} (written after the checkpoint resumed from, or due for removal): "
                f"{', '.join(os.path.basename(p) for p in orphans)}."
            )

    def _warn_if_never_saving(self, trainer: Trainer) -> None:
        if self._saves_in_steps or self._saves_on_train_epoch_end(trainer):
            return
        reason = no_validation_reason(trainer)
        if reason is not None:
            rank_zero_warn(
                f"ModelCheckpoint(dirpath={self.dirpath!r}, save_on_train_epoch_end={self._save_on_train_epoch_end}) "
                f"saves after validation, but {reason}: it will write no checkpoint in this fit. Hint: pass "
                "save_on_train_epoch_end=True to save at the end of each training epoch, or every_n_train_steps."
            )

    def _find_orphans(self, trainer: Trainer) -> list[str]:
        from fsspec.core import url_to_fs

        assert self.dirpath is not None
        fs, directory = url_to_fs(self.dirpath)
        try:
            names = [p.rsplit("/", 1)[-1] for p in fs.ls(directory, detail=False)]
        except FileNotFoundError:
            return []
        root = self.dirpath.rstrip("/")
        tracked = {*self.best_k_models, *self._recent_paths, self.last_model_path, self.interrupted_model_path}
        pattern, step = self._name_pattern(), self._resumed_step
        orphans = [p for p in self._orphans if p not in tracked and p.rsplit("/", 1)[-1] in names]
        for name in names:
            match = pattern.match(name)
            path = f"{root}/{name}"
            if match is None or path in tracked or path in orphans or step is None:
                continue
            if "step" in match.groupdict() and int(match["step"]) >= step:  # an untracked one of the resumed step
                orphans.append(path)  # was written after last.ckpt at a run's first save point
        self._orphans = []
        return orphans

    def _name_pattern(self) -> re.Pattern[str]:
        """A regex of the names this callback writes (``step`` captured when the template has it)."""
        regex, named = "", False
        for part in re.split(r"(\{[^{}]*\})", self.filename or "{epoch}-{step}"):
            field = re.fullmatch(r"\{([^:}]+)(?::[^}]*)?\}", part)
            if field is None:
                regex += re.escape(part)
                continue
            name = field[1]
            regex += re.escape(name + self.CHECKPOINT_EQUALS_CHAR) if self.auto_insert_metric_name else ""
            regex += r"(?P<step>\d+)" if name == "step" and not named else ".+?"
            named = named or name == "step"
        version = re.escape(self.CHECKPOINT_JOIN_CHAR) + r"v\d+"
        return re.compile(f"^{regex}(?:{version})?{re.escape(self.FILE_EXTENSION)}$")

    def on_train_batch_end(self, trainer: Trainer, module: Module, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Save every ``every_n_train_steps`` optimizer steps, or ``train_time_interval`` (returns at once without)."""
        if not self._saves_in_steps:
            return
        step, every = trainer.global_step, self._every_n_train_steps
        if (every and step % every) or step == self._last_global_step_saved or self._skip(trainer):
            return
        if not every and not self._time_is_up(trainer):  # the same decision on every process
            return
        candidates = self._candidates(trainer)
        first = self._last_first(trainer, candidates)
        self._save_topk(trainer, candidates, at_epoch_end=False)
        if not first:
            self._save_last(trainer, candidates)

    def _time_is_up(self, trainer: Trainer) -> bool:
        """Whether ``train_time_interval`` has passed since the last time-based save (rank 0's clock decides)."""
        assert self._train_time_interval is not None
        now = time.monotonic()
        last = self._last_time_checked
        due = last is not None and now - last >= self._train_time_interval.total_seconds()
        if trainer.world_size > 1:  # the ranks' clocks differ: every process follows rank 0's decision
            due = bool(trainer.strategy.broadcast(due))
        if due:
            self._last_time_checked = now
        return due

    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Save at the end of the training epoch, when that is where this run saves."""
        if not self._skip(trainer) and self._saves_on_train_epoch_end(trainer):
            self._save_at_epoch_end(trainer)

    def on_validation_end(self, trainer: Trainer, module: Module) -> None:
        """Save after a validation inside ``fit``, when that is where this run saves."""
        if trainer.state.fn is TrainerFn.FITTING and not trainer.sanity_checking:
            self._validated = True
        if not self._skip(trainer) and not self._saves_on_train_epoch_end(trainer):
            self._save_at_epoch_end(trainer)

    def on_exception(self, trainer: Trainer, module: Module, exception: BaseException) -> None:
        """After SIGINT or SIGTERM stopped ``fit`` (every process at the same step): write ``interrupted.ckpt``.

        After any other exception in ``fit``, with ``save_on_exception``: a checkpoint of that moment.
        Both are emergency checkpoints (:mod:`torchplug.trainer.emergency`): announced with their
        path, and a failed save keeps every checkpoint written before.
        """
        if not isinstance(exception, TrainingInterrupted):
            if self.save_on_exception:
                self._save_on_exception(trainer, exception)
            return
        if not self.save_on_interrupt:
            return
        if trainer.fast_dev_run or trainer.state.fn is not TrainerFn.FITTING or self.dirpath is None:
            return
        path = f"{self.dirpath.rstrip('/')}/{self.CHECKPOINT_NAME_INTERRUPTED}{self.FILE_EXTENSION}"
        if save_emergency_checkpoint(trainer, path, str(exception), weights_only=self.save_weights_only):
            self.interrupted_model_path = path

    def _save_on_exception(self, trainer: Trainer, exception: BaseException) -> None:
        if trainer.fast_dev_run or trainer.state.fn is not TrainerFn.FITTING or trainer.sanity_checking:
            return
        if self.dirpath is None:
            return
        reason = f"fit() raised {type(exception).__name__}: {exception}."
        if self._last_global_step_saved == trainer.global_step:
            if self._last_checkpoint_saved:  # nothing trained since: that file holds the state
                announce_checkpoint(trainer, self._last_checkpoint_saved, reason, written=False)
            return
        candidates = self._candidates(trainer)
        path = self._unique_path(trainer, candidates, reusable="")
        if save_emergency_checkpoint(trainer, path, reason, weights_only=self.save_weights_only):
            self._saved(trainer, path)
            self._save_last(trainer, candidates)
            trainer.strategy.checkpoint_io.flush()

    # -- when -------------------------------------------------------------------------------------

    def _skip(self, trainer: Trainer) -> bool:
        return (
            bool(trainer.fast_dev_run)
            or trainer.state.fn is not TrainerFn.FITTING
            or trainer.sanity_checking
            or self._last_global_step_saved == trainer.global_step
        )

    def _saves_on_train_epoch_end(self, trainer: Trainer) -> bool:
        if self._save_on_train_epoch_end is not None:
            return self._save_on_train_epoch_end
        if trainer.check_val_every_n_epoch != 1:
            return False  # validation does not run every epoch: save when it does
        if not sum(trainer.num_val_batches):
            return True  # no validation
        interval = trainer.val_check_interval
        return isinstance(interval, float) and interval == 1.0  # validation only at the end of the epoch

    def _save_at_epoch_end(self, trainer: Trainer) -> None:
        candidates = self._candidates(trainer)
        first = self._last_first(trainer, candidates)
        every = self._every_n_epochs
        if every >= 1 and (trainer.current_epoch + 1) % every == 0:
            self._save_topk(trainer, candidates, at_epoch_end=True)
        if not first:
            self._save_last(trainer, candidates)

    def _last_first(self, trainer: Trainer, candidates: dict[str, Any]) -> bool:
        """At the first save of a run without ``last.ckpt`` yet, write it before the top-k file; True if so.

        A run killed in the middle of its first save point then always leaves a checkpoint to resume
        from (whose resumption removes the top-k file written after it), never a lone top-k file
        that the next, fresh run would not know about.
        """
        if not self.save_last or self.last_model_path:
            return False
        self._save_last(trainer, candidates)
        return True

    # -- what -------------------------------------------------------------------------------------

    def _candidates(self, trainer: Trainer) -> dict[str, Any]:
        """The values for the monitor and the file name, from global rank 0 (the same on every process)."""
        shared: tuple[dict[str, Any], list[str]] | None = None
        if trainer.is_global_zero or trainer.world_size == 1:
            metrics = trainer.callback_metrics
            wanted = set(self._template_keys)
            if self.monitor is not None:
                wanted.add(self.monitor)
            candidates = {key: metrics[key].detach().cpu() for key in wanted if key in metrics}
            if self._validated or not trainer.enable_validation:  # what is not logged by now may never be
                self._warn_unlogged(candidates, metrics)
            epoch, step = candidates.get("epoch"), candidates.get("step")
            candidates["epoch"] = epoch.int() if epoch is not None else torch.tensor(trainer.current_epoch)
            candidates["step"] = step.int() if step is not None else torch.tensor(trainer.global_step)
            shared = (candidates, sorted(metrics))
        if trainer.world_size > 1:
            shared = trainer.strategy.broadcast(shared)
        assert shared is not None
        candidates, self._logged_names = shared
        return candidates

    def _warn_unlogged(self, candidates: dict[str, Any], metrics: dict[str, Any]) -> None:
        """Once per name: a metric of ``filename`` that is not logged reads as 0 in the checkpoints' names."""
        for name in self._template_keys:
            if name in candidates or name in ("epoch", "step") or name in self._unlogged_warned:
                continue
            self._unlogged_warned.add(name)
            rank_zero_warn(
                f"ModelCheckpoint(filename={self.filename!r}): the metric {name!r} is not logged (logged: "
                f"{', '.join(sorted(metrics)) or '(none)'}), so it reads as 0 in the checkpoints' names. Hint: call "
                f"self.log({name!r}, value) in your Module, or name a logged metric in filename."
            )

    def _save_topk(self, trainer: Trainer, candidates: dict[str, Any], at_epoch_end: bool) -> None:
        if self.save_top_k == 0:
            return
        if self.monitor is None:
            self._save_recent(trainer, candidates)
            return
        current = candidates.get(self.monitor)
        if current is None:
            self._missing_monitor(trainer, candidates, at_epoch_end)
            return
        score = float(current)
        finite = math.isfinite(score)
        if not finite:  # a diverged run: ranked last (as Lightning ranks NaN), and never "best"
            rank_zero_warn(
                f"ModelCheckpoint(monitor={self.monitor!r}): {self.monitor} = {score} at epoch "
                f"{int(candidates['epoch'])}, global step {int(candidates['step'])} is not finite, so this "
                f"checkpoint ranks last: it is kept only while the top {self.save_top_k} has room, and is never the "
                f"best (best_model_path stays {self.best_model_path or 'unset'!r})."
            )
        if self._in_top_k(score if finite else None):
            self._update_best_and_save(trainer, torch.tensor(score if finite else self._worst_score), candidates)
        elif self.verbose:
            self._say(
                trainer,
                f"Epoch {int(candidates['epoch'])}, global step {int(candidates['step'])}: "
                f"{self.monitor!r} ({score:.5g}) was not in the top {self.save_top_k}.",
            )

    def _missing_monitor(self, trainer: Trainer, candidates: dict[str, Any], at_epoch_end: bool) -> None:
        logged = ", ".join(self._logged_names) or "(none)"
        message = (
            f"ModelCheckpoint(monitor={self.monitor!r}) found no metric {self.monitor!r}. Logged metrics: "
            f"{logged}. Hint: call self.log({self.monitor!r}, value) in your Module, or monitor one of those."
        )
        never_coming = self._validated or (at_epoch_end and not sum(trainer.num_val_batches))
        if never_coming:
            raise MisconfigurationError(message)
        if not self._warned_missing:
            self._warned_missing = True
            rank_zero_warn(message + " (Skipping the top-k save until it is logged.)")

    @property
    def _worst_score(self) -> float:
        """The score a non-finite value is kept under: the worst possible, so any finite value displaces it."""
        return math.inf if self.mode == "min" else -math.inf

    def _in_top_k(self, score: float | None) -> bool:
        """Whether a checkpoint of ``score`` enters the top k (None, a non-finite value: only while there is room)."""
        if self.save_top_k == -1 or len(self.best_k_models) < self.save_top_k:
            return True
        if score is None:
            return False
        kth = float(self.best_k_models[self.kth_best_model_path])
        return score < kth if self.mode == "min" else score > kth

    def _update_best_and_save(self, trainer: Trainer, current: torch.Tensor, candidates: dict[str, Any]) -> None:
        k = len(self.best_k_models) + 1 if self.save_top_k == -1 else self.save_top_k
        replaced = ""
        if len(self.best_k_models) == k:
            replaced = self.kth_best_model_path
            self.best_k_models.pop(replaced)
        path = self._unique_path(trainer, candidates, reusable=replaced)
        self.current_score = current
        self.best_k_models[path] = current
        worst, best = (max, min) if self.mode == "min" else (min, max)
        if len(self.best_k_models) == k:
            self.kth_best_model_path = worst(self.best_k_models, key=lambda p: float(self.best_k_models[p]))
            self.kth_value = self.best_k_models[self.kth_best_model_path]
        ranked = {p: s for p, s in self.best_k_models.items() if math.isfinite(float(s))}  # only these can be best
        if ranked:
            self.best_model_path = best(ranked, key=lambda p: float(ranked[p]))
            self.best_model_score = ranked[self.best_model_path]
        else:  # non-finite values only: no checkpoint is best, and the score is the worst, as Lightning reports it
            self.best_model_path = ""
            self.best_model_score = torch.tensor(self._worst_score)
        if self.verbose:
            self._say(
                trainer,
                f"Epoch {int(candidates['epoch'])}, global step {int(candidates['step'])}: "
                f"{self.monitor!r} reached {float(current):.5g} (best "
                f"{float(self.best_model_score):.5g}), saving model to {path!r} as top {k}.",
            )
        self._write(trainer, path, removing=replaced)
        if replaced and replaced != path:
            self._remove(trainer, replaced)

    def _save_recent(self, trainer: Trainer, candidates: dict[str, Any]) -> None:
        """Without ``monitor``: write a new checkpoint and keep the ``save_top_k`` most recent."""
        k = self.save_top_k
        oldest = self._recent_paths[0] if 0 < k <= len(self._recent_paths) else ""
        path = self._unique_path(trainer, candidates, reusable=oldest)
        self.best_model_path = path
        if k > 0:
            self._recent_paths = [p for p in self._recent_paths if p not in (path, oldest)] + [path]
        self._write(trainer, path, removing=oldest)
        if oldest and oldest != path:
            self._remove(trainer, oldest)

    def _save_last(self, trainer: Trainer, candidates: dict[str, Any]) -> None:
        if not self.save_last:
            return
        previous = self.last_model_path
        path = self._unique_path(trainer, candidates, reusable=previous, filename=self.CHECKPOINT_NAME_LAST)
        self.last_model_path = path  # before the write: the checkpoint records itself as the last one
        try:
            self._write(trainer, path, removing=previous)
        except BaseException:
            self.last_model_path = previous  # not written: the previous last checkpoint is still the last
            raise
        if previous and previous != path:
            self._remove(trainer, previous)

    # -- names ------------------------------------------------------------------------------------

    def format_checkpoint_name(
        self, metrics: dict[str, Any], filename: str | None = None, ver: int | None = None
    ) -> str:
        """The path for ``metrics`` (name to value): the template filled in, ``-v<ver>``, ``.ckpt``, in ``dirpath``.

        Example:
            >>> ModelCheckpoint(dirpath="ckpts", filename="{epoch}-{val_loss:.2f}").format_checkpoint_name(
            ...     {"epoch": 3, "val_loss": 0.123})
            'ckpts/epoch=3-val_loss=0.12.ckpt'
        """
        name = self._fill(filename or self.filename or "{epoch}-{step}", metrics)
        if ver is not None:
            name = f"{name}{self.CHECKPOINT_JOIN_CHAR}v{ver}"
        name += self.FILE_EXTENSION
        return f"{self.dirpath.rstrip('/')}/{name}" if self.dirpath else name

    def _fill(self, template: str, metrics: dict[str, Any]) -> str:
        try:
            return _fill_template(template, dict(metrics), self.auto_insert_metric_name)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            values = {k: float(v) if isinstance(v, torch.Tensor) and v.numel() == 1 else v for k, v in metrics.items()}
            raise MisconfigurationError(
                f"ModelCheckpoint(filename={template!r}) is not valid: {type(exc).__name__}: {exc}"
                f"{f' (with {values})' if values else ''}. Hint: write the fields as {{name}} or {{name:format}}, "
                'for example "{epoch}-{val_loss:.2f}" (logged metrics are floats).'
            ) from exc

    def _unique_path(
        self, trainer: Trainer, candidates: dict[str, Any], reusable: str, filename: str | None = None
    ) -> str:
        """Rank 0 picks a free name (``-v1``... when taken, unless it is ``reusable``); every rank gets it."""
        path: str | None = None
        if trainer.is_global_zero or trainer.world_size == 1:
            path = self.format_checkpoint_name(candidates, filename)
            if self._enable_version_counter:
                version = self.STARTING_VERSION
                while path != reusable and self._taken(trainer, path):
                    path = self.format_checkpoint_name(candidates, filename, ver=version)
                    version += 1
        if trainer.world_size > 1:
            path = trainer.strategy.broadcast(path)
        assert path is not None
        return path

    def _taken(self, trainer: Trainer, path: str) -> bool:
        # Our own names count as taken even while an asynchronous write has not created the file yet.
        if path in self.best_k_models or path in self._recent_paths or path == self.last_model_path:
            return True
        return bool(trainer.strategy.checkpoint_io.exists(path))

    # -- IO ---------------------------------------------------------------------------------------

    def _write(self, trainer: Trainer, path: str, removing: str = "") -> None:
        # The file to remove once this one is written goes into this checkpoint's state: a run killed
        # in between and resumed from this checkpoint removes it then.
        self._removing = [removing] if removing and removing != path else []
        try:
            trainer.save_checkpoint(path, weights_only=self.save_weights_only)
        finally:
            self._removing = []
        self._saved(trainer, path)

    def _saved(self, trainer: Trainer, path: str) -> None:
        """Bookkeeping once ``path`` is written: the step saved, and the loggers that keep checkpoints told."""
        self._last_global_step_saved = trainer.global_step
        self._last_checkpoint_saved = path
        if trainer.is_global_zero:  # trackers that keep checkpoints as artifacts (MLflow, W&B log_model)
            for logger in trainer.loggers:
                logger.after_save_checkpoint(self)

    def _remove(self, trainer: Trainer, path: str) -> None:
        """Delete an old checkpoint of ours, once every pending write is complete (async IO)."""
        if not self._owns(trainer, path):
            return
        trainer.strategy.checkpoint_io.flush()
        trainer.strategy.remove_checkpoint(path)

    def _owns(self, trainer: Trainer, path: str) -> bool:
        if self.dirpath is None or not path.startswith(self.dirpath.rstrip("/") + "/"):
            return False  # only files in our directory
        resumed = getattr(trainer, "ckpt_path", None)
        return not (resumed and _normalise_dir(str(resumed)) == path)  # never the checkpoint we resumed from

    def find_last_checkpoint(self, checkpoint_io: CheckpointIO) -> str | None:
        """The checkpoint ``fit(ckpt_path="last")`` resumes from.

        Also what ``validate``, ``test`` and ``predict`` load with ``ckpt_path="last"``.

        Returns:
            :attr:`last_model_path` if that file exists, else ``<dirpath>/last.ckpt`` if it exists;
            else, with the default ``dirpath``, the newest ``last.ckpt`` of the logger's other
            versions (a new process, such as ``core validate --ckpt_path=last`` after ``core fit``,
            logs into a new version, but means the fit's checkpoint); else None.
        """
        if self.last_model_path and checkpoint_io.exists(self.last_model_path):
            return self.last_model_path
        name = f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"
        if self.dirpath is not None:
            path = f"{self.dirpath.rstrip('/')}/{name}"
            if checkpoint_io.exists(path):
                return path
        found = [f"{d.rstrip('/')}/{name}" for d in self._sibling_dirs]
        found = [path for path in found if checkpoint_io.exists(path)]
        if not found:
            return None
        newest = max(found, key=_modified_at)
        rank_zero_info(
            "ckpt_path='last': %s has no last checkpoint; using the newest one of the logger's other versions, %s",
            self.dirpath,
            newest,
        )
        return newest

    def complete_checkpoints(self, checkpoint_io: CheckpointIO) -> list[str]:
        """Every complete checkpoint in :attr:`dirpath` (``*.ckpt`` files, or sharded directories with their metadata).

        What ``fit(ckpt_path="auto")`` chooses from. With the default ``dirpath`` (under the logger's
        run directory), the ``checkpoints`` folders of the logger's other versions count too: a
        restarted run logs into a new version. Hidden temporaries of saves in progress or killed
        are never listed, nor is a sharded directory whose save did not finish.
        """
        if self.dirpath is None:
            return []
        from fsspec.core import url_to_fs

        paths: list[str] = []
        for directory in (self.dirpath, *self._sibling_dirs):
            fs, fs_path = url_to_fs(directory)
            if not fs.isdir(fs_path):
                continue
            found = [str(p) for p in fs.glob(f"{fs_path.rstrip('/')}/*{self.FILE_EXTENSION}")]
            paths += [f"{directory.rstrip('/')}/{p.rsplit('/', 1)[-1]}" for p in found]
        return [p for p in paths if checkpoint_io.exists(p)]

    def _say(self, trainer: Trainer, message: str) -> None:
        if trainer.is_global_zero:
            log.info(message)

    def __repr__(self) -> str:
        return (
            f"ModelCheckpoint(dirpath={self.dirpath!r}, monitor={self.monitor!r}, mode={self.mode!r}, "
            f"save_top_k={self.save_top_k}, save_last={self.save_last!r})"
        )


def _check_arguments(
    mode: str,
    save_top_k: int,
    save_last: Any,
    every_n_train_steps: int | None,
    every_n_epochs: int | None,
    train_time_interval: Any,
) -> None:
    if mode not in _MODES:
        raise MisconfigurationError(
            f"ModelCheckpoint(mode={mode!r}): choose 'min' (lower is better, for losses) or 'max' (for accuracies)."
        )
    if isinstance(save_top_k, bool) or not isinstance(save_top_k, int) or save_top_k < -1:
        raise MisconfigurationError(
            f"ModelCheckpoint(save_top_k={save_top_k!r}): give -1 (keep all), 0 (none) "
            "or the number of checkpoints to keep."
        )
    if save_last not in (None, True, False, "link"):
        raise MisconfigurationError(f"ModelCheckpoint(save_last={save_last!r}): choose None, True, False or 'link'.")
    for name, value in (("every_n_train_steps", every_n_train_steps), ("every_n_epochs", every_n_epochs)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise MisconfigurationError(f"ModelCheckpoint({name}={value!r}): give a positive int, or 0/None.")
    if train_time_interval is not None and (
        not isinstance(train_time_interval, timedelta) or train_time_interval.total_seconds() <= 0
    ):
        raise MisconfigurationError(
            f"ModelCheckpoint(train_time_interval={train_time_interval!r}) is not valid: give a datetime.timedelta "
            "longer than 0, or None. Hint: train_time_interval=timedelta(minutes=30)."
        )
    if every_n_train_steps and every_n_epochs:
        raise MisconfigurationError(
            f"ModelCheckpoint(every_n_train_steps={every_n_train_steps}, every_n_epochs={every_n_epochs}): set only "
            "one of them. Hint: use two ModelCheckpoint callbacks to save on both schedules."
        )
    if train_time_interval is not None and (every_n_train_steps or every_n_epochs):
        given = "every_n_train_steps" if every_n_train_steps else "every_n_epochs"
        raise MisconfigurationError(
            f"ModelCheckpoint(train_time_interval={train_time_interval!r}, {given}="
            f"{every_n_train_steps or every_n_epochs}): set only one of them. Hint: use two ModelCheckpoint "
            "callbacks to save on both schedules."
        )


def _check_flags(**flags: Any) -> None:
    """Switches must be True or False: a string such as "False" would read as on."""
    for name, value in flags.items():
        if not isinstance(value, bool):
            raise MisconfigurationError(f"ModelCheckpoint({name}={value!r}): give True or False.")


def _normalise_dir(path: str | os.PathLike[str]) -> str:
    """Local paths become absolute (``~`` expanded); URLs (``memory://``, ``s3://``) are kept as given."""
    if not isinstance(path, (str, os.PathLike)):
        raise MisconfigurationError(
            f"ModelCheckpoint(dirpath={path!r}) is not valid: give a directory, as a local path (str or "
            "pathlib.Path) or an fsspec URL, or None for <log_dir>/checkpoints."
        )
    text = os.fspath(path)
    if "://" in text:
        if text.startswith("file://"):
            return "file://" + os.path.realpath(os.path.expanduser(text[len("file://") :]))
        return text.rstrip("/")
    return os.path.realpath(os.path.expanduser(text))


def _template_keys(template: str) -> list[str]:
    return [group[1:] for group in _TEMPLATE_KEY.findall(template)]


def _fill_template(template: str, metrics: dict[str, Any], auto_insert_metric_name: bool) -> str:
    """Lightning's rules: ``{name}`` becomes ``name=<value>`` (or ``<value>``); missing metrics read 0."""
    groups = sorted(_TEMPLATE_KEY.findall(template), key=len, reverse=True)  # "epoch_x" before "epoch"
    for group in groups:
        name = group[1:]
        if auto_insert_metric_name:
            template = template.replace(group, name + ModelCheckpoint.CHECKPOINT_EQUALS_CHAR + "{" + name)
        template = template.replace(group, f"{{0[{name}]")  # names with dots are looked up whole
        if name not in metrics:
            metrics[name] = torch.tensor(0)
    return template.format(metrics)


def _modified_at(path: str) -> float:
    """When ``path`` was last written (seconds since the epoch); 0.0 when its filesystem cannot say."""
    from fsspec.core import url_to_fs

    try:
        fs, fs_path = url_to_fs(path)
        return float(fs.modified(fs_path).timestamp())
    except (NotImplementedError, OSError, ValueError, AttributeError):
        return 0.0
