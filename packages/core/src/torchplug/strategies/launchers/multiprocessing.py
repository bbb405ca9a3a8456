"""Starting worker processes with ``spawn`` or ``fork``; rank 0's results come back to the caller.

Workers start from the caller's random state (as forked ones do anyway), so a run gives the same
result whichever way its processes start. After the workers finish, the caller's model holds the
trained weights, and the Trainer the metrics and checkpoint paths, as if training had run in the
calling process.

:func:`own_parameters`, :func:`collect_results` and :func:`restore_results` are the steps of that
hand-back. They are public so that a vendor's launcher that starts its own workers (torch_xla's
``xmp.spawn`` in ``accel-tpu``, for example) returns the same state to its caller.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import torch
import torch.multiprocessing as mp
from torch.multiprocessing.spawn import ProcessExitedException, start_processes
from typing_extensions import override

from torchplug._errors import MisconfigurationError, TrainingInterrupted
from torchplug.strategies.launcher import Launcher
from torchplug.utilities.distributed import explain_stall
from torchplug.utilities.rank_zero import log
from torchplug.utilities.seed import capture_rng_states, restore_rng_states
from torchplug.utilities.shutdown import (
    describe_exit,
    exit_code,
    is_signal_exit,
    kill_children_now,
    off_kill,
    on_kill,
)

if TYPE_CHECKING:
    from torchplug.strategies.parallel import ParallelStrategy

#: Seconds the workers get to end by themselves after a signal was passed on to them.
_WIND_DOWN_S = 60.0

__all__ = [
    "MultiProcessingLauncher",
    "collect_results",
    "own_parameters",
    "read_results",
    "restore_results",
    "results_file",
]


class MultiProcessingLauncher(Launcher):
    """Runs the Trainer's work in ``num_processes`` workers started with ``spawn`` or ``fork``.

    The calling process only waits: it joins no process group and touches no device. When a
    worker raises, torch stops the others and the error is raised here as torch's
    ``ProcessRaisedException``, whose message names the worker and holds its traceback.

    Args:
        strategy: The parallel strategy being launched.
        start_method: ``"spawn"`` (model and data must pickle), ``"fork"`` (works in notebooks,
            not on Windows) or ``"forkserver"``.
    """

    def __init__(self, strategy: ParallelStrategy, start_method: str = "spawn") -> None:
        if start_method not in mp.get_all_start_methods():
            raise MisconfigurationError(
                f"start_method={start_method!r} is not available on this platform "
                f"(available: {', '.join(mp.get_all_start_methods())}). Hint: use strategy='ddp_spawn'."
            )
        self.strategy = strategy
        self.start_method = start_method

    @property
    @override
    def is_interactive_compatible(self) -> bool:
        """Only ``fork`` works in a notebook (spawned workers cannot import the notebook's code)."""
        return self.start_method == "fork"

    @override
    def launch(self, function: Callable[..., Any], *args: Any, trainer: Any = None, **kwargs: Any) -> Any:
        """Start the workers, run ``function`` in each, and return the first worker's result here.

        With ``trainer``, the caller's Trainer and model then hold that worker's state (see
        :func:`restore_results`).
        """
        env = self.strategy.cluster_environment
        assert env is not None
        env.validate_settings(self.strategy.num_processes, self.strategy.num_nodes)
        if env.creates_processes_externally:  # already inside a worker (or under torchrun): just run
            return function(*args, **kwargs)
        rendezvous = {
            "MASTER_ADDR": env.main_address,
            "MASTER_PORT": str(env.main_port),
            "NODE_RANK": str(env.node_rank()),
        }
        # The first worker writes its results to a file: tensors sent through a queue would reference
        # shared memory owned by a worker that has exited by the time they are read.
        with results_file("torchplug-workers-") as results_path:
            worker_args = (trainer, function, args, kwargs, results_path, rendezvous, capture_rng_states())
            nprocs, method = self.strategy.num_processes, self.start_method
            context = start_processes(_worker, args=worker_args, nprocs=nprocs, start_method=method, join=False)
            _join(context)
            output = read_results(results_path, "The first worker")
        if trainer is not None:
            restore_results(trainer, output)
        return output["result"]


def _join(context: Any) -> None:
    """Wait for the workers; SIGINT or SIGTERM to this process is passed on to them (the first; a second kills them).

    The workers stop together at a step boundary, write the interruption checkpoint and exit with
    130 or 143; this process then raises :class:`~torchplug.TrainingInterrupted` (already handled).
    """
    forwarder = _Forwarder([int(process.pid) for process in context.processes])
    forwarder.install()
    try:
        while not context.join(timeout=0.5, grace_period=_WIND_DOWN_S if forwarder.signum is not None else None):
            pass
    except ProcessExitedException as exc:
        if forwarder.signum is None or not is_signal_exit(exc.exit_code):
            # Worded as the ddp launcher words it: torch's join has already stopped the other workers.
            # Without torch's exception chained: it says the same (rank, signal) with a traceback of
            # torch's own join loop, which is all a user would see of it.
            failure = describe_exit(exc.error_index, exc.error_pid, exc.exit_code)
            raise ChildProcessError(f"{failure}; the other ranks were stopped.") from None
        raise _interrupted(forwarder.signum) from None
    finally:
        forwarder.uninstall()
    if forwarder.signum is not None:  # the workers had finished their work when the signal came
        raise _interrupted(forwarder.signum)


def _interrupted(signum: int) -> TrainingInterrupted:
    stop = TrainingInterrupted(f"fit() stopped by {signal.Signals(signum).name} in its workers.", signum, -1)
    stop.handled = True  # the workers ran the exception hooks (the checkpoint, the loggers)
    return stop


class _Forwarder:
    """SIGINT/SIGTERM handlers of the process that waits for spawned workers: pass the signal on to them."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids
        self.owner = os.getpid()
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        on_kill(self._kill)
        if threading.current_thread() is not threading.main_thread():
            return
        for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
            if signal.getsignal(signum) is default:
                self._previous[signum] = signal.signal(signum, self._handle)

    def uninstall(self) -> None:
        off_kill(self._kill)
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            signal.signal(signum, handler)

    def _kill(self) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def _handle(self, signum: int, frame: Any) -> None:
        if os.getpid() != self.owner:  # a forked worker before it installed its own handlers
            raise KeyboardInterrupt
        name = signal.Signals(signum).name
        if self.signum is not None:
            os.write(2, f"torchplug: {name} again: stopping the workers now, without a checkpoint.\n".encode())
            kill_children_now()
            os._exit(exit_code(signum))
        self.signum = signum
        os.write(2, f"torchplug: {name} received: passed on to the workers (send it again to stop at once).\n".encode())
        for pid in self.pids:
            try:
                os.kill(pid, signum)
            except OSError:  # exited meanwhile
                pass


def _worker(
    local_rank: int,
    trainer: Any,
    function: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    results_path: str,
    rendezvous: dict[str, str],
    rng: dict[str, Any],
) -> None:
    # A process group of its own: a terminal's Ctrl+C reaches only the caller, which passes it on, once.
    os.setpgid(0, 0)
    for signum, default in ((signal.SIGINT, signal.default_int_handler), (signal.SIGTERM, signal.SIG_DFL)):
        signal.signal(signum, default)  # a forked worker inherits the caller's forwarding handlers
    os.environ.update(rendezvous, LOCAL_RANK=str(local_rank))
    restore_rng_states(rng)  # a spawned worker starts with fresh generators: continue from the caller's
    if trainer is not None:
        own_parameters(trainer.module)
    try:
        result = function(*args, **kwargs)
    except TrainingInterrupted as stop:  # torch's worker wrapper would take a KeyboardInterrupt for a clean exit
        raise SystemExit(exit_code(stop.signum)) from None
    except Exception as error:
        stall = explain_stall(error, int(os.environ.get("RANK", local_rank)), _world_size(trainer))
        if stall is not None:  # a peer never reached a collective: say which, and where it was
            raise stall from error
        raise
    # Gathered on every rank: for sharded strategies (FSDP) this is a collective; rank 0 gets the full dict.
    state_dict = trainer.strategy.module_state_dict() if trainer is not None else {}
    # Each node's caller waits for its own first worker (global rank 0 on the first node).
    if local_rank == 0:
        torch.save(collect_results(trainer, result, state_dict), results_path)


@contextlib.contextmanager
def results_file(prefix: str = "torchplug-results-") -> Iterator[str]:
    """A path for a worker's results, in a new private directory (mode 0700) removed afterwards.

    Only this user can read or replace the file, so what the caller loads from it is what its
    worker wrote.

    Args:
        prefix: The start of the directory's name (under the system's temporary directory).
    """
    directory = tempfile.mkdtemp(prefix=prefix)
    try:
        yield os.path.join(directory, "results.pt")
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def read_results(path: str, writer: str = "The worker") -> Any:
    """Load what a worker saved with ``torch.save(collect_results(...), path)``.

    Loaded with ``weights_only=True`` (tensors and plain data, as the Trainer's state is). When a
    result holds other objects (a ``predict_step`` returning instances of your classes), the safe
    loader refuses them and the file, this run's own in a private directory, is loaded in full; the
    log says so.

    Raises:
        RuntimeError: The worker wrote nothing (it exited before the end of its work).
    """
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        raise RuntimeError(f"{writer} finished without writing its results.")
    try:
        return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as exc:
        reason = next((line for line in str(exc).splitlines() if "GLOBAL" in line), str(exc).splitlines()[0])
        log.info("the workers' results hold objects a weights-only load refuses (%s); loading them in full", reason)
        return torch.load(path, weights_only=False)  # this run's own file, in a directory only we can write


def _world_size(trainer: Any) -> int:
    return int(trainer.world_size) if trainer is not None else 0


def own_parameters(module: torch.nn.Module) -> None:
    """Give this worker its own copy of ``module``'s parameters and buffers; call it first thing in a worker.

    ``torch.multiprocessing`` sends tensors to workers through shared memory, so without this every
    worker (and the caller) would update the same weights.
    """
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            tensor.data = tensor.data.clone()


def collect_results(trainer: Any, result: Any, state_dict: dict[str, Any]) -> dict[str, Any]:
    """What a worker sends back to its caller: ``function``'s ``result`` and the Trainer's state.

    Call it in the worker after the Trainer's work returned, and save the dict with ``torch.save``
    for the caller to pass to :func:`restore_results`.

    Args:
        trainer: The worker's Trainer, or None when the launch was not for a Trainer.
        result: What the launched function returned.
        state_dict: The module's full state dict (``trainer.strategy.module_state_dict()``, which
            sharded strategies gather on global rank 0 only; every rank must call it). Empty when
            this worker holds no full copy: the caller then keeps its weights.

    Returns:
        A dict of plain data and CPU tensors: the result, the weights, the loop progress, every
        callback's state, the metrics and ``should_stop``.
    """
    if trainer is None:
        return {"result": result}
    return {
        "result": result,
        "state_dict": {k: v.detach().cpu() for k, v in state_dict.items()},
        "progress": trainer.fit_loop.progress.state_dict(),
        "callbacks": {cb.state_key: cb.state_dict() for cb in trainer.callbacks},
        "callback_metrics": {k: float(v) for k, v in trainer.callback_metrics.items()},
        "logged_metrics": {k: float(v) for k, v in trainer.logged_metrics.items()},
        "should_stop": trainer.should_stop,
    }


def restore_results(trainer: Any, results: dict[str, Any]) -> None:
    """In the caller, make ``trainer`` and its module hold what a worker's :func:`collect_results` returned.

    Afterwards ``trainer.global_step``, ``callback_metrics``, ``logged_metrics``, the callbacks'
    state (``trainer.checkpoint_callback.best_model_path``...) and the module's weights are the
    worker's, as if the work had run in the caller.
    """
    module = trainer.module
    if results["state_dict"]:
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        module.load_state_dict({k: v.to(device) for k, v in results["state_dict"].items()})
    trainer.fit_loop.progress.load_state_dict(results["progress"])
    for callback in trainer.callbacks:
        if callback.state_key in results["callbacks"]:
            callback.load_state_dict(results["callbacks"][callback.state_key])
    trainer.callback_metrics.update({k: torch.tensor(v) for k, v in results["callback_metrics"].items()})
    trainer.logged_metrics.update({k: torch.tensor(v) for k, v in results["logged_metrics"].items()})
    trainer.should_stop = results["should_stop"]
