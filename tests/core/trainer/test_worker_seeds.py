"""``seed_everything(workers=True)``: dataloader workers get seeds that differ by rank and stay reproducible."""

from __future__ import annotations

import functools
import json
import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

import torchplug
from tests.core.strategies.runner import linux_only, run
from tests.core.trainer.models import quiet
from torchplug.utilities.seed import worker_init_function

SCRIPT = Path(__file__).parent / "scripts" / "ddp_worker_seeds.py"


class Draws(Dataset[torch.Tensor]):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.tensor([torch.rand(()).item(), random.random(), float(np.random.rand())], dtype=torch.float64)


def draws(worker_init_fn: Any) -> list[list[float]]:
    torch.manual_seed(3)  # fixes the loader's base seed, as seed_everything does
    loader = DataLoader(Draws(), batch_size=2, num_workers=2, worker_init_fn=worker_init_fn)
    return [row for batch in loader for row in batch.tolist()]


def test_the_worker_init_function_seeds_every_generator_by_rank_reproducibly() -> None:
    rank0, rank1 = (draws(functools.partial(worker_init_function, rank=r)) for r in (0, 1))
    assert rank0 == draws(functools.partial(worker_init_function, rank=0))
    assert all(a != b for row0, row1 in zip(rank0, rank1) for a, b in zip(row0, row1))  # torch, Python, NumPy
    assert draws(None) != rank0


class Keeps(torchplug.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.layer(batch.float()).pow(2).mean()

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1)


@pytest.mark.parametrize("workers", [True, False])
def test_the_trainer_gives_the_function_to_loaders_with_workers_only_after_workers_true(
    workers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    for variable in ("TORCHPLUG_SEED_WORKERS", "TORCHPLUG_GLOBAL_SEED"):  # restored after the test
        monkeypatch.setenv(variable, "0")
    torchplug.seed_everything(1, workers=workers, verbose=False)
    given = DataLoader(Draws(), batch_size=2, num_workers=1)
    own = DataLoader(Draws(), batch_size=2, num_workers=1, worker_init_fn=print)
    none = DataLoader(Draws(), batch_size=2)
    for loader in (given, own, none):
        trainer = torchplug.Trainer(**quiet(max_epochs=1))
        trainer.fit(Keeps(), loader)
        used = trainer.train_dataloader
        if workers and loader is given:
            assert used is not given and isinstance(used.worker_init_fn, functools.partial)
            assert used.worker_init_fn.func is worker_init_function and used.worker_init_fn.keywords == {"rank": 0}
        else:
            assert used is loader
    assert given.worker_init_fn is None and own.worker_init_fn is print  # the caller's loaders are left as given


@pytest.mark.slow
@linux_only
def test_under_ddp_the_ranks_workers_draw_differently_and_reproducibly(tmp_path: Path) -> None:
    result = run([sys.executable, str(SCRIPT), str(tmp_path)], tmp_path / "output.log")
    assert result.returncode == 0, result.tail()
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for runs in ranks:
        assert len(runs["seeded"]) == 4 and runs["seeded"] == runs["seeded-again"]
    assert ranks[0]["seeded"] != ranks[1]["seeded"]
    # what workers=True prevents: torch alone gives both ranks' workers the same seeds, so the same draws
    assert ranks[0]["torch-only"] == ranks[1]["torch-only"]
