"""Starting one process per XLA device with torch_xla's ``xmp.spawn``; rank 0's results come back here.

After the processes finish, the caller's model holds the trained weights, and the Trainer the
metrics and checkpoint paths, as with the core's ``ddp_spawn``/``ddp_fork``.
"""

from __future__ import annotations

import os
import pickle
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

import torch
import torch.multiprocessing as mp
from typing_extensions import override

from torchplug import Launcher, MisconfigurationError

# The core's helpers that carry rank 0's state back to the caller's Trainer (shared with ddp_spawn).
from torchplug.strategies.launchers.multiprocessing import (
    collect_results,
    own_parameters,
    read_results,
    restore_results,
    results_file,
)
from torchplug.utilities.shutdown import failure_time
from torchplug_tpu import _vendor

if TYPE_CHECKING:
    from torchplug_tpu.strategy import XLAStrategy

__all__ = ["XLALauncher"]

_START_METHODS: Final = ("fork", "spawn", "forkserver")


class XLALauncher(Launcher):
    """Runs the Trainer's work in one process per XLA device, started by ``torch_xla``'s ``xmp.spawn``.

    With one device, torch_xla runs the work in this process instead (after configuring a
    one-device topology). The launching process never starts the XLA runtime: torch_xla refuses
    to spawn once it has.

    When a process fails, it records its error and exits at once; torch_xla's process pool then
    stops the others (which would otherwise wait forever in their next collective), and the
    error is raised here, with the rank that raised it.

    Args:
        strategy: The XLA strategy being launched.
        start_method: ``"fork"`` (the default: works in notebooks), ``"spawn"`` or
            ``"forkserver"``. torch_xla's process pool pickles the Trainer, model and data with any
            of them; with ``spawn`` they must also be importable in the new processes.
    """

    def __init__(self, strategy: XLAStrategy, start_method: str = "fork") -> None:
        available = [m for m in _START_METHODS if m in mp.get_all_start_methods()]
        if start_method not in available:
            raise MisconfigurationError(
                f"start_method={start_method!r} cannot start XLA processes here; choose one of {', '.join(available)}."
            )
        self.strategy = strategy
        self.start_method = start_method

    @property
    @override
    def is_interactive_compatible(self) -> bool:
        """Only ``fork`` works in a notebook (spawned processes cannot import the notebook's code)."""
        return self.start_method == "fork"

    @override
    def launch(self, function: Callable[..., Any], *args: Any, trainer: Any = None, **kwargs: Any) -> Any:
        """Run ``function`` in one process per device and return rank 0's result here."""
        xmp = _vendor.import_xla("torch_xla.distributed.xla_multiprocessing")
        if self.strategy.num_processes == 1:
            holder: list[Any] = []
            xmp.spawn(_run_here, args=(function, args, kwargs, holder), nprocs=1, start_method=self.start_method)
            return holder[0]
        with results_file("torchplug-xla-") as results_path:  # a private directory, removed afterwards
            try:
                xmp.spawn(_worker, args=(trainer, function, args, kwargs, results_path), start_method=self.start_method)
            except BaseException:
                _raise_process_error(results_path)
                raise
            output = read_results(results_path, "The rank-0 XLA process")
        if trainer is not None:
            restore_results(trainer, output)
        return output["result"]


def _run_here(
    index: int, function: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], holder: list[Any]
) -> None:
    holder.append(function(*args, **kwargs))


def _worker(
    index: int,
    trainer: Any,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    results_path: str,
) -> None:
    """One XLA process: run the work, send rank 0's results home, and exit together with the others.

    torch_xla's process pool pickles the arguments even with ``fork``, and torch sends tensors
    through shared memory: each process first takes its own copy of the weights.
    """
    try:
        if trainer is not None:
            own_parameters(trainer.module)
        result = function(*args, **kwargs)
        state_dict = trainer.strategy.module_state_dict() if trainer is not None else {}
        _vendor.sync()  # every rank runs its pending graph (it may hold collectives) before rank 0 reads tensors
        if trainer is None or trainer.is_global_zero:
            torch.save(collect_results(trainer, result, state_dict), results_path)
        _vendor.xla_model().rendezvous("torchplug_tpu.launcher.end")
    except BaseException as exc:  # record it for the launcher, then exit so that the pool stops the others
        _record_error(f"{results_path}.error-{index}", index, exc)
        os._exit(1)


def _record_error(path: str, index: int, exc: BaseException) -> None:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    # The processes share this host's clock: the first failure is the cause. The time the Trainer noted
    # comes before the on_exception hooks, which may wait in a collective that fails the other processes.
    when = failure_time(exc) or time.time()
    try:
        payload = pickle.dumps((index, exc, text, when))
    except Exception:  # an unpicklable exception: its text is enough
        payload = pickle.dumps((index, None, text, when))
    with open(path, "wb") as file:
        file.write(payload)


def _error_files(results_path: str) -> list[str]:
    directory, name = os.path.split(results_path)
    return sorted(os.path.join(directory, f) for f in os.listdir(directory) if f.startswith(f"{name}.error-"))


def _raise_process_error(results_path: str) -> None:
    """Raise the earliest recorded error of the XLA processes, naming its rank; return if none was recorded.

    The pool's own error (a process "terminated abruptly") is the consequence, so it is not chained.
    """
    files = _error_files(results_path)
    if not files:
        return
    recorded = []
    for path in files:
        with open(path, "rb") as file:
            recorded.append(pickle.loads(file.read()))  # written by our own processes just now
    # The earliest error is the cause: the others are processes that failed in a collective with it.
    index, error, text, _ = min(recorded, key=lambda record: record[3])
    note = f"Raised in XLA process {index} (of {len(files)} that failed):\n{text}"
    if isinstance(error, BaseException):
        if hasattr(error, "add_note"):
            error.add_note(note)
        raise error from None
    raise RuntimeError(f"XLA process {index} failed.\n{text}") from None
