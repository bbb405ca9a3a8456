"""FSDP (torch's FSDP2 ``fully_shard``) with two real processes on the CPU (gloo).

FSDP shards every parameter over the ranks, reduce-scatters the gradients and gathers the full
parameters for each forward. The arithmetic is DDP's (the gradient averaged over ranks, then the
same optimizer step on each shard), but the reductions run over other buffers in another order, so
the results are compared with a tolerance rather than bit for bit (on this machine they happen to
be identical).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.fsdp import CPUOffload, FSDPModule, MixedPrecision, ShardingStrategy
from torch.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy, transformer_auto_wrap_policy

import torchplug
from tests.core.strategies.runner import (
    Run,
    assert_close_states,
    linux_only,
    rank_records,
    records,
    reference_state,
    train,
)
from tests.core.strategies.scripts.common import Regressor
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.environments.local import LocalEnvironment
from torchplug.strategies.fsdp import FSDPStrategy
from torchplug.utilities.warn import reset_warned

pytestmark = [pytest.mark.slow, linux_only]

STEPS = 8
WRAPS = {"whole-model": (), "each-linear": ("--wrap-linear",)}

Launched = Callable[[str], tuple[Path, Run]]


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    """Train once per wrap policy (on first use), checkpointing every step and after fit."""
    cache: dict[str, tuple[Path, Run]] = {}

    def get(wrap: str) -> tuple[Path, Run]:
        if wrap not in cache:
            out = tmp_path_factory.mktemp(wrap)
            result = train(
                out,
                "--strategy",
                "fsdp",
                *WRAPS[wrap],
                "--full-state",
                "--root",
                str(out / "root"),
                "--checkpoint",
                "--save-ckpt",
                str(out / "final.ckpt"),
            )
            assert result.returncode == 0, result.tail()
            cache[wrap] = (out, result)
        return cache[wrap]

    return get


@pytest.fixture(scope="module")
def reference() -> dict[str, torch.Tensor]:
    return reference_state(epochs=2)


def gathered(out: Path) -> dict[str, torch.Tensor]:
    """The full state dict rank 0 gathered at the end of fit."""
    return torch.load(out / "rank0.pt")  # type: ignore[no-any-return]


@pytest.mark.parametrize("wrap", list(WRAPS))
def test_fsdp_reaches_the_weights_ddp_reaches(
    launched: Launched, reference: dict[str, torch.Tensor], wrap: str
) -> None:
    out, result = launched(wrap)
    ranks = rank_records(out)
    assert sorted(ranks) == [0, 1]
    assert {r["global_step"] for r in ranks.values()} == {STEPS}
    assert {r["strategy"] for r in ranks.values()} == {"FSDPStrategy(start_method='popen', cpu_offload=False)"}
    assert ranks[1]["hash"] is None  # the full state dict is gathered on rank 0 only
    # DDP reaches the reference to rounding (test_ddp); FSDP must too.
    assert_close_states(gathered(out), reference)
    # After fit the module is still sharded; gathered again, every process sees the same weights.
    mains = records(out, "main_")
    assert len(mains) == 2 and {m["hash"] for m in mains.values()} == {ranks[0]["hash"]}
    assert not result.leftovers


@pytest.mark.parametrize("wrap", list(WRAPS))
def test_checkpoints_written_under_fsdp_load_in_a_single_process(launched: Launched, wrap: str) -> None:
    out, _ = launched(wrap)
    full = gathered(out)
    for path in (
        out / "root" / "ckpts" / f"epoch=1-step={STEPS}.ckpt",
        out / "root" / "ckpts" / "last.ckpt",
        out / "final.ckpt",
    ):
        model = Regressor.load_from_checkpoint(str(path))
        for key, value in model.state_dict().items():
            assert type(value) is torch.Tensor  # plain tensors, not DTensor shards
            assert torch.equal(value, full[key]), f"{path.name}: {key}"
    earlier = Regressor.load_from_checkpoint(str(out / "root" / "ckpts" / "epoch=0-step=4.ckpt"))
    assert not torch.equal(earlier.state_dict()["net.0.weight"], full["net.0.weight"])


def test_fit_resumes_under_fsdp_from_a_checkpoint_written_mid_epoch(
    launched: Launched, tmp_path: Path, reference: dict[str, torch.Tensor]
) -> None:
    source, _ = launched("whole-model")
    checkpoint = source / "root" / "ckpts" / "epoch=0-step=3.ckpt"
    result = train(tmp_path, "--strategy", "fsdp", "--full-state", "--resume", str(checkpoint))
    assert result.returncode == 0, result.tail()
    ranks = rank_records(tmp_path)
    assert {r["global_step"] for r in ranks.values()} == {STEPS}
    assert {r["batches_run"] for r in ranks.values()} == {STEPS - 3}  # it did resume: only the rest ran
    assert_close_states(gathered(tmp_path), reference)  # as if never interrupted


def test_gradient_clipping_by_norm_under_fsdp(tmp_path: Path, reference: dict[str, torch.Tensor]) -> None:
    result = train(tmp_path, "--strategy", "fsdp", "--full-state", "--clip", "0.05")
    assert result.returncode == 0, result.tail()
    clipped = reference_state(epochs=2, clip=0.05)
    assert not torch.allclose(clipped["net.0.weight"], reference["net.0.weight"], atol=1e-3)  # clipping bites
    # The norm is taken over every shard: the same clipping as one process with the full gradients.
    assert_close_states(gathered(tmp_path), clipped)


def test_gradient_accumulation_under_fsdp(tmp_path: Path) -> None:
    result = train(tmp_path, "--strategy", "fsdp", "--full-state", "--accumulate", "2")
    assert result.returncode == 0, result.tail()
    assert {r["global_step"] for r in rank_records(tmp_path).values()} == {STEPS // 2}
    assert_close_states(gathered(tmp_path), reference_state(epochs=2, accumulate=2))


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_fsdp_workers_hand_the_full_weights_back_to_the_caller(
    tmp_path: Path, start_method: str, reference: dict[str, torch.Tensor]
) -> None:
    result = train(tmp_path, "--strategy", "fsdp", "--start-method", start_method, "--full-state")
    assert result.returncode == 0, result.tail()
    mains = records(tmp_path, "main_")
    assert len(mains) == 1  # the caller: its model holds plain tensors with the trained weights
    assert next(iter(mains.values()))["hash"] == rank_records(tmp_path)[0]["hash"]
    assert_close_states(gathered(tmp_path), reference)
    assert not result.leftovers


# -- the strategy's arguments, checked when it is made -----------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"cpu_offload": "no"}, r"FSDPStrategy\(cpu_offload='no'\) is not valid: give True or False"),
        ({"reshard_after_forward": "false"}, r"FSDPStrategy\(reshard_after_forward='false'\) is not valid"),
        ({"param_dtype": "bf16"}, r"FSDPStrategy\(param_dtype='bf16'\) is not valid: .* Hint: param_dtype=torch"),
        ({"reduce_dtype": torch.int8}, r"FSDPStrategy\(reduce_dtype=torch.int8\) is not valid"),
        ({"auto_wrap_policy": ["Block"]}, r"a collection must hold torch.nn.Module classes"),
        ({"cpu_ofload": True}, r"FSDPStrategy\(cpu_ofload=...\) is not valid: .* Hint: did you mean cpu_offload=\?"),
        (
            {"sharding_strategy": "NO_SHARD"},
            r"sharding_strategy='NO_SHARD'\) is not valid here: .* Hint: strategy='ddp'",
        ),
        (
            {"sharding_strategy": "SHARD_GRAD_OP", "reshard_after_forward": True},
            r"means reshard_after_forward=False, but reshard_after_forward=True was given too",
        ),
        ({"activation_checkpointing_policy": {torch.nn.Linear}}, r"is not supported\. Hint: wrap the layers yourself"),
        ({"use_orig_params": False}, r"use_orig_params=False\) is not valid: FSDP2 always trains the original"),
        (
            {"mixed_precision": MixedPrecision(param_dtype=torch.bfloat16), "param_dtype": torch.float16},
            r"FSDPStrategy\(param_dtype=...\) is set twice",
        ),
    ],
    ids=[
        "string-cpu_offload",
        "string-reshard",
        "string-dtype",
        "integer-dtype",
        "policy-of-names",
        "misspelt",
        "NO_SHARD",
        "sharding-contradicts-reshard",
        "activation-checkpointing",
        "use_orig_params-False",
        "dtype-twice",
    ],
)
def test_arguments_that_cannot_work_are_refused_when_the_strategy_is_made(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(torchplug.MisconfigurationError, match=message):
        FSDPStrategy(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "reshard", "offload", "param_dtype"),
    [
        ({"sharding_strategy": "SHARD_GRAD_OP"}, False, False, None),
        ({"sharding_strategy": ShardingStrategy.FULL_SHARD}, True, False, None),
        ({"cpu_offload": CPUOffload(offload_params=True)}, True, True, None),
        ({"cpu_offload": CPUOffload(offload_params=False)}, True, False, None),
        ({"mixed_precision": MixedPrecision(param_dtype=torch.bfloat16)}, True, False, torch.bfloat16),
        ({"use_orig_params": True}, True, False, None),
    ],
    ids=["SHARD_GRAD_OP", "FULL_SHARD-enum", "CPUOffload-True", "CPUOffload-False", "mixed_precision", "orig-params"],
)
def test_lightnings_fsdp_arguments_are_honoured_through_their_fsdp2_equivalents(
    kwargs: dict[str, object], reshard: bool, offload: bool, param_dtype: torch.dtype | None
) -> None:
    strategy = FSDPStrategy(**kwargs)  # type: ignore[arg-type]
    assert strategy.reshard_after_forward is reshard
    assert strategy.cpu_offload is offload
    assert strategy.mp_policy.param_dtype == param_dtype


@pytest.fixture
def one_process_group() -> Iterator[None]:
    """A gloo process group of this process alone, as an FSDP worker of world size 1 has."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _sharded_units(policy: object) -> list[str]:
    strategy = FSDPStrategy(auto_wrap_policy=policy)  # type: ignore[arg-type]
    strategy.attach(
        accelerator=CPUAccelerator(), cluster_environment=LocalEnvironment(), parallel_devices=[torch.device("cpu")]
    )
    model = torch.nn.Sequential(torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU()), torch.nn.Linear(4, 2))
    strategy.setup_module(model)
    return [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]


@pytest.mark.usefixtures("one_process_group")
@pytest.mark.parametrize(
    "policy",
    [
        {torch.nn.Linear},
        ModuleWrapPolicy({torch.nn.Linear}),
        functools.partial(transformer_auto_wrap_policy, transformer_layer_cls={torch.nn.Linear}),
        functools.partial(size_based_auto_wrap_policy, min_num_params=10),
    ],
    ids=["classes", "ModuleWrapPolicy", "transformer_auto_wrap_policy", "size_based_auto_wrap_policy"],
)
def test_fsdp1_wrap_policies_as_lightning_takes_them_select_the_same_submodules(policy: object) -> None:
    assert _sharded_units(policy) == ["", "0.0", "1"]


@pytest.mark.usefixtures("one_process_group")
def test_a_wrap_policy_that_selects_nothing_is_warned_about() -> None:
    reset_warned()
    with pytest.warns(UserWarning, match=r"auto_wrap_policy=\{<class 'torch.nn.modules.conv.Conv2d'>\}\) selected no"):
        assert _sharded_units({torch.nn.Conv2d}) == [""]  # the whole model as one unit
