"""Re-running the user's script once per extra local rank, as ``torchrun`` does.

Rank 0 is the original process. It watches its children: when one fails, the others are stopped
and rank 0 raises an error that names the failed rank (and the child's error, which a failing
child leaves in a note for rank 0 before it exits). Each child watches its parent and exits when
rank 0 disappears. Either way no process is left waiting for a peer that is gone.
"""

from __future__ import annotations

import atexit
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, Final

from typing_extensions import override

from torchplug._errors import MisconfigurationError, TrainingInterrupted
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.strategies.launcher import Launcher
from torchplug.utilities.distributed import explain_stall
from torchplug.utilities.env_vars import env_float, env_int
from torchplug.utilities.rank_zero import log
from torchplug.utilities.shutdown import describe_exit, is_signal_exit, on_kill, stopping

__all__ = ["FAILURE_TIMEOUT_ENV", "SubprocessScriptLauncher"]

#: Seconds rank 0 waits, after a child failed, for its own error before it exits anyway (default 30).
FAILURE_TIMEOUT_ENV: Final = "TORCHPLUG_RANK_FAILURE_TIMEOUT"
_PARENT_ENV: Final = "TORCHPLUG_PARENT_PID"
#: The file descriptor (a pipe to rank 0) on which a child that fails writes a note of its error.
_NOTE_FD_ENV: Final = "TORCHPLUG_FAILURE_NOTE_FD"
#: Seconds rank 0, having failed, waits for news of a child (a note or its exit) before stopping them all:
#: a child killed outright is usually still exiting when rank 0's collective reports the lost connection.
_CHILD_EXIT_GRACE: Final = 2.0
#: Seconds rank 0, stopped by a signal, lets its children take to end by themselves (they stopped with it).
_WIND_DOWN_S: Final = 60.0


def script_command() -> list[str]:
    """The command line that started this process, runnable again in a child."""
    if not sys.argv or sys.argv[0] in ("", "-"):
        raise MisconfigurationError(
            "strategy='ddp' re-runs your script for the other ranks, but this process has no script "
            "(an interactive session or stdin). Hint: use strategy='ddp_fork' or 'ddp_spawn', or launch with torchrun."
        )
    args = list(sys.orig_argv[1:])
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if main_file and sys.argv[0] in args:  # a script path (with -m, argv[0] is not in the command line)
        args[args.index(sys.argv[0])] = os.path.abspath(main_file)  # immune to a later os.chdir
    return [sys.executable, *args]


class _Children:
    """The processes this process started (one set per process, shared by every Trainer in it)."""

    def __init__(self) -> None:
        self.processes: dict[int, subprocess.Popen[bytes]] = {}
        #: What went wrong with the first child that failed by itself, once one did.
        self.failure: str | None = None
        #: Set once the children are being stopped by us: exit codes from then on are not failures.
        self.stopped = False
        #: Set once rank 0 raised the failure as an error: the watchdog and ``join`` leave the exit to it.
        self.reported = False
        self._note_pipes: dict[int, int] = {}  # local rank -> the reading end of its note pipe
        self._notes: dict[int, str] = {}
        self._lock = threading.Lock()
        #: Seconds rank 0 may take to stop after a child failed (``TORCHPLUG_RANK_FAILURE_TIMEOUT``).
        self.failure_timeout = 30.0

    def start(self, command: list[str], ranks: range, environ: dict[str, str]) -> None:
        # Read and checked here, in the main thread, before any child starts: the watchdog only uses it.
        self.failure_timeout = failure_timeout()
        for local_rank in ranks:
            read, write = os.pipe()
            os.set_blocking(read, False)
            env = {**environ, "LOCAL_RANK": str(local_rank), _PARENT_ENV: str(os.getpid()), _NOTE_FD_ENV: str(write)}
            try:
                self.processes[local_rank] = subprocess.Popen(command, env=env, cwd=os.getcwd(), pass_fds=(write,))
            finally:
                os.close(write)
            self._note_pipes[local_rank] = read
        threading.Thread(target=self._watch, name="torchplug-rank-monitor", daemon=True).start()
        atexit.register(self.join)
        on_kill(self.kill_now)

    def _note(self, rank: int) -> str | None:
        """The error child ``rank`` reported before exiting, if it did."""
        if rank not in self._notes and rank in self._note_pipes:
            try:
                data = os.read(self._note_pipes[rank], 4096)
            except (BlockingIOError, OSError):
                return None
            if data:
                self._notes[rank] = data.decode("utf-8", "replace")
        return self._notes.get(rank)

    def _record_failure(self, read_notes: bool = False) -> bool:
        """Note the first child that failed by itself; True when there is one (or was).

        A child has failed when it exited non-zero, or (with ``read_notes``) when it left a note of
        the error it is exiting with.
        """
        with self._lock:
            if self.failure is None and not self.stopped:
                for rank, proc in self.processes.items():
                    code = proc.poll()
                    if stopping() and is_signal_exit(code):
                        continue  # it stopped at the step every rank agreed on, after a signal
                    note = self._note(rank) if read_notes or code not in (None, 0) else None
                    if code in (None, 0) and note is None:
                        continue
                    self.failure = f"{describe_exit(rank, proc.pid, code)}; the other ranks were stopped."
                    self.failure += f" Its error: {note}" if note else ""
                    break
            return self.failure is not None

    def _all_exited(self) -> bool:
        return all(proc.poll() is not None for proc in self.processes.values())

    def _watch(self) -> None:
        while not self._record_failure():
            if self.stopped or all(proc.poll() == 0 for proc in self.processes.values()):
                return
            time.sleep(0.2)
        log.error("%s", self.failure)
        self.terminate()
        timeout = self.failure_timeout
        time.sleep(timeout)  # rank 0 normally fails by itself first (its collectives lose their peer)
        if self.reported:  # it did, and raised the failure: the program decides what happens next
            return
        print(
            f"torchplug: {self.failure}\ntorchplug: rank 0 did not stop within {timeout:g} s of that failure "
            f"(set {FAILURE_TIMEOUT_ENV} to wait longer); exiting.",
            file=sys.stderr,
        )
        os._exit(1)

    def stop_after_error(self, grace: float = _CHILD_EXIT_GRACE) -> str | None:
        """Rank 0 failed: wait up to ``grace`` seconds for a child that failed first, then stop every child.

        Returns:
            The failure of a child that exited non-zero by itself (then rank 0's error was only a
            consequence, such as a collective that lost its peer), or None when rank 0 failed first.
        """
        deadline = time.monotonic() + grace
        while not self._record_failure(read_notes=True) and not self._all_exited() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.terminate()
        return self.failure

    def kill_now(self) -> None:
        """SIGKILL every child at once, taking no lock (a second signal calls it from its handler)."""
        for proc in list(self.processes.values()):
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except OSError:  # exited already
                pass

    def wind_down(self, grace: float = _WIND_DOWN_S) -> None:
        """After a stop by signal: wait up to ``grace`` seconds for the children to end by themselves, then stop them.

        They stopped at the same step as this process and write nothing of their own, but they
        leave the process group in step with it.
        """
        deadline = time.monotonic() + grace
        while not self._all_exited() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.terminate()

    def terminate(self, signum: int = signal.SIGTERM) -> None:
        """Stop every child still running: ``signum`` first, SIGKILL after 5 seconds."""
        with self._lock:
            self.stopped = True
            running = [p for p in self.processes.values() if p.poll() is None]
            for proc in running:
                proc.send_signal(signum)
            deadline = time.monotonic() + 5
            for proc in running:
                try:
                    proc.wait(max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()

    def join(self) -> None:
        """At exit: wait for the children; exit non-zero if one failed and rank 0 did not raise it."""
        for proc in self.processes.values():
            proc.wait()
        for fd in self._note_pipes.values():
            os.close(fd)
        self._note_pipes.clear()
        if self.reported or (self.stopped and self.failure is None):
            return  # rank 0 raised the error itself (and its children were stopped on purpose)
        failed = {
            r: p.returncode
            for r, p in self.processes.items()
            if p.returncode and not (stopping() and is_signal_exit(p.returncode))
        }
        if failed and self.failure is None:
            self.failure = f"Local rank(s) {sorted(failed)} exited with code(s) {sorted(failed.values())}."
        if self.failure is not None:
            print(f"torchplug: {self.failure}", file=sys.stderr)
            sys.stdout.flush()
            os._exit(1)


_CHILDREN = _Children()


def failure_timeout() -> float:
    """``TORCHPLUG_RANK_FAILURE_TIMEOUT`` in seconds (default 30).

    Raises:
        SettingsError: The value is not a number >= 0.
    """
    return env_float(FAILURE_TIMEOUT_ENV, 30.0, minimum=0.0)


def _leave_note(exc: BaseException) -> None:
    """In a child started by rank 0: tell rank 0 which error this rank is about to exit with."""
    fd = os.environ.pop(_NOTE_FD_ENV, None)  # one note: the first error is the one that matters
    if fd is None:
        return
    message = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {message[0][:300]}" if message else type(exc).__name__
    try:
        os.write(int(fd), text.encode("utf-8")[:4000])  # one write below PIPE_BUF: all or nothing
    except (OSError, ValueError):  # rank 0 is gone: nobody to tell
        pass


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    rank = os.environ.get("LOCAL_RANK", "?")
    print(f"torchplug: local rank {rank}: rank 0 (pid {parent}) exited; stopping.", file=sys.stderr)
    os._exit(1)


_WATCHING_PARENT = False


class SubprocessScriptLauncher(Launcher):
    """Starts local ranks 1..N-1 by running this process's command line again (rank 0 is this process).

    Args:
        cluster_environment: Supplies the rendezvous address, port and node rank.
        num_processes: Processes per node.
        num_nodes: Number of nodes (run the same command on every node with ``NODE_RANK`` set).
    """

    @property
    @override
    def is_interactive_compatible(self) -> bool:
        """False: it re-runs the script, and a notebook or REPL has none to re-run."""
        return False

    def __init__(self, cluster_environment: ClusterEnvironment, num_processes: int, num_nodes: int) -> None:
        self.cluster_environment = cluster_environment
        self.num_processes = num_processes
        self.num_nodes = num_nodes

    @override
    def launch(self, function: Callable[..., Any], *args: Any, trainer: Any = None, **kwargs: Any) -> Any:
        """Start the other ranks (once per process), then run ``function`` here as rank 0."""
        env = self.cluster_environment
        env.validate_settings(self.num_processes, self.num_nodes)  # devices=/num_nodes= against a scheduler's
        if not env.creates_processes_externally:
            self._start_children()
        else:
            self._watch_parent_once()
        try:
            return function(*args, **kwargs)
        except Exception as error:
            stall = explain_stall(error, env.global_rank(), env.world_size())  # a peer never reached a collective
            exc = error if stall is None else stall
            if stall is not None:
                stall.__cause__ = error
            if env.creates_processes_externally:
                _leave_note(exc)  # before the process group closes, so rank 0 learns why its peer left
            failure = _CHILDREN.stop_after_error()
            if failure is not None:
                _CHILDREN.reported = True
                raise ChildProcessError(failure) from exc
            if stall is not None:
                raise stall from error
            raise
        except TrainingInterrupted:  # every rank stopped at the same step after a signal: let them finish
            _CHILDREN.wind_down()
            raise
        except BaseException:  # KeyboardInterrupt, SystemExit: stop the children at once
            _CHILDREN.terminate()
            raise

    def _start_children(self) -> None:
        env = self.cluster_environment
        command = script_command()
        shared = {"MASTER_ADDR": env.main_address, "MASTER_PORT": str(env.main_port), "NODE_RANK": str(env.node_rank())}
        # Later Trainers in this process must join the same group instead of launching again.
        os.environ.update(shared, LOCAL_RANK="0")
        log.info("launching local ranks 1..%d: %s", self.num_processes - 1, " ".join(command))
        _CHILDREN.start(command, range(1, self.num_processes), dict(os.environ))

    @staticmethod
    def _watch_parent_once() -> None:
        global _WATCHING_PARENT
        parent = env_int(_PARENT_ENV, None, minimum=1)  # set by rank 0's launcher; checked before use
        env_int(_NOTE_FD_ENV, None, minimum=0)
        if parent is None or _WATCHING_PARENT:
            return
        _WATCHING_PARENT = True
        threading.Thread(target=_watch_parent, args=(parent,), name="torchplug-parent-watch", daemon=True).start()

    @override
    def kill(self, signum: int) -> None:
        """Send ``signum`` to every child."""
        _CHILDREN.terminate(signum)
