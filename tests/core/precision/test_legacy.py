"""The Apex and sharded precision names and classes of the original plugin documentation: native, or refused."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from tests.core.strategies.runner import assert_close_states, linux_only, rank_records, train

import torchplug
from torchplug.precision import (
    ApexMixedPrecision,
    FullyShardedNativeMixedPrecision,
    HalfPrecision,
    MixedPrecision,
    Precision,
    ShardedNativeMixedPrecision,
)
from torchplug.precision.legacy import LegacyPrecisionWarning
from torchplug.utilities.warn import reset_warned

APEX = "NVIDIA Apex AMP (deprecated by NVIDIA for torch's native AMP)"
APEX_O2 = (
    f"{APEX} at opt level O2 kept float16 weights with float32 master copies in the optimizer (batch norm in "
    "float32). torch has no native equivalent of that, so it cannot run faithfully here. Hint: use "
    "precision='16-mixed' (float32 weights, float16 autocast, dynamic loss scaling: what NVIDIA recommends "
    "instead of Apex, and what O1 maps to), or precision='16-true' (float16 weights, no master copies: what O3 "
    "maps to)."
)


@pytest.fixture(autouse=True)
def _fresh_process_notes() -> Iterator[None]:
    reset_warned()
    yield
    reset_warned()


def _notes(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, LegacyPrecisionWarning)]


@pytest.mark.parametrize(
    ("name", "native", "precision", "note"),
    [
        (
            "apex",
            MixedPrecision,
            "16-mixed",
            f"{APEX} at opt level O1 runs as its native equivalent "
            "precision='16-mixed': float16 torch.autocast with a torch.amp.GradScaler (dynamic loss scaling), float32 "
            "weights.",
        ),
        (
            "apex-O1",
            MixedPrecision,
            "16-mixed",
            f"{APEX} at opt level O1 runs as its native equivalent precision='16-mixed'",
        ),
        (
            "apex-o0",
            Precision,
            None,
            f"{APEX} at opt level O0 runs as its native equivalent precision='32-true': "
            "float32 weights and compute, as O0 was.",
        ),
        (
            "apex-O3",
            HalfPrecision,
            "16-true",
            f"{APEX} at opt level O3 runs as its native equivalent "
            "precision='16-true': float16 weights and compute without loss scaling, as O3 was.",
        ),
        (
            "sharded-16-mixed",
            MixedPrecision,
            "16-mixed",
            "ShardedNativeMixedPrecision (fairscale's sharded training "
            "(ddp_sharded) with native AMP; fairscale's sharding became torch's FSDP) runs as its native equivalent "
            "precision='16-mixed': torch.autocast with a torch.amp.GradScaler, float32 weights. Shard with "
            "strategy='fsdp'",
        ),
        (
            "fully-sharded-16-mixed",
            MixedPrecision,
            "16-mixed",
            "FullyShardedNativeMixedPrecision (fairscale's fully "
            "sharded data parallel with native AMP, which became torch's FSDP) runs as its native equivalent "
            "precision='16-mixed'",
        ),
    ],
)
def test_an_old_name_runs_its_native_equivalent_with_one_note(
    name: str, native: type, precision: str | None, note: str
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = torchplug.Trainer(precision=name, logger=False, accelerator="cpu")
        torchplug.Trainer(precision=name, logger=False, accelerator="cpu")  # said once per process

    plugin = first.precision_plugin
    assert type(plugin) is native
    assert getattr(plugin, "precision", None) == precision
    notes = _notes(caught)
    assert len(notes) == 1 and notes[0].startswith(note), notes
    assert caught[0].filename == __file__  # the note points at the user's line


def test_apex_o2_has_no_faithful_equivalent_and_says_what_to_use() -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        torchplug.Trainer(precision="apex-o2")
    assert str(info.value) == APEX_O2


def test_the_old_classes_build_the_native_plugins() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LegacyPrecisionWarning)
        o1 = ApexMixedPrecision("O1")
        o3 = ApexMixedPrecision(amp_level="o3")
        sharded = ShardedNativeMixedPrecision(16, device="cpu")
        bf16 = FullyShardedNativeMixedPrecision("bf16")
    assert isinstance(o1, MixedPrecision) and o1.precision == "16-mixed"
    assert isinstance(o3, HalfPrecision) and o3.precision == "16-true"
    assert isinstance(sharded, MixedPrecision) and sharded.device_type == "cpu" and sharded.precision == "16-mixed"
    assert isinstance(bf16, MixedPrecision) and bf16.precision == "bf16-mixed"


def test_an_old_class_instance_is_accepted_by_the_trainer() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", LegacyPrecisionWarning)
        plugin = ShardedNativeMixedPrecision(16)
    trainer = torchplug.Trainer(plugins=[plugin], accelerator="cpu", logger=False)
    assert trainer.precision_plugin is plugin


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: ApexMixedPrecision(), APEX_O2),  # O2 is the default, as in Lightning 1.x
        (lambda: ApexMixedPrecision("O4"), "amp_level='O4' is not an Apex opt level; Apex had O0, O1, O2 and O3."),
        (
            lambda: ShardedNativeMixedPrecision(32),
            "precision=32 is not a mixed precision: the sharded precision "
            "plugins take 16 ('16-mixed') or 'bf16' ('bf16-mixed').",
        ),
    ],
)
def test_an_old_class_without_an_equivalent_raises_naming_the_replacement(build: object, message: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        build()  # type: ignore[operator]
    assert str(info.value).startswith(message)


def test_the_listing_shows_every_old_name_with_its_state() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "torchplug", "plugins", "list", "--kind", "precision", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    entries = {e["name"]: e for e in json.loads(result.stdout)["entries"]}
    for name in ("apex-o0", "apex-o1", "apex-o3", "sharded-16-mixed", "fully-sharded-16-mixed"):
        assert (entries[name]["status"], entries[name]["provider"]["distribution"]) == ("ok", "core"), name
    assert entries["apex-o1"]["aliases"] == ["apex"]
    assert (entries["apex-o2"]["status"], entries["apex-o2"]["reason"]) == ("unavailable", APEX_O2)


@pytest.mark.slow
@linux_only
def test_sharded_16_mixed_under_fsdp_trains_as_16_mixed_under_ddp(tmp_path: Path) -> None:
    fsdp = train(tmp_path / "fsdp", "--strategy", "fsdp", "--full-state", "--precision", "sharded-16-mixed")
    ddp = train(tmp_path / "ddp", "--strategy", "ddp", "--full-state", "--precision", "16-mixed")

    assert fsdp.returncode == 0, fsdp.tail()
    assert ddp.returncode == 0, ddp.tail()
    assert fsdp.output.count("LegacyPrecisionWarning: ShardedNativeMixedPrecision") == 1  # rank 0 only
    ranks = rank_records(tmp_path / "fsdp")
    assert {r["strategy"] for r in ranks.values()} == {"FSDPStrategy(start_method='popen', cpu_offload=False)"}
    sharded, reference = (torch.load(tmp_path / run / "rank0.pt") for run in ("fsdp", "ddp"))
    assert_close_states(sharded, reference, rtol=1e-3, atol=1e-4)  # the same float16 autocast and scaler
