"""The fingerprint that compares the first batch across processes (the 2-process runs are in tests/core/strategies)."""

from __future__ import annotations

import math

import torch

from torchplug.loops.shard_check import _fingerprint


def test_the_same_batch_gives_the_same_fingerprint_and_another_batch_another() -> None:
    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(0))
    batch = {"x": x, "y": [torch.arange(8), torch.ones(8, dtype=torch.bool)], "names": ["a"] * 8}
    same = {"x": x.clone(), "y": [torch.arange(8), torch.ones(8, dtype=torch.bool)], "names": ["b"] * 8}
    assert torch.equal(_fingerprint(batch), _fingerprint(same))
    swapped = {"x": x.flip(0), "y": batch["y"], "names": batch["names"]}  # the same sum, in another order
    assert not torch.equal(_fingerprint(batch), _fingerprint(swapped))
    assert not torch.equal(_fingerprint(batch), _fingerprint({**batch, "x": x + 1e-3}))


def test_complex_and_half_precision_tensors_count_and_a_batch_without_tensors_matches_nothing() -> None:
    values = _fingerprint((torch.ones(4, dtype=torch.complex64), torch.ones(4, dtype=torch.float16)))
    assert values.tolist() == [8.0, (1 + 3 + 5 + 7) + (1 + 2 + 3 + 4)]  # 1+0j: real parts 1, imaginary 0
    assert all(math.isnan(v) for v in _fingerprint(["text", 3]).tolist())
