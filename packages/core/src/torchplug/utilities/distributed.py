"""Joining the process group, once per process, within bounded times and with errors that name the rank at fault.

Two waits bound every multi-process run, each set by a variable (seconds, checked where read):

* ``TORCHPLUG_JOIN_TIMEOUT`` (default 300): how long the processes wait for each other to join.
  Every rank records itself in the rendezvous store; one that never arrives (``num_nodes=2``
  started on one machine, a node that did not start) is named, with its node, when the time is
  up. While waiting, rank 0 says every 30 seconds whom it waits for.
* ``TORCHPLUG_COLLECTIVE_TIMEOUT`` (default 600): how long a collective (an all-reduce, a barrier)
  waits for the other ranks, unless the strategy was given ``timeout=``. Torch's own default is
  30 minutes. A rank that hangs mid-training makes the others' collective fail after this time,
  with an error that says where each rank's main thread was (every rank reports it to the
  rendezvous store every few seconds), naming the rank that never reached the collective.
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, Final

import torch.distributed as dist
from torch._C._distributed_c10d import PrefixStore, Store, TCPStore
from torch.distributed.rendezvous import rendezvous
from typing_extensions import override

from torchplug._errors import MisconfigurationError, TorchplugError
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.utilities.env_vars import env_float
from torchplug.utilities.rank_zero import log

__all__ = [
    "COLLECTIVE_TIMEOUT_ENV",
    "JOIN_TIMEOUT_ENV",
    "JoinTimeoutError",
    "RankStallError",
    "collective_timeout",
    "explain_stall",
    "init_process_group",
    "rendezvous_store",
]

JOIN_TIMEOUT_ENV: Final = "TORCHPLUG_JOIN_TIMEOUT"
COLLECTIVE_TIMEOUT_ENV: Final = "TORCHPLUG_COLLECTIVE_TIMEOUT"

#: Seconds the exit handler waits, without the GIL, when the process group outlives its destruction.
_SETTLE_S: Final = 0.2
#: Seconds between two reports of where this rank's main thread is.
_REPORT_EVERY_S: Final = 2.0
#: Seconds between two "still waiting for rank N" messages while joining.
_WAITING_NOTE_EVERY_S: Final = 30.0


class JoinTimeoutError(TorchplugError, TimeoutError):
    """Some ranks did not join the process group within ``TORCHPLUG_JOIN_TIMEOUT`` seconds; the message names them."""


class RankStallError(TorchplugError, TimeoutError):
    """A collective timed out because a rank never reached it; the message names it and where it was.

    The collective's own error is chained.
    """


def collective_timeout() -> timedelta:
    """``TORCHPLUG_COLLECTIVE_TIMEOUT`` (seconds, default 600) as a timedelta.

    Raises:
        SettingsError: The value is not a number > 0.
    """
    seconds = env_float(COLLECTIVE_TIMEOUT_ENV, 600.0, minimum=0.001)
    return timedelta(seconds=seconds)


def _join_timeout() -> float:
    return env_float(JOIN_TIMEOUT_ENV, 300.0, minimum=0.001)


def _format_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# The store of this process's rendezvous (None before the process group is joined through here).
_STORE: list[Store] = []
# The collective timeout of the process group joined here, in seconds.
_TIMEOUT_S: list[float] = []
# The reporter threads running in this process.
_REPORTERS: list[_RankReporter] = []


def rendezvous_store() -> Store | None:
    """The key-value store every rank of this process group shares (under a ``torchplug/`` prefix), if joined here."""
    return _STORE[0] if _STORE else None


def init_process_group(
    environment: ClusterEnvironment, backend: str, timeout: timedelta, processes_per_node: int | None = None
) -> None:
    """Join the default process group described by ``environment`` (a no-op when already joined).

    The group lives until the process exits, so ``fit`` followed by ``test`` in one script reuses it.

    Args:
        environment: Gives the world size, this process's rank and the rendezvous address.
        backend: The process-group backend (``"gloo"``, ``"nccl"``...).
        timeout: How long a collective waits for the other ranks.
        processes_per_node: Ranks per node, to name a missing rank's node (optional).

    Raises:
        MisconfigurationError: The group already exists with another world size or backend.
        JoinTimeoutError: Some ranks did not join within ``TORCHPLUG_JOIN_TIMEOUT`` seconds.
    """
    world_size, rank = environment.world_size(), environment.global_rank()
    if dist.is_initialized():
        if dist.get_world_size() != world_size or dist.get_rank() != rank:
            raise MisconfigurationError(
                f"A process group of world size {dist.get_world_size()} (rank {dist.get_rank()}) already exists, but "
                f"this Trainer needs world size {world_size} (rank {rank}). Hint: use the same devices= and "
                "num_nodes= for every Trainer in one script."
            )
        return
    if not dist.is_available():
        raise MisconfigurationError("This torch build has no torch.distributed; use a single-device strategy.")
    join_timeout = _join_timeout()
    host, port = environment.main_address, environment.main_port
    address = f"{_format_host(host)}:{port}"
    log.info("rank %d/%d joining the %s process group at %s", rank, world_size, backend, address)
    store = _connect(host, port, rank, world_size, join_timeout)
    restarts = environment.restart_count()
    if restarts > 0:
        # A restarted job may meet in the store of its first run (torchrun's agent keeps its store and
        # MASTER_PORT across --max-restarts): the keys of the dead workers would still be there (their
        # "joined" marks, gloo's addresses of closed ports). Each run gets its own namespace of that store.
        store = PrefixStore(f"torchplug/restart{restarts}/", store)
    ours = PrefixStore("torchplug", store)
    _await_ranks(
        store=ours, rank=rank, world_size=world_size, seconds=join_timeout, address=address, per_node=processes_per_node
    )
    store.set_timeout(timeout)
    dist.init_process_group(
        backend, store=PrefixStore("default_pg", store), world_size=world_size, rank=rank, timeout=timeout
    )
    _STORE[:] = [ours]
    _TIMEOUT_S[:] = [timeout.total_seconds()]
    atexit.register(_destroy)
    _RankReporter(ours, rank).start()


def _connect(host: str, port: int, rank: int, world_size: int, seconds: float) -> Store:
    """The rendezvous store: hosted by rank 0 (or by torchrun's agent), reached by every rank."""
    timeout = timedelta(seconds=seconds)
    try:
        if os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True":  # torchrun's agent hosts it
            store: Store = next(rendezvous(f"tcp://{_format_host(host)}:{port}", rank, world_size, timeout=timeout))[0]
            return store
        return TCPStore(
            host, port, world_size, is_master=rank == 0, timeout=timeout, wait_for_workers=False, multi_tenant=True
        )
    except (RuntimeError, OSError) as exc:  # DistNetworkError and DistStoreError are RuntimeErrors
        if rank == 0:
            raise MisconfigurationError(
                f"Rank 0 could not open the rendezvous at {_format_host(host)}:{port}: {_first_line(exc)}. Hint: "
                "MASTER_ADDR must be an address of this machine and MASTER_PORT a free port (or unset them)."
            ) from exc
        raise JoinTimeoutError(
            f"Rank {rank} could not reach rank 0's rendezvous at {_format_host(host)}:{port} within {seconds:g} s "
            f"({JOIN_TIMEOUT_ENV}={seconds:g}): {_first_line(exc)}. Hint: start rank 0 too (NODE_RANK=0 on the "
            "first machine), and check that MASTER_ADDR and MASTER_PORT reach it from here."
        ) from exc


def _await_ranks(store: Store, rank: int, world_size: int, seconds: float, address: str, per_node: int | None) -> None:
    """Record this rank in the store, then wait until every rank did; name the missing ones at the deadline."""
    store.set(f"joined/{rank}", f"{socket.gethostname()} pid {os.getpid()}")
    keys = [f"joined/{r}" for r in range(world_size)]
    start = time.monotonic()
    deadline, next_note = start + seconds, start + min(_WAITING_NOTE_EVERY_S, seconds / 2)
    while not store.check(keys):
        now = time.monotonic()
        if now >= deadline:
            missing = [r for r in range(world_size) if not store.check([f"joined/{r}"])]
            raise JoinTimeoutError(
                _missing_message(
                    store=store,
                    missing=missing,
                    world_size=world_size,
                    seconds=seconds,
                    address=address,
                    per_node=per_node,
                )
            )
        if rank == 0 and now >= next_note:
            missing = [r for r in range(world_size) if not store.check([f"joined/{r}"])]
            log.warning(
                f"rank 0: waiting {now - start:.0f} s so far for rank(s) {_ranks(missing, per_node)} to join at "
                f"{address} (giving up after {seconds:g} s, {JOIN_TIMEOUT_ENV})"
            )
            next_note = now + _WAITING_NOTE_EVERY_S
        time.sleep(0.05)


def _missing_message(
    store: Store, missing: list[int], world_size: int, seconds: float, address: str, per_node: int | None
) -> str:
    joined = [r for r in range(world_size) if r not in missing]
    who = ", ".join(f"rank {r} ({store.get(f'joined/{r}').decode()})" for r in joined[:4])
    nodes = world_size // per_node if per_node else None
    message = (
        f"{'Rank' if len(missing) == 1 else 'Ranks'} {_ranks(missing, per_node)} of {world_size} did not join the "
        f"process group at {address} within {seconds:g} s ({JOIN_TIMEOUT_ENV}={seconds:g}). Joined: {who or 'none'}."
    )
    if nodes is not None and nodes > 1:
        message += (
            f" Hint: num_nodes={nodes} runs {per_node} process(es) on each of {nodes} machines: start the same "
            "command on every machine, with NODE_RANK=0.."
            f"{nodes - 1} and MASTER_ADDR/MASTER_PORT pointing at node 0; on one machine use num_nodes=1 and devices=N."
        )
    else:
        message += " Hint: every rank must start and reach fit(); look at the output of the missing ones."
    return message


def _ranks(ranks: Iterable[int], per_node: int | None) -> str:
    return ", ".join(f"{r} (node {r // per_node})" if per_node else str(r) for r in ranks)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _destroy() -> None:
    """At exit, while Python is still alive: leave the process group, and let its worker threads go idle.

    ``destroy_process_group()`` only drops torch's references to the group. When something else
    keeps it alive (DDP does, through ``torch.distributed.nn``'s default arguments), gloo's worker
    threads outlive the call. A worker that is still releasing its last collective (whose tensors
    and thread-local state hold Python objects) needs the GIL; once the interpreter is finalizing,
    Python ends such a thread mid-destructor and the process aborts ("terminate called without an
    active exception", seen in about 1 run in 20 of a 2-rank job). Sleeping gives those workers the
    GIL first; a group that died with the call joined its threads already and needs no wait.
    """
    for reporter in _REPORTERS:
        reporter.stopped.set()
    _REPORTERS.clear()
    _STORE.clear()
    if not (dist.is_available() and dist.is_initialized()):
        return
    group = weakref.ref(dist.group.WORLD)
    try:
        dist.destroy_process_group()
    except Exception:  # the process is exiting anyway; a peer may be gone already
        return
    if group() is not None:
        time.sleep(_SETTLE_S)


# -- where each rank is: reported to the store, read when a collective times out ---------------------


class _RankReporter(threading.Thread):
    """Reports every few seconds, to the rendezvous store, where this process's main thread is."""

    def __init__(self, store: Store, rank: int) -> None:
        super().__init__(name="torchplug-rank-reporter", daemon=True)
        self.store = store
        self.rank = rank
        self.main = threading.main_thread().ident
        self.stopped = threading.Event()

    @override
    def start(self) -> None:
        _REPORTERS.append(self)
        super().start()

    @override
    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                self.store.set(f"where/{self.rank}", json.dumps(self._where()))
            except Exception:  # the store went away (rank 0 exited): nothing left to report to
                return
            self.stopped.wait(_REPORT_EVERY_S)

    def _where(self) -> dict[str, Any]:
        frame = sys._current_frames().get(self.main) if self.main is not None else None
        frames = traceback.extract_stack(frame)[-12:] if frame is not None else []
        waiting = any(_in_torch_wait(f.filename) for f in frames[-4:])
        own = [f for f in frames if not _in_library(f.filename)]
        spot = own[-1] if own else (frames[-1] if frames else None)
        place = f"{spot.name} ({spot.filename}:{spot.lineno}: {spot.line})" if spot is not None else "unknown"
        return {"time": time.time(), "waiting": waiting, "where": place, "host": socket.gethostname()}


_TORCH_DIR: Final = os.path.dirname(os.path.dirname(os.path.abspath(dist.__file__)))
_PACKAGE_DIR: Final = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _in_torch_wait(filename: str) -> bool:
    """A frame where a rank waits for its peers: torch.distributed, DDP, autograd's backward."""
    parts = ("distributed", os.path.join("nn", "parallel"), "autograd", "_tensor.py")
    return filename.startswith(_TORCH_DIR) and any(part in filename for part in parts)


def _in_library(filename: str) -> bool:
    return filename.startswith((_TORCH_DIR, _PACKAGE_DIR)) or "site-packages" in filename or "<frozen" in filename


def explain_stall(exc: BaseException, rank: int, world_size: int) -> RankStallError | None:
    """A :class:`RankStallError` naming the ranks that never reached a collective that timed out, else None.

    Called with the error a collective raised; reads the reports every rank leaves in the store.
    """
    store = rendezvous_store()
    if store is None or world_size < 2 or not isinstance(exc, RuntimeError) or "timed out" not in str(exc).lower():
        return None
    reports: dict[int, dict[str, Any]] = {}
    for other in range(world_size):
        try:
            if store.check([f"where/{other}"]):
                reports[other] = json.loads(store.get(f"where/{other}").decode())
        except Exception:  # the store is gone too: nothing more to say than the collective's error
            return None
    now = time.time()
    silent = [r for r in range(world_size) if r in reports and not reports[r]["waiting"]]
    gone = [r for r in range(world_size) if r not in reports or now - reports[r]["time"] > 5 * _REPORT_EVERY_S]
    lines = [
        f"rank {r}: {'waiting for the others' if reports[r]['waiting'] else 'not in a collective'}, in "
        f"{reports[r]['where']} ({now - reports[r]['time']:.0f} s ago)"
        for r in sorted(reports)
    ]
    culprits = sorted(set(silent) | set(gone))
    timeout = f"{_TIMEOUT_S[0]:g} s" if _TIMEOUT_S else "its timeout"
    head = (
        f"Rank(s) {', '.join(map(str, culprits))} never reached the collective that rank {rank} waited in for "
        f"{timeout}: {'they are' if len(culprits) > 1 else 'it is'} busy elsewhere or stuck."
        if culprits
        else f"A collective timed out on rank {rank} after {timeout}; every rank seems to wait in one."
    )
    return RankStallError(
        f"{head} Where each rank's main thread was: {'; '.join(lines) or 'no reports'}. Hint: a rank doing "
        f"long work alone (a big save, an evaluation on one rank) needs a longer {COLLECTIVE_TIMEOUT_ENV} (or the "
        f"strategy's timeout=); a rank stuck for good needs fixing. ({_first_line(exc)})"
    )
