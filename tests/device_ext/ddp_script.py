"""Two-process DistributedDataParallel on ``tpdev`` (or the CPU), for tests/device_ext/test_ddp.py.

``python ddp_script.py OUT DEVICE BACKEND`` spawns 2 processes (``torch.multiprocessing.spawn``)
that each train a copy of :func:`make_model` with DDP on their half of :func:`make_batch` for
:data:`STEPS` SGD steps, then run every collective once on ``DEVICE`` tensors, and write what they
saw to ``OUT/rank<N>.json``. ``DEVICE`` is ``tpdev`` or ``cpu``; ``BACKEND`` is what
``init_process_group`` gets (``default`` passes none, so torch picks the accelerator's backend).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from torch.multiprocessing.spawn import spawn
from torch.nn.parallel import DistributedDataParallel

WORLD_SIZE = 2
STEPS = 3
LEARNING_RATE = 0.1
SETTLE_SECONDS = 0.3


def make_model() -> nn.Module:
    """The model every run starts from (seeded)."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def make_batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The full batch; rank r trains on the r-th half."""
    generator = torch.Generator().manual_seed(1)
    return torch.randn(16, 8, generator=generator), torch.randn(16, 1, generator=generator)


def train_one_process(steps: int = STEPS) -> dict[str, list[Any]]:
    """The reference: one process, the full batch, on the CPU."""
    model = make_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    x, y = make_batch()
    for _ in range(steps):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    return {name: value.tolist() for name, value in model.state_dict().items()}


def _collectives(rank: int, device: torch.device) -> dict[str, Any]:
    """Run each collective once on ``device`` tensors; report values and where the results live."""
    seen: dict[str, Any] = {}

    def record(name: str, *tensors: torch.Tensor) -> None:
        seen[name] = {"values": [t.cpu().tolist() for t in tensors], "devices": [str(t.device) for t in tensors]}

    summed = torch.tensor([rank + 1.0], device=device)
    dist.all_reduce(summed)
    record("all_reduce", summed)
    broadcast = torch.tensor([10.0 * rank], device=device)
    dist.broadcast(broadcast, src=1)
    record("broadcast", broadcast)
    gathered = [torch.zeros(2, device=device) for _ in range(WORLD_SIZE)]
    dist.all_gather(gathered, torch.full((2,), float(rank), device=device))
    record("all_gather", *gathered)
    into = torch.zeros(2 * WORLD_SIZE, device=device)
    dist.all_gather_single(into, torch.full((2,), float(rank), device=device))
    record("all_gather_single", into)
    scattered = torch.zeros(1, device=device)
    dist.reduce_scatter_single(scattered, torch.arange(WORLD_SIZE, dtype=torch.float32, device=device) + rank)
    record("reduce_scatter_single", scattered)
    reduced = torch.tensor([rank + 1.0], device=device)
    dist.reduce(reduced, dst=0)
    record("reduce", reduced)
    if rank == 0:
        dist.send(torch.tensor([42.0], device=device), dst=1)
        received = torch.zeros(1, device=device)
    else:
        received = torch.zeros(1, device=device)
        dist.recv(received, src=0)
    record("send_recv", received)
    objects: list[Any] = [None] * WORLD_SIZE
    dist.all_gather_object(objects, {"rank": rank})
    seen["all_gather_object"] = objects
    announced: list[Any] = [{"from": rank}]
    dist.broadcast_object_list(announced, src=1)
    seen["broadcast_object_list"] = announced
    dist.barrier()
    return seen


def _worker(rank: int, out: str, device_type: str, backend: str, port: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group(None if backend == "default" else backend, rank=rank, world_size=WORLD_SIZE)
    device = torch.device(device_type, rank) if device_type != "cpu" else torch.device("cpu")
    if device_type != "cpu":
        torch.get_device_module(device_type).set_device(rank)
    model = DistributedDataParallel(make_model().to(device))
    optimizer = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    x, y = (t.chunk(WORLD_SIZE)[rank].to(device) for t in make_batch())
    parameter_devices = sorted({str(p.device) for p in model.parameters()})
    for _ in range(STEPS):
        optimizer.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    report = {
        "group": type(dist.group.WORLD).__name__,
        "backend_config": dist.get_backend_config(),
        "parameter_devices": parameter_devices,
        "gradient_devices": sorted({str(p.grad.device) for p in model.parameters() if p.grad is not None}),
        "weights": {name: value.cpu().tolist() for name, value in model.module.state_dict().items()},
        "collectives": _collectives(rank, device),
    }
    Path(out, f"rank{rank}.json").write_text(json.dumps(report))
    dist.destroy_process_group()
    # DDP keeps the group alive past destroy_process_group (torch.distributed.nn holds it), and a
    # gloo worker thread still releasing its last collective needs the GIL: exiting at once can end
    # it mid-destructor and abort the rank. Sleeping (GIL released) lets it go idle first.
    time.sleep(SETTLE_SECONDS)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main(out: str, device_type: str, backend: str) -> None:
    """Spawn the two ranks and wait for them."""
    spawn(_worker, args=(out, device_type, backend, _free_port()), nprocs=WORLD_SIZE, join=True)


if __name__ == "__main__":
    main(*sys.argv[1:4])
