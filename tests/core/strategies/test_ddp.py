"""DDP with two real processes on the CPU (gloo), through each launcher: the script re-run, spawn and fork.

One run per launcher (cached for the module) trains the test Regressor for 2 epochs of 4 steps with
a CSVLogger, a ModelCheckpoint saving every step into its default directory (the logger's
``version_0/checkpoints``), a CheckpointIO that logs every write, and metrics logged with and
without ``sync_dist``; the tests read what each rank recorded.
"""

from __future__ import annotations

import csv
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

import torchplug
from tests.core.strategies.runner import (
    Run,
    alive,
    assert_close_states,
    linux_only,
    rank_records,
    records,
    reference_state,
    train,
)
from tests.core.strategies.scripts.common import SEED, mlp
from torchplug.accelerators.cpu import CPUAccelerator
from torchplug.environments.local import LocalEnvironment
from torchplug.precision.amp import MixedPrecision
from torchplug.strategies.ddp import DDPStrategy

pytestmark = [pytest.mark.slow, linux_only]

LAUNCHERS = ["ddp", "ddp_spawn", "ddp_fork"]
CPU = torch.device("cpu")
STEPS = 8  # 64 samples, 8 per rank and batch, 2 ranks: 4 steps per epoch, 2 epochs

Launched = Callable[[str], tuple[Path, Run]]


@pytest.fixture(scope="module")
def launched(tmp_path_factory: pytest.TempPathFactory) -> Launched:
    """Train once per launcher (on first use) and return the output directory and the finished run."""
    cache: dict[str, tuple[Path, Run]] = {}

    def get(strategy: str) -> tuple[Path, Run]:
        if strategy not in cache:
            out = tmp_path_factory.mktemp(strategy)
            result = train(
                out,
                "--strategy",
                strategy,
                "--root",
                str(out / "root"),
                "--csv-logger",
                "--checkpoint",
                "--default-ckpt-dir",
                "--count-writes",
                str(out / "writes.log"),
                "--log-sync",
            )
            assert result.returncode == 0, result.tail()
            cache[strategy] = (out, result)
        return cache[strategy]

    return get


def checkpoint_dir(out: Path) -> Path:
    """Where ModelCheckpoint writes by default: ``<trainer.log_dir>/checkpoints``."""
    return out / "root" / "torchplug_logs" / "version_0" / "checkpoints"


@pytest.fixture(scope="module")
def reference() -> dict[str, torch.Tensor]:
    return reference_state(epochs=2)


@pytest.mark.parametrize("strategy", LAUNCHERS)
def test_every_rank_ends_with_the_weights_of_the_single_process_reference(
    launched: Launched, reference: dict[str, torch.Tensor], strategy: str
) -> None:
    out, result = launched(strategy)
    ranks = rank_records(out)
    assert sorted(ranks) == [0, 1]
    assert {r["world_size"] for r in ranks.values()} == {2}
    assert [r["local_rank"] for r in ranks.values()] == [0, 1]
    assert {r["global_step"] for r in ranks.values()} == {STEPS}
    assert {r["batches_run"] for r in ranks.values()} == {STEPS}  # each rank ran its half of the data
    assert ranks[0]["hash"] == ranks[1]["hash"], "the ranks ended with different weights"
    # The reference sums both ranks' gradients in one process: the same arithmetic as DDP's
    # average, so the weights agree to rounding (on this machine they are even bit-identical).
    assert_close_states(torch.load(out / "rank0.pt"), reference)
    assert not result.leftovers


@pytest.mark.parametrize("strategy", LAUNCHERS)
def test_ranks_are_known_from_trainer_construction_on(launched: Launched, strategy: str) -> None:
    out, _ = launched(strategy)
    built = records(out, "constructed_").values()
    seen = sorted((r["global_rank"], r["world_size"], r["is_global_zero"]) for r in built)
    # ddp: rank 1 runs the script again and builds its own Trainer; spawn/fork: only the caller builds one.
    assert seen == ([(0, 2, True), (1, 2, False)] if strategy == "ddp" else [(0, 2, True)])


@pytest.mark.parametrize("strategy", LAUNCHERS)
def test_the_caller_holds_the_trained_weights(launched: Launched, strategy: str) -> None:
    out, _ = launched(strategy)
    mains = records(out, "main_")
    trained = rank_records(out)[0]["hash"]
    if strategy == "ddp":  # rank 0 is the caller; rank 1 runs the same script, so both get here
        assert sorted(m["launched_by_us"] for m in mains.values()) == [False, True]
    else:  # only the caller continues after fit(); the workers ended with the function
        assert len(mains) == 1
        caller = next(iter(mains.values()))
        assert caller["pid"] not in {r["pid"] for r in records(out, "started_rank").values()}
    directory = str(checkpoint_dir(out).resolve())
    for main in mains.values():
        assert main["hash"] == trained
        assert main["global_step"] == STEPS
        # The caller's ModelCheckpoint took over the directory its copy in rank 0 decided, and its files.
        assert main["checkpoint_dirpath"] == directory
        assert main["last_model_path"] == f"{directory}/last.ckpt"
        assert main["best_model_path"] == f"{directory}/epoch=1-step={STEPS}.ckpt"


@pytest.mark.parametrize("strategy", LAUNCHERS)
def test_no_warning_is_printed(launched: Launched, strategy: str) -> None:
    # In particular, the caller of spawned workers restores its ModelCheckpoint without complaint. The one
    # warning is about `rank_local`, an epoch value logged without sync_dist on purpose: once, by rank 0.
    _, result = launched(strategy)
    warned = [line for line in result.output.splitlines() if "UserWarning" in line]
    assert len(warned) == 1 and "self.log('rank_local', ...) records an epoch value without sync_dist" in warned[0], (
        result.tail()
    )


@pytest.mark.parametrize(("data", "warned"), [("stream", True), ("stream-sharded", False)])
def test_a_stream_every_process_reads_whole_is_said(tmp_path: Path, data: str, warned: bool) -> None:
    # An IterableDataset gets no DistributedSampler: unsharded, every rank trains on the same batches.
    result = train(tmp_path, "--strategy", "ddp", "--epochs", "1", "--data", data, "--root", str(tmp_path / "root"))
    assert result.returncode == 0, result.tail()
    said = "Every one of the 2 processes got the same first training batch: the data is not sharded"
    assert (said in result.output) is warned, result.tail()
    assert result.output.count(said) <= 1  # once, from rank 0


@pytest.mark.parametrize(("samples", "repeated"), [(65, 1), (64, 0)])
def test_a_test_set_the_shards_repeat_samples_of_is_said(tmp_path: Path, samples: int, repeated: int) -> None:
    # torch's DistributedSampler pads 65 samples to 2 x 33: one sample is tested (and averaged) twice.
    result = train(
        tmp_path, "--strategy", "ddp", "--epochs", "1", "--test", str(samples), "--root", str(tmp_path / "root")
    )
    assert result.returncode == 0, result.tail()
    said = f"trainer.test(): the DistributedSampler repeats {repeated} of the {samples} samples"
    assert (said in result.output) is bool(repeated), result.tail()
    assert "repeats" not in result.output or repeated, result.tail()


def test_the_three_launchers_give_bit_identical_weights(launched: Launched) -> None:
    hashes = {strategy: rank_records(launched(strategy)[0])[0]["hash"] for strategy in LAUNCHERS}
    assert len(set(hashes.values())) == 1, hashes


def test_the_three_launchers_agree_with_dropout_too(tmp_path: Path) -> None:
    # Each rank draws dropout masks from the random state it starts fit() with: the script's own for
    # ddp, the caller's for fork, and the caller's sent along for spawn. All three must agree.
    hashes = {}
    for strategy in LAUNCHERS:
        result = train(tmp_path / strategy, "--strategy", strategy, "--dropout", "0.2")
        assert result.returncode == 0, result.tail()
        ranks = rank_records(tmp_path / strategy)
        assert ranks[0]["hash"] == ranks[1]["hash"]
        hashes[strategy] = ranks[0]["hash"]
    assert len(set(hashes.values())) == 1, hashes


@pytest.mark.parametrize("strategy", LAUNCHERS)
def test_logs_are_written_once_by_rank_zero(launched: Launched, strategy: str) -> None:
    out, _ = launched(strategy)
    logs = out / "root" / "torchplug_logs"
    assert sorted(p.name for p in logs.iterdir()) == ["version_0"]
    with open(logs / "version_0" / "metrics.csv", newline="") as stream:
        rows = list(csv.DictReader(stream))
    step_rows = [row for row in rows if row.get("train_loss")]
    epoch_rows = [row for row in rows if row.get("rank_synced_epoch")]
    # Lightning's logger steps: batch k logs at step k; an epoch's values at the step of its last batch
    assert [int(row["step"]) for row in step_rows] == list(range(STEPS))
    assert [int(row["step"]) for row in epoch_rows] == [STEPS // 2 - 1, STEPS - 1]
    assert len(rows) == len(step_rows) + len(epoch_rows)
    # Rank 0's own values: its unsynced metric is its rank-0 value.
    assert [float(row["rank_local_step"]) for row in step_rows] == [10.0 * s for s in range(STEPS)]


@pytest.mark.parametrize("strategy", LAUNCHERS)
def test_each_checkpoint_is_written_once_by_rank_zero(launched: Launched, strategy: str) -> None:
    out, _ = launched(strategy)
    writes = [line.split(" ", 1) for line in (out / "writes.log").read_text().splitlines()]
    rank0_pid = records(out, "started_rank")["0"]["pid"]
    assert {int(pid) for pid, _ in writes} == {rank0_pid}
    counts = Counter(Path(path).name for _, path in writes)
    assert counts.pop("last.ckpt") == STEPS  # rewritten at every save point
    assert counts == {f"epoch={(s - 1) // 4}-step={s}.ckpt": 1 for s in range(1, STEPS + 1)}
    files = sorted(p.name for p in checkpoint_dir(out).iterdir())
    assert files == sorted([*counts, "last.ckpt"])  # no temporary file left, nothing from rank 1


@pytest.mark.parametrize("strategy", LAUNCHERS)
def test_sync_dist_gives_every_rank_the_mean_over_ranks(launched: Launched, strategy: str) -> None:
    out, _ = launched(strategy)
    ranks = rank_records(out)
    last = 10.0 * (STEPS - 1)  # each rank logs rank + 10 × step; the last step is STEPS - 1
    second_epoch = 10.0 * sum(range(STEPS // 2, STEPS)) / (STEPS // 2)
    for rank, record in ranks.items():
        metrics = record["callback_metrics"]
        assert metrics["rank_synced_step"] == pytest.approx(last + 0.5)
        assert metrics["rank_synced_epoch"] == pytest.approx(second_epoch + 0.5)
        assert metrics["rank_local_step"] == pytest.approx(last + rank)
        assert metrics["rank_local_epoch"] == pytest.approx(second_epoch + rank)
    if strategy != "ddp":  # the caller got rank 0's metrics back from the workers
        caller = next(iter(records(out, "main_").values()))
        assert caller["callback_metrics"]["rank_synced_epoch"] == pytest.approx(second_epoch + 0.5)
        assert caller["callback_metrics"]["rank_local_epoch"] == pytest.approx(second_epoch)


@pytest.mark.parametrize("strategy", LAUNCHERS)
def test_no_process_is_left(launched: Launched, strategy: str) -> None:
    out, result = launched(strategy)
    assert not result.leftovers
    assert not [r["pid"] for r in records(out, "started_rank").values() if alive(r["pid"])]


def test_find_unused_parameters_true_trains_a_model_with_an_unused_layer(
    tmp_path: Path, reference: dict[str, torch.Tensor]
) -> None:
    result = train(tmp_path, "--strategy", "ddp_find_unused_parameters_true", "--unused")
    assert result.returncode == 0, result.tail()
    ranks = rank_records(tmp_path)
    assert ranks[0]["hash"] == ranks[1]["hash"]
    assert ranks[0]["strategy"] == "DDPStrategy(start_method='popen', find_unused_parameters=True)"
    state = torch.load(tmp_path / "rank0.pt")
    with torch.random.fork_rng(devices=[]):  # the unused layer keeps its initial weights: build it as Regressor does
        torch.manual_seed(SEED)
        mlp()
        untouched = torch.nn.Linear(64, 1)
    assert torch.equal(state.pop("extra.weight"), untouched.weight.detach())
    state.pop("extra.bias")
    assert_close_states(state, reference)


def test_an_unused_parameter_without_find_unused_parameters_fails_cleanly(tmp_path: Path) -> None:
    result = train(tmp_path, "--strategy", "ddp", "--unused")
    assert result.returncode != 0
    assert "find_unused_parameters" in result.output  # DDP's own hint reaches the user
    assert not result.leftovers


# -- the strategy's arguments, checked when it is made -----------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"static_grpah": True},
            r"DDPStrategy\(static_grpah=...\) is not valid: it is neither an argument of the strategy nor one of "
            r"torch's DistributedDataParallel, .* Hint: did you mean static_graph=\?",
        ),
        ({"device_ids": [1]}, r"DDPStrategy\(device_ids=...\) is not valid: the strategy sets .* Hint: remove"),
        ({"model_averaging_period": 4}, r"model_averaging_period=...\) is not supported: .* Hint: wrap your optimizer"),
        ({"find_unused_parameters": "false"}, r"find_unused_parameters='false' is not valid: give True or False"),
        ({"ddp_comm_state": object()}, r"ddp_comm_state= given without ddp_comm_hook=, so it would do nothing"),
        ({"ddp_comm_hook": "fp16"}, r"ddp_comm_hook='fp16' is not valid: give a function\. Hint:"),
    ],
    ids=["misspelt-ddp-kwarg", "device_ids", "model_averaging_period", "string-bool", "state-without-hook", "hook-str"],
)
def test_arguments_that_would_fail_in_every_worker_are_refused_when_the_strategy_is_made(
    kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(torchplug.MisconfigurationError, match=message):
        DDPStrategy(**kwargs)  # type: ignore[arg-type]


def test_lightnings_precision_plugin_argument_sets_the_precision() -> None:
    precision = MixedPrecision("bf16-mixed")
    assert DDPStrategy(precision_plugin=precision).precision is precision
    with pytest.raises(torchplug.MisconfigurationError, match="both set the precision"):
        DDPStrategy(precision=MixedPrecision("bf16-mixed"), precision_plugin=precision)


def test_a_backend_this_torch_build_lacks_is_refused_when_the_strategy_is_made() -> None:
    missing = [b for b in dist.Backend.backend_list if b != "undefined" and not dist.is_backend_available(b)]
    if not missing:
        pytest.skip("this torch build has every backend it knows")
    with pytest.raises(torchplug.MisconfigurationError, match=rf"this torch build .* has no '{missing[0]}' backend"):
        DDPStrategy(process_group_backend=missing[0])


def test_a_misspelt_backend_is_refused_before_the_processes_wait_for_each_other() -> None:
    strategy = DDPStrategy(process_group_backend="glo")  # a vendor may register a backend later: kept until now
    strategy.attach(accelerator=CPUAccelerator(), cluster_environment=LocalEnvironment(), parallel_devices=[CPU])
    with pytest.raises(
        torchplug.MisconfigurationError,
        match=r"process_group_backend='glo' is not valid: torch.distributed has no backend 'glo' .* mean 'gloo'",
    ):
        strategy.setup_environment()
    assert not dist.is_initialized()


@pytest.fixture
def one_process_group() -> Iterator[None]:
    """A gloo process group of this process alone, as a DDP worker of world size 1 has."""
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.usefixtures("one_process_group")
def test_a_ddp_comm_hook_runs_on_every_gradient_bucket_wrapped_as_asked() -> None:
    calls: list[str] = []

    def hook(state, bucket):  # type: ignore[no-untyped-def]  # DDP refuses a string annotation on bucket
        calls.append(f"hook({state})")
        return default_hooks.allreduce_hook(None, bucket)

    def wrapper(inner: Callable[..., object]) -> Callable[..., object]:
        calls.append("wrapped")
        return inner

    strategy = DDPStrategy(ddp_comm_hook=hook, ddp_comm_state="state", ddp_comm_wrapper=wrapper)
    strategy.attach(accelerator=CPUAccelerator(), cluster_environment=LocalEnvironment(), parallel_devices=[CPU])
    model = strategy.setup_module(torch.nn.Linear(3, 1))
    model("forward", torch.ones(2, 3)).sum().backward()
    assert calls == ["wrapped", "hook(state)"]
