"""Writing a running Trainer's checkpoint, and restoring one so that training continues exactly.

Everything written is ``weights_only``-safe (tensors and plain data), so checkpoints load with
``torch.load(weights_only=True)``. The layout holds Lightning 2.x's keys as well as torchplug's own
(:mod:`torchplug.trainer.checkpoint_layout`), and a Lightning checkpoint is read as well as ours.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Final

import torch

from torchplug._discovery import core_version
from torchplug._errors import CheckpointLoadError, MisconfigurationError
from torchplug.trainer.checkpoint_layout import (
    LIGHTNING_LAYOUT_VERSION,
    LIGHTNING_VERSION_KEY,
    check_checkpoint,
    find_callback_state,
    lightning_loops,
    progress_from_lightning,
)
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_warn
from torchplug.utilities.seed import capture_rng_states

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["CHECKPOINT_FORMAT", "CheckpointConnector", "WeightsMismatchError", "gradients_of", "load_gradients"]

#: Version of the checkpoint layout; bumped only on incompatible changes.
CHECKPOINT_FORMAT = 1


class CheckpointConnector:
    """Writes checkpoints of a running Trainer and restores them so that training continues exactly.

    Args:
        trainer: The Trainer whose state is saved and restored.
    """

    def __init__(self, trainer: Trainer) -> None:
        self._trainer = trainer
        #: The checkpoint the last run started from (None for a fresh start).
        self.ckpt_path: str | None = None
        self._prepare_hooks: list[Any] = []

    # -- writing ----------------------------------------------------------------------------------

    def dump(self, weights_only: bool = False) -> dict[str, Any]:
        """The checkpoint of the run now. Must run on every process (sharded strategies gather here).

        Args:
            weights_only: Only the model's weights and hyperparameters (no optimizer, loop or RNG state).
        """
        trainer = self._trainer
        module = trainer.module
        progress = trainer.fit_loop.progress
        checkpoint: dict[str, Any] = {
            "torchplug_version": core_version(),
            "format": CHECKPOINT_FORMAT,
            LIGHTNING_VERSION_KEY: LIGHTNING_LAYOUT_VERSION,
            "epoch": progress.epoch,
            "global_step": progress.global_step,
            "state_dict": trainer.strategy.module_state_dict(),
        }
        hparams = getattr(module, "_hparams_for_checkpoint", None)
        if hparams is not None:
            checkpoint["hparams_name"] = "kwargs"
            checkpoint["hyper_parameters"] = dict(hparams)
        datamodule_hparams = getattr(trainer.datamodule, "_hparams_for_checkpoint", None)
        if datamodule_hparams is not None:
            checkpoint["datamodule_hyper_parameters"] = dict(datamodule_hparams)
        if not weights_only:
            self._add_training_state(checkpoint)
        for callback in trainer.callbacks:
            callback.on_save_checkpoint(trainer, module, checkpoint)
        module.on_save_checkpoint(checkpoint)
        return checkpoint

    def _add_training_state(self, checkpoint: dict[str, Any]) -> None:
        trainer = self._trainer
        strategy = trainer.strategy
        assert strategy.precision is not None and strategy.accelerator is not None
        trainer.fit_loop.progress.should_stop = trainer.should_stop
        fit_state = trainer.fit_loop.state_dict()
        accumulate = trainer.batches_per_optimizer_step if trainer.module.automatic_optimization else 1
        checkpoint["loops"] = {"fit": fit_state, **lightning_loops(fit_state, trainer.num_training_batches, accumulate)}
        checkpoint["optimizer_states"] = [strategy.optimizer_state(o) for o in trainer.optimizers]
        checkpoint["lr_schedulers"] = [_scheduler_state(config.scheduler) for config in trainer.lr_scheduler_configs]
        precision_state = checkpoint["precision"] = strategy.precision.state_dict()
        if precision_state:  # where Lightning keeps it: under the precision's class name
            checkpoint[type(strategy.precision).__qualname__] = precision_state
        checkpoint["rng"] = {"global": capture_rng_states(), "accelerator": strategy.accelerator.get_rng_state()}
        checkpoint["callbacks"] = {cb.state_key: cb.state_dict() for cb in trainer.callbacks}
        if trainer.datamodule is not None:
            datamodule_state = checkpoint["datamodule"] = trainer.datamodule.state_dict()
            if datamodule_state:
                checkpoint[type(trainer.datamodule).__qualname__] = datamodule_state
        accumulated = trainer.fit_loop.accumulated_gradients()
        if accumulated is not None:
            checkpoint["accumulated_gradients"] = accumulated

    def save(self, filepath: str, weights_only: bool = False, storage_options: Any = None) -> None:
        """Write a checkpoint of the run now, through the strategy (rank 0 writes; sharded state is gathered)."""
        checkpoint = self.dump(weights_only)
        strategy = self._trainer.strategy
        strategy.save_checkpoint(checkpoint, filepath, storage_options=storage_options)
        if not strategy.checkpoint_io.collective:  # a collective IO synchronises its saves itself (and reads)
            strategy.barrier("save_checkpoint")

    def prepare_io(self) -> None:
        """Have the checkpoint IO allocate ahead of the first save, once every optimizer has taken its first step.

        Optimizers create their state lazily, on their first step; from then on a checkpoint's
        tensors keep their sizes. So the IO is prepared (:meth:`CheckpointIO.prepare`) from an
        optimizer post-step hook that removes itself: nothing runs on later steps, and nothing at
        all for an IO that does not override ``prepare``.
        """
        from torchplug.io.checkpoint_io import CheckpointIO

        trainer = self._trainer
        if type(trainer.strategy.checkpoint_io).prepare is CheckpointIO.prepare:
            return
        optimizers = list(trainer.optimizers)
        waiting = set(range(len(optimizers)))

        def stepped(index: int, *_: Any) -> None:
            waiting.discard(index)
            if not waiting:
                self.stop_preparing()
                self._prepare()

        self._prepare_hooks = [
            o.register_step_post_hook(functools.partial(stepped, i)) for i, o in enumerate(optimizers)
        ]
        if not optimizers:
            self._prepare()

    def stop_preparing(self) -> None:
        """Remove the hooks of :meth:`prepare_io` (at the end of ``fit``, or once they fired)."""
        hooks, self._prepare_hooks = self._prepare_hooks, []
        for hook in hooks:
            hook.remove()

    def _prepare(self) -> None:
        trainer = self._trainer
        strategy = trainer.strategy
        io = strategy.checkpoint_io
        if io.collective:  # DCP's form: references to this process's shards, no collective needed
            state = {
                "state_dict": strategy.module_state_dict(),
                "optimizer_states": [strategy.optimizer_state(o) for o in trainer.optimizers],
            }
        else:  # the live tensors a save on rank 0 copies (strategies that gather copy other tensors anyway)
            state = {
                "state_dict": trainer.module.state_dict(),
                "optimizer_states": [o.state_dict() for o in trainer.optimizers],
            }
        io.prepare(state)

    # -- reading ----------------------------------------------------------------------------------

    def restore_model(self, checkpoint: dict[str, Any], strict: bool | None = None) -> None:
        """Load the model's weights (and let the module read its own entries).

        Args:
            checkpoint: The checkpoint read.
            strict: Require an exact match of the keys; None: the module's ``strict_loading``.
        """
        trainer = self._trainer
        trainer.module.on_load_checkpoint(checkpoint)
        if strict is None:
            strict = bool(getattr(trainer.module, "strict_loading", True))
        try:
            trainer.strategy.load_module_state_dict(checkpoint["state_dict"], strict=strict)
        except RuntimeError as exc:
            raise weights_mismatch(str(self.ckpt_path), type(trainer.module).__name__, exc) from exc

    def restore_training_state(self, checkpoint: dict[str, Any]) -> None:
        """Restore everything ``fit`` needs to continue exactly where the checkpoint was written."""
        trainer = self._trainer
        loops = checkpoint.get("loops")
        if (
            not isinstance(loops, dict)
            or not ({"fit", "fit_loop"} & loops.keys())
            or "optimizer_states" not in checkpoint
        ):
            missing = [k for k in ("loops", "optimizer_states") if k not in checkpoint] or ["loops['fit']"]
            if len(missing) == 2:  # both: what a weights_only save leaves out
                raise MisconfigurationError(
                    f"{self.ckpt_path!r} holds only weights (it lacks {', '.join(map(repr, missing))}: it was saved "
                    "with weights_only=True), so fit cannot resume from it. Hint: load it with "
                    "Module.load_from_checkpoint(...) and start a new fit without ckpt_path."
                )
            raise CheckpointLoadError(
                f"Cannot resume from the checkpoint {self.ckpt_path}: its {missing[0]!r} section is missing (it holds "
                f"{', '.join(map(repr, list(checkpoint)[:12]))}). A torchplug or Lightning save writes it with the "
                "others, so the file was edited or written by other code. Hint: resume from another checkpoint, or "
                "load its weights with Module.load_from_checkpoint(...) and start a new fit."
            )
        strategy = trainer.strategy
        assert strategy.precision is not None and strategy.accelerator is not None
        saved = checkpoint["optimizer_states"]
        if len(saved) != len(trainer.optimizers):
            raise MisconfigurationError(
                f"The checkpoint has {len(saved)} optimizer states, but configure_optimizers() "
                f"returned {len(trainer.optimizers)} optimizers."
            )
        # Callbacks first, as in Lightning: a finetuning callback puts back the parameter groups it
        # added, so that the optimizer states below find the groups they were saved with.
        self._restore_callbacks(checkpoint)
        for optimizer, state in zip(trainer.optimizers, saved):
            strategy.load_optimizer_state_dict(optimizer, state)
        saved_schedulers = checkpoint.get("lr_schedulers", [])
        if len(saved_schedulers) != len(trainer.lr_scheduler_configs):
            rank_zero_warn(
                f"{self.ckpt_path!r} holds {len(saved_schedulers)} learning-rate scheduler state(s), but "
                f"configure_optimizers() returned {len(trainer.lr_scheduler_configs)} scheduler(s): only the first "
                f"{min(len(saved_schedulers), len(trainer.lr_scheduler_configs))} are restored, in order; the others "
                "start afresh or are dropped, so the learning rates differ from the interrupted run's. Hint: return "
                "the schedulers the checkpoint was written with to resume exactly."
            )
        for config, state in zip(trainer.lr_scheduler_configs, saved_schedulers):
            config.scheduler.load_state_dict(state)
        precision_key = type(strategy.precision).__qualname__
        strategy.precision.load_state_dict(checkpoint.get("precision", checkpoint.get(precision_key, {})))
        datamodule = trainer.datamodule
        if datamodule is not None:
            state = checkpoint.get("datamodule", checkpoint.get(type(datamodule).__qualname__))
            if state is not None:
                datamodule.load_state_dict(state)
        rng = checkpoint.get("rng", {})
        if rng.get("accelerator") is not None:
            strategy.accelerator.set_rng_state(rng["accelerator"])
        fit_state = loops.get("fit")
        if fit_state is None:  # a Lightning checkpoint: its progress counters say where to resume
            accumulate = trainer.batches_per_optimizer_step if trainer.module.automatic_optimization else 1
            fit_state = progress_from_lightning(
                loops["fit_loop"], int(checkpoint.get("global_step", 0)), trainer.num_training_batches, accumulate
            )
            if fit_state["batches_done"] and not fit_state["epoch_finished"]:
                rank_zero_warn(
                    f"{self.ckpt_path!r} was written by Lightning in the middle of epoch {fit_state['epoch']} and "
                    f"holds no random state: the epoch goes on after the first {fit_state['batches_done']} batches "
                    "of a new pass over the data, whose order may differ from the interrupted run's if the loader "
                    "shuffles."
                )
        trainer.fit_loop.restore(fit_state, rng.get("global"), checkpoint.get("accumulated_gradients"))
        trainer.should_stop = trainer.fit_loop.progress.should_stop
        epoch, max_epochs = trainer.fit_loop.progress.epoch, trainer.max_epochs
        if max_epochs is not None and max_epochs != -1 and epoch > max_epochs:  # as in Lightning: refused
            raise MisconfigurationError(
                f"max_epochs={max_epochs} is not valid to resume from {self.ckpt_path!r}: the checkpoint is "
                f"at epoch {epoch}, past the last epoch that max_epochs allows. Hint: give max_epochs > {epoch} to "
                "train on, or start without ckpt_path."
            )

    def _restore_callbacks(self, checkpoint: dict[str, Any]) -> None:
        """Each callback's ``on_load_checkpoint`` and state; a saved state no callback takes is warned about."""
        trainer = self._trainer
        callback_states = checkpoint.get("callbacks", {})
        taken: set[int] = set()
        for callback in trainer.callbacks:
            callback.on_load_checkpoint(trainer, trainer.module, checkpoint)
            state = find_callback_state(callback_states, callback.state_key)
            if state is not None:
                taken.add(id(state))
                callback.load_state_dict(state)
        left = [key for key, state in callback_states.items() if state and id(state) not in taken]
        if left:
            where = f" {self.ckpt_path!r}" if self.ckpt_path else ""
            rank_zero_warn(
                f"The checkpoint{where} holds the state of callbacks that this Trainer does not have, so it is not "
                f"restored: {', '.join(left)}. Hint: give the Trainer the callbacks of the run that wrote it, with the "
                "settings their state_key names, to resume them too."
            )

    def resolve_path(self, ckpt_path: str | None, fn: str) -> str | None:
        """Turn ``ckpt_path`` (a path, "last", "best", "auto" or None) into a path, with errors in the user's words.

        ``"auto"`` gives the newest complete checkpoint there is, or None (a fresh start): see
        :meth:`newest_checkpoint`.
        """
        if ckpt_path is None:
            return None
        if ckpt_path == "auto":
            return self.newest_checkpoint(fn)
        trainer = self._trainer
        checkpoint_io = trainer.strategy.checkpoint_io
        if ckpt_path in ("last", "best"):
            callback = trainer.checkpoint_callback
            if callback is None:
                raise MisconfigurationError(
                    f'{fn}(ckpt_path="{ckpt_path}") needs a ModelCheckpoint callback; '
                    "none is configured. Hint: pass the checkpoint's path instead."
                )
            callbacks = trainer.checkpoint_callbacks
            if ckpt_path == "best":
                if len(callbacks) > 1:
                    rank_zero_warn(
                        f'{fn}(ckpt_path="best") with {len(callbacks)} ModelCheckpoint callbacks: the best checkpoint '
                        f"of the first one (monitor={callback.monitor!r}) is used, as in Lightning. Hint: pass that "
                        "callback's best_model_path yourself to choose another."
                    )
                path = callback.best_model_path
            else:  # the newest last checkpoint of any ModelCheckpoint, as in Lightning
                found = [p for p in (c.find_last_checkpoint(checkpoint_io) for c in callbacks) if p]
                path = max(found, key=_written_at) if found else None
            path = trainer.strategy.broadcast(path)  # rank 0 decides: node-local storage may differ between ranks
            if not path:
                raise MisconfigurationError(
                    f'{fn}(ckpt_path="{ckpt_path}"): no {ckpt_path} checkpoint was found'
                    + (
                        " (no model was monitored and saved yet)."
                        if ckpt_path == "best"
                        else f" in {callback.dirpath}. Hint: train with ModelCheckpoint(save_last=True)."
                    )
                )
            return str(path)
        if not isinstance(ckpt_path, str):
            ckpt_path = str(ckpt_path)
        if not checkpoint_io.exists(ckpt_path):
            hint = _path_hint(ckpt_path)
            raise FileNotFoundError(f"{fn}(ckpt_path={ckpt_path!r}): checkpoint file not found. {hint}")
        return ckpt_path

    def auto_resume_path(self) -> str | None:
        """The checkpoint the cluster environment says a restarted job resumes from (a requeued SLURM job)."""
        trainer = self._trainer
        environment = trainer.cluster_environment
        if environment is None:
            return None
        path: str | None = environment.resume_checkpoint_path(trainer.default_root_dir, trainer.strategy.checkpoint_io)
        return path

    def newest_checkpoint(self, fn: str = "fit") -> str | None:
        """The newest complete checkpoint of this run's directories, or None: what ``ckpt_path="auto"`` resumes from.

        The candidates are every complete checkpoint (a file, or a sharded directory with its
        metadata) in each ModelCheckpoint's ``dirpath`` and the cluster environment's preemption
        checkpoint under ``default_root_dir``; the most recently written wins. Global rank 0
        decides, every process gets its answer.
        """
        trainer = self._trainer
        io = trainer.strategy.checkpoint_io
        path: str | None = None
        if trainer.is_global_zero:
            candidates: list[str] = []
            environment = trainer.cluster_environment
            if environment is not None:
                candidates.append(environment.preemption_checkpoint_path(trainer.default_root_dir))
            for callback in trainer.callbacks:
                listed = getattr(callback, "complete_checkpoints", None)
                if callable(listed):
                    candidates.extend(listed(io))
            found = [c for c in dict.fromkeys(candidates) if io.exists(c)]
            path = max(found, key=_written_at, default=None)
            if path is not None:
                rank_zero_info(
                    "%s(ckpt_path='auto'): resuming from %s, the newest of %d complete checkpoint(s)",
                    fn,
                    path,
                    len(found),
                )
        return trainer.strategy.broadcast(path) if trainer.world_size > 1 else path

    def load_for_fit(self, ckpt_path: str | None) -> dict[str, Any] | None:
        """Resolve ``ckpt_path`` (or the environment's resume path) and read the checkpoint, or None to start fresh.

        A job that its scheduler or launcher restarted (``ClusterEnvironment.restart_count()`` > 0:
        torchrun's elastic restarts, a requeued SLURM job) resumes as ``ckpt_path="auto"`` when no
        ``ckpt_path`` is given.
        """
        environment = self._trainer.cluster_environment
        restarts = environment.restart_count() if environment is not None else 0
        if ckpt_path is None and restarts > 0:
            path = self.ckpt_path = self.newest_checkpoint()
            if path is None:
                rank_zero_warn(
                    f"{type(environment).__name__} says this job was restarted ({restarts} time(s)), but there is no "
                    "complete checkpoint to resume from (ckpt_path='auto' looked in the ModelCheckpoint directories "
                    "and for the preemption checkpoint): training starts from the beginning."
                )
        else:
            path = self.ckpt_path = self.resolve_path(ckpt_path, "fit")
            if path is None and ckpt_path is None:
                path = self.ckpt_path = self.auto_resume_path()
            elif path is None:
                rank_zero_info("fit(ckpt_path='auto'): no complete checkpoint yet, training starts from the beginning")
        return None if path is None else check_checkpoint(self._trainer.strategy.load_checkpoint(path), path)

    def restore_for_evaluation(self, ckpt_path: str | None, fn: str) -> None:
        """Resolve ``ckpt_path`` and load the model's weights from it, for validate, test or predict."""
        path = self.ckpt_path = self.resolve_path(ckpt_path, fn)
        if path is not None:
            self.restore_model(check_checkpoint(self._trainer.strategy.load_checkpoint(path), path))


#: Lightning's ``ckpt_path`` words that torchplug does not take, and what to write instead.
_LIGHTNING_WORDS: Final = {
    "hpc": "a requeued job resumes by itself, or give ckpt_path='auto'",
    "registry": "torchplug has no model registry: give the checkpoint's path",
}


def _path_hint(ckpt_path: str) -> str:
    """The hint of a ``ckpt_path`` that names no checkpoint: a misspelt word, a Lightning word, or the choices."""
    import difflib

    if ckpt_path in _LIGHTNING_WORDS:
        return f"Hint: ckpt_path={ckpt_path!r} is Lightning's; here {_LIGHTNING_WORDS[ckpt_path]}."
    close = difflib.get_close_matches(ckpt_path, ("last", "best", "auto"), n=1)
    if close:
        return f"Hint: did you mean ckpt_path={close[0]!r}?"
    return "Hint: give the path of a checkpoint file or directory, or 'last', 'best' or 'auto'."


def _written_at(path: str) -> float:
    """When the checkpoint at ``path`` was written (seconds since the epoch); 0.0 when the filesystem cannot say."""
    from fsspec.core import url_to_fs

    try:
        fs, fs_path = url_to_fs(path)
        return float(fs.modified(fs_path).timestamp())
    except (NotImplementedError, OSError, ValueError, AttributeError):
        return 0.0


def gradients_of(module: torch.nn.Module) -> list[torch.Tensor | None]:
    """A copy of every parameter's gradient (None where there is none), in parameter order."""
    return [None if p.grad is None else p.grad.detach().clone() for p in module.parameters()]


def load_gradients(module: torch.nn.Module, gradients: list[torch.Tensor | None]) -> None:
    """Put back gradients saved by :func:`gradients_of`."""
    for param, grad in zip(module.parameters(), gradients):
        param.grad = None if grad is None else grad.to(param.device, param.dtype)


class WeightsMismatchError(CheckpointLoadError, RuntimeError):
    """A checkpoint's weights do not fit the model; a RuntimeError too, as the torch error it replaces."""


def weights_mismatch(path: str, model: str, exc: RuntimeError) -> CheckpointLoadError:
    """The error for weights of the checkpoint at ``path`` that ``load_state_dict`` of ``model`` refused (``exc``)."""
    details = "; ".join(line.strip() for line in str(exc).splitlines()[1:] if line.strip()) or str(exc)
    return WeightsMismatchError(
        f"Cannot load the checkpoint {path} into {model}: its weights do not fit the model ({details}). Hint: build "
        "the model with the settings it was saved with (`core checkpoint inspect PATH` shows its hyperparameters and "
        "shapes); strict=False skips missing and unexpected keys, not shapes that differ."
    )


def _scheduler_state(scheduler: Any) -> Any:
    state_dict = getattr(scheduler, "state_dict", None)
    if not callable(state_dict):  # accepted with a warning when the run itself saves no checkpoints
        raise MisconfigurationError(
            f"Cannot save a checkpoint: lr_scheduler={type(scheduler).__name__} has no state_dict(). Hint: give it "
            "state_dict() and load_state_dict(state), as torch's schedulers have."
        )
    return state_dict()
