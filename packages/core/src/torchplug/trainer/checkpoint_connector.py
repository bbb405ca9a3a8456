"""Writing a running Trainer's checkpoint, and restoring one so that training continues exactly.

Everything written is ``weights_only``-safe (tensors and plain data), so checkpoints load with
``torch.load(weights_only=True)``. The layout holds Lightning 2.x's keys as well as torchplug's own
(:mod:`torchplug.trainer.checkpoint_layout`), and a Lightning checkpoint is read as well as ours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from torchplug._discovery import core_version
from torchplug._errors import MisconfigurationError
from torchplug.trainer.checkpoint_layout import (
    LIGHTNING_LAYOUT_VERSION,
    LIGHTNING_VERSION_KEY,
    check_checkpoint,
    find_callback_state,
    lightning_loops,
    progress_from_lightning,
)
from torchplug.utilities.rank_zero import rank_zero_warn
from torchplug.utilities.seed import capture_rng_states

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["CHECKPOINT_FORMAT", "CheckpointConnector", "gradients_of", "load_gradients"]

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
        checkpoint["lr_schedulers"] = [config.scheduler.state_dict() for config in trainer.lr_scheduler_configs]
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
        strategy.barrier("save_checkpoint")

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
        trainer.strategy.load_module_state_dict(checkpoint["state_dict"], strict=strict)

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
            raise MisconfigurationError(
                f"{self.ckpt_path!r} holds only weights (it lacks {', '.join(map(repr, missing))}: it was saved with "
                "weights_only=True), so fit cannot resume from it. Hint: load it with Module.load_from_checkpoint(...) "
                "and start a new fit without ckpt_path."
            )
        strategy = trainer.strategy
        assert strategy.precision is not None and strategy.accelerator is not None
        saved = checkpoint["optimizer_states"]
        if len(saved) != len(trainer.optimizers):
            raise MisconfigurationError(
                f"The checkpoint has {len(saved)} optimizer states, but configure_optimizers() "
                f"returned {len(trainer.optimizers)} optimizers."
            )
        for optimizer, state in zip(trainer.optimizers, saved):
            strategy.load_optimizer_state_dict(optimizer, state)
        for config, state in zip(trainer.lr_scheduler_configs, checkpoint.get("lr_schedulers", [])):
            config.scheduler.load_state_dict(state)
        precision_key = type(strategy.precision).__qualname__
        strategy.precision.load_state_dict(checkpoint.get("precision", checkpoint.get(precision_key, {})))
        callback_states = checkpoint.get("callbacks", {})
        for callback in trainer.callbacks:
            callback.on_load_checkpoint(trainer, trainer.module, checkpoint)
            state = find_callback_state(callback_states, callback.state_key)
            if state is not None:
                callback.load_state_dict(state)
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

    def resolve_path(self, ckpt_path: str | None, fn: str) -> str | None:
        """Turn ``ckpt_path`` (a path, ``"last"``, ``"best"`` or None) into a path, with errors in the user's words."""
        if ckpt_path is None:
            return None
        trainer = self._trainer
        checkpoint_io = trainer.strategy.checkpoint_io
        if ckpt_path in ("last", "best"):
            callback = trainer.checkpoint_callback
            if callback is None:
                raise MisconfigurationError(
                    f'{fn}(ckpt_path="{ckpt_path}") needs a ModelCheckpoint callback; '
                    "none is configured. Hint: pass the checkpoint's path instead."
                )
            path = callback.best_model_path if ckpt_path == "best" else callback.find_last_checkpoint(checkpoint_io)
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
            raise FileNotFoundError(f"{fn}(ckpt_path={ckpt_path!r}): checkpoint file not found.")
        return ckpt_path

    def auto_resume_path(self) -> str | None:
        """The checkpoint the cluster environment says a restarted job resumes from (a requeued SLURM job)."""
        trainer = self._trainer
        environment = trainer.cluster_environment
        if environment is None:
            return None
        path: str | None = environment.resume_checkpoint_path(trainer.default_root_dir, trainer.strategy.checkpoint_io)
        return path

    def load_for_fit(self, ckpt_path: str | None) -> dict[str, Any] | None:
        """Resolve ``ckpt_path`` (or the environment's resume path) and read the checkpoint, or None to start fresh."""
        path = self.ckpt_path = self.resolve_path(ckpt_path, "fit") or self.auto_resume_path()
        return None if path is None else check_checkpoint(self._trainer.strategy.load_checkpoint(path), path)

    def restore_for_evaluation(self, ckpt_path: str | None, fn: str) -> None:
        """Resolve ``ckpt_path`` and load the model's weights from it, for validate, test or predict."""
        path = self.ckpt_path = self.resolve_path(ckpt_path, fn)
        if path is not None:
            self.restore_model(check_checkpoint(self._trainer.strategy.load_checkpoint(path), path))


def gradients_of(module: torch.nn.Module) -> list[torch.Tensor | None]:
    """A copy of every parameter's gradient (None where there is none), in parameter order."""
    return [None if p.grad is None else p.grad.detach().clone() for p in module.parameters()]


def load_gradients(module: torch.nn.Module, gradients: list[torch.Tensor | None]) -> None:
    """Put back gradients saved by :func:`gradients_of`."""
    for param, grad in zip(module.parameters(), gradients):
        param.grad = None if grad is None else grad.to(param.device, param.dtype)
