"""torch_xla.distributed.xla_multiprocessing: ``spawn`` as PJRT does it, with a process pool.

One process per device (``FAKE_XLA_CHIPS``), each joined to the others by a gloo process group
that the fake collectives use. ``nprocs=1`` runs ``fn`` in this process. Like torch_xla, it
refuses to spawn when this process already started the runtime.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import socket
from collections.abc import Callable
from typing import Any

import torch.distributed as dist
import torch.multiprocessing

from torch_xla import _fake
from torch_xla._internal import tpu


def spawn(
    fn: Callable[..., Any],
    args: tuple[Any, ...] = (),
    nprocs: int | None = None,
    join: bool = True,
    daemon: bool = False,
    start_method: str = "spawn",
) -> Any:
    _fake.record(f"spawn:{nprocs}:{start_method}")
    if nprocs == 1:
        _fake.start()
        return fn(0, *args)
    if _fake.started:
        raise RuntimeError("Runtime is already initialized. Do not use the XLA device before calling xmp.spawn.")
    count = tpu.num_available_chips()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run = functools.partial(_run_process, fn=fn, args=args, world_size=count, port=port)
    context = torch.multiprocessing.get_context(start_method)
    with concurrent.futures.ProcessPoolExecutor(max_workers=count, mp_context=context) as executor:
        results = list(executor.map(run, range(count)))
    return dict(enumerate(results))


def _run_process(rank: int, fn: Callable[..., Any], args: tuple[Any, ...], world_size: int, port: int) -> Any:
    os.environ.update(
        FAKE_XLA_ORDINAL=str(rank), FAKE_XLA_WORLD_SIZE=str(world_size), PJRT_LOCAL_PROCESS_RANK=str(rank)
    )
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        return fn(rank, *args)
    finally:
        dist.destroy_process_group()
