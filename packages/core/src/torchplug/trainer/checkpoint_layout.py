"""The checkpoint layout shared with PyTorch Lightning 2.x: the keys both frameworks read, in both directions.

A torchplug checkpoint holds every key a Lightning 2.x checkpoint holds (its loop progress
counters, the precision and DataModule states under their class names, the version key that its
migrations read) beside torchplug's own, so that Lightning can resume from it; and a Lightning
checkpoint is read here by translating its loop counters into :class:`FitProgress`. Nothing here
imports Lightning: the layout is plain dictionaries.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from typing import Any, Final

from torchplug._errors import MisconfigurationError

__all__ = [
    "LIGHTNING_LAYOUT_VERSION",
    "LIGHTNING_VERSION_KEY",
    "check_checkpoint",
    "find_callback_state",
    "lightning_loops",
    "progress_from_lightning",
]

#: The key Lightning's checkpoint migrations read (they refuse a checkpoint without it).
LIGHTNING_VERSION_KEY: Final = "pytorch-lightning_version"
#: The Lightning release whose checkpoint layout torchplug writes (its loops, callbacks and state keys).
LIGHTNING_LAYOUT_VERSION: Final = "2.6.0"

#: What each use of a checkpoint needs, in the words of the error when a key is missing.
_MODEL_KEYS: Final = ("state_dict",)


def check_checkpoint(checkpoint: Any, path: str, needs: Iterable[str] = _MODEL_KEYS) -> dict[str, Any]:
    """Return ``checkpoint`` when it is a dict with every key of ``needs``, else raise naming the path and keys.

    Raises:
        MisconfigurationError: The file is no torchplug or Lightning checkpoint (not a dict, or keys missing).
    """
    if not isinstance(checkpoint, Mapping):
        raise MisconfigurationError(
            f"{path!r} is not a torchplug or Lightning checkpoint: it holds a {type(checkpoint).__name__}, not a "
            "dict of checkpoint entries. Hint: pass the .ckpt file written by trainer.save_checkpoint() or "
            "ModelCheckpoint."
        )
    missing = [key for key in needs if key not in checkpoint]
    if missing:
        found = ", ".join(map(repr, list(checkpoint)[:8])) + (", ..." if len(checkpoint) > 8 else "")
        raise MisconfigurationError(
            f"{path!r} is not a torchplug or Lightning checkpoint: it lacks the key(s) {', '.join(map(repr, missing))} "
            f"(it holds {found or 'nothing'}). Hint: pass the .ckpt file written by trainer.save_checkpoint() or "
            "ModelCheckpoint; a file of weights alone loads with module.load_state_dict(torch.load(path))."
        )
    return dict(checkpoint)


def find_callback_state(states: Mapping[str, Any], state_key: str) -> Any:
    """The state saved for the callback whose key is ``state_key``, or None.

    The exact key wins. Otherwise a key of the same class whose settings agree on every setting
    both keys name is taken: Lightning's keys name settings that torchplug's may not, and older
    torchplug checkpoints named fewer (``ModelCheckpoint{'monitor': ...}``).
    """
    if state_key in states:
        return states[state_key]
    name, settings = _split_state_key(state_key)
    if settings is None:
        return None
    for key, state in states.items():
        other_name, other = _split_state_key(key)
        if other_name == name and other is not None:
            common = settings.keys() & other.keys()
            if common and all(settings[k] == other[k] for k in common):
                return state
    return None


def _split_state_key(key: str) -> tuple[str, dict[str, Any] | None]:
    brace = key.find("{")
    if brace < 0:
        return key, None
    try:
        settings = ast.literal_eval(key[brace:])
    except (ValueError, SyntaxError):
        return key, None
    return key[:brace], settings if isinstance(settings, dict) else None


# -- torchplug -> Lightning -------------------------------------------------------------------


def _counts(value: int, *, ready: int | None = None, started: int | None = None, processed: int | None = None,
            completed: int | None = None) -> dict[str, int]:  # fmt: skip
    return {
        "ready": value if ready is None else ready,
        "started": value if started is None else started,
        "processed": value if processed is None else processed,
        "completed": value if completed is None else completed,
    }


def _progress(current: dict[str, int], total: dict[str, int], **extra: Any) -> dict[str, Any]:
    return {"total": total, "current": current, **extra}


def _eval_loop(is_last: bool = False) -> dict[str, Any]:
    zero = _counts(0)
    return {"state_dict": {}, "batch_progress": _progress(dict(zero), dict(zero), is_last_batch=is_last)}


def lightning_loops(fit: Mapping[str, Any], batches_per_epoch: float, accumulate: int) -> dict[str, Any]:
    """Lightning's ``loops`` entries for the fit position ``fit`` (a :class:`FitProgress` state).

    The counters are the ones Lightning writes at the same point of its own loop: at an epoch's end
    (ModelCheckpoint in ``on_train_epoch_end``), after a batch (``on_train_batch_end``, before the
    validation due after it), after that validation, or between epochs. Lightning resumes such a
    checkpoint at the same epoch, batch and global step.

    Args:
        fit: The loop position, as ``FitLoop.state_dict()`` returns it.
        batches_per_epoch: Training batches per epoch (``inf`` for an unsized loader).
        accumulate: Batches per optimizer step.
    """
    epoch, batches, total = int(fit["epoch"]), int(fit["batches_done"]), int(fit["total_batches"])
    global_step = int(fit["global_step"])
    if fit["epoch_finished"]:  # written by the epoch-end hooks: processed, not yet completed
        epochs = _counts(epoch + 1, completed=epoch)
        current, totals = _counts(batches), _counts(total)
    elif batches == 0:  # between epochs
        epochs = _counts(epoch)
        current, totals = _counts(0), _counts(total)
    elif not fit["tail_done"]:  # after a batch's end hooks, before what follows it (validation when due)
        epochs = _counts(epoch + 1, processed=epoch, completed=epoch)
        current, totals = _counts(batches, completed=batches - 1), _counts(total, completed=total - 1)
    else:  # after the work that follows a batch
        epochs = _counts(epoch + 1, processed=epoch, completed=epoch)
        current, totals = _counts(batches), _counts(total)
    is_last = batches >= batches_per_epoch
    steps_in_epoch = 0 if batches == 0 else min(global_step, -(-batches // max(accumulate, 1)))
    step = {
        "total": {"ready": global_step, "completed": global_step},
        "current": {"ready": steps_in_epoch, "completed": steps_in_epoch},
    }
    zero_grad = {
        "total": {"ready": global_step, "started": global_step, "completed": global_step},
        "current": {"ready": steps_in_epoch, "started": steps_in_epoch, "completed": steps_in_epoch},
    }
    no_steps = {"total": {"ready": 0, "completed": 0}, "current": {"ready": 0, "completed": 0}}
    fit_loop = {
        "state_dict": {},
        "epoch_progress": _progress(epochs, dict(epochs)),
        "epoch_loop.state_dict": {"_batches_that_stepped": int(fit["stepped_batches"])},
        "epoch_loop.batch_progress": _progress(current, totals, is_last_batch=is_last),
        "epoch_loop.scheduler_progress": dict(no_steps),
        "epoch_loop.automatic_optimization.state_dict": {},
        "epoch_loop.automatic_optimization.optim_progress": {"optimizer": {"step": step, "zero_grad": zero_grad}},
        "epoch_loop.manual_optimization.state_dict": {},
        "epoch_loop.manual_optimization.optim_step_progress": step,
        "epoch_loop.val_loop.state_dict": {},
        "epoch_loop.val_loop.batch_progress": _eval_loop()["batch_progress"],
    }
    return {
        "fit_loop": fit_loop,
        "validate_loop": _eval_loop(),
        "test_loop": _eval_loop(),
        "predict_loop": _eval_loop(),
    }


# -- Lightning -> torchplug -------------------------------------------------------------------


def progress_from_lightning(
    fit_loop: Mapping[str, Any], global_step: int, batches_per_epoch: float, accumulate: int
) -> dict[str, Any]:
    """The :class:`FitProgress` state of a Lightning checkpoint's ``loops["fit_loop"]``.

    Resumes where Lightning itself would: a checkpoint written by the epoch-end hooks continues
    with the next epoch; one written after a batch continues with the next batch, and the
    validation that was due after that batch is not run again (Lightning skips it too). A
    Lightning checkpoint has no random state, so the data order after a mid-epoch resume is a
    new one (torchplug skips the batches already seen).

    Raises:
        MisconfigurationError: The loop state lacks Lightning's progress counters.
    """
    try:
        epochs = fit_loop["epoch_progress"]["current"]
        batch = fit_loop["epoch_loop.batch_progress"]
        stepped = int(fit_loop.get("epoch_loop.state_dict", {}).get("_batches_that_stepped", 0))
        current, totals = batch["current"], batch["total"]
        epoch = int(epochs["completed"])
        finished = int(epochs["processed"]) > epoch
        mid_epoch = not finished and int(epochs["started"]) > int(epochs["processed"])
        done = int(current["processed"]) if (finished or mid_epoch) else 0
        if mid_epoch and int(current["completed"]) < done:  # written in on_train_batch_end: that batch counts
            last = done >= batches_per_epoch
            stepped += 1 if (done % max(accumulate, 1) == 0 or last) else 0
    except (KeyError, TypeError, ValueError) as exc:
        raise MisconfigurationError(
            f"The checkpoint's loops['fit_loop'] lacks Lightning's progress counters ({exc!r} is missing or not a "
            "number), so fit cannot tell where to resume."
        ) from exc
    return {
        "epoch": epoch,
        "global_step": int(global_step),
        "batches_done": done,
        "tail_done": True,
        "epoch_finished": finished,
        "epoch_rng": None,
        "total_batches": int(totals["processed"]),
        "stepped_batches": stepped,
        "should_stop": False,
    }
