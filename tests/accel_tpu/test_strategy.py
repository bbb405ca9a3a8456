"""``xla``: one process per (fake) XLA device, started by xmp.spawn, gradients averaged over them.

The training runs are real processes: a user script (scripts/train_xla.py) on the fake torch_xla
with two TPU chips, whose processes talk through gloo.
"""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import torchplug
from tests.accel_tpu.fake import subprocess_env
from tests.accel_tpu.models import Regressor, dataset, quiet
from torchplug import MisconfigurationError
from torchplug_tpu import XLAEnvironment, XLALauncher, XLAStrategy

SCRIPT = Path(__file__).parent / "scripts" / "train_xla.py"
EPOCHS = 2


def train(out: Path, *args: str) -> dict[str, Any]:
    """Run the training script on two fake chips; return what the launching process recorded.

    Fails if the script outlives its time limit or leaves a process of its session behind.
    """
    env = subprocess_env(fake=True, FAKE_XLA_CHIPS="2")
    proc = subprocess.Popen(
        [sys.executable, str(SCRIPT), str(out), "--epochs", str(EPOCHS), *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = proc.communicate(timeout=300)
    finally:
        leftovers = _kill_session(proc.pid)
    assert proc.returncode == 0, output
    assert not leftovers, f"the run left processes behind: {leftovers}"
    return json.loads((out / "parent.json").read_text())  # type: ignore[no-any-return]


def _kill_session(sid: int, grace: float = 10.0) -> list[int]:
    """Kill what is left of session ``sid`` after ``grace`` seconds (multiprocessing's resource tracker
    exits shortly after its parent); return what had to be killed."""
    deadline = time.monotonic() + grace
    while (alive := _members(sid)) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return alive


def _members(sid: int) -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and _session(int(p)) == sid]


def _session(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return None if fields[0] == "Z" else int(fields[3])  # a zombie is already gone


def reference_weights() -> list[float]:
    """One process, batches of 16 (the two ranks' batches of 8 together), the same steps."""
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    for _ in range(EPOCHS):
        for x, y in DataLoader(dataset(64), batch_size=16):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    return [float(v) for v in torch.cat([p.detach().flatten() for p in model.parameters()])]


@pytest.fixture(scope="module")
def forked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("xla-fork")
    return out, train(out)


def ranks(out: Path) -> list[dict[str, Any]]:
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


# -- real processes -------------------------------------------------------------------------------


@pytest.mark.slow
def test_auto_starts_one_process_per_device_without_starting_the_runtime_here(
    forked: tuple[Path, dict[str, Any]],
) -> None:
    out, parent = forked
    assert parent["strategy"] == "XLAStrategy"
    assert "strategy             xla  (strategy='auto'" in parent["describe"]
    assert "devices              xla:0, xla:1" in parent["describe"]
    assert parent["spawn_calls"] == ["spawn:None:fork"]
    assert parent["parent_started_runtime"] is False
    assert [(r["rank"], r["world_size"], r["local_rank"]) for r in ranks(out)] == [(0, 2, 0), (1, 2, 1)]


@pytest.mark.slow
def test_each_process_trains_on_its_shard_and_all_end_with_the_reference_weights(
    forked: tuple[Path, dict[str, Any]],
) -> None:
    out, parent = forked
    first, second = ranks(out)
    assert first["indices"] == list(range(0, 64, 2)) * EPOCHS and second["indices"] == list(range(1, 64, 2)) * EPOCHS
    assert first["sampler"] == "DistributedSampler" and first["loader"] == "MpDeviceLoader"
    assert first["weights"] == second["weights"]  # the gradients were averaged over the processes
    assert parent["weights"] == first["weights"]  # rank 0's weights came back to the caller's model
    assert parent["weights"] == pytest.approx(reference_weights(), abs=1e-6)
    assert parent["global_step"] == 8


@pytest.mark.slow
def test_collectives_across_the_processes(forked: tuple[Path, dict[str, Any]]) -> None:
    out, _ = forked
    for record in ranks(out):
        assert record["broadcast"] == {"from": 1, "pad": "x" * 110}  # payloads of different sizes
        assert record["tensor_broadcast"] == [6.0]
        assert record["all_gather"] == [[0, 0], [1, 10]]
        assert (record["sum"], record["mean"], record["max"]) == (3.0, 1.5, 2.0)
        assert (record["any"], record["all"]) == (True, False)


@pytest.mark.slow
def test_rank_zero_writes_the_checkpoints_through_the_xla_io(forked: tuple[Path, dict[str, Any]]) -> None:
    out, parent = forked
    assert parent["checkpoint_io"] == "XLACheckpointIO"
    checkpoint = torch.load(parent["best_model_path"], weights_only=True)
    assert checkpoint["global_step"] == 8
    weights = torch.cat([checkpoint["state_dict"][k].flatten() for k in ("layer.weight", "layer.bias")])
    assert weights.tolist() == pytest.approx(parent["weights"])
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["epoch=1-step=8.ckpt"]


@pytest.mark.slow
def test_spawn_start_method_trains_the_same(tmp_path: Path) -> None:
    parent = train(tmp_path, "--start-method", "spawn")
    assert parent["spawn_calls"] == ["spawn:None:spawn"]
    assert parent["weights"] == pytest.approx(reference_weights(), abs=1e-6)


@pytest.mark.slow
def test_a_failing_process_stops_the_others_and_its_error_is_raised_with_its_rank(tmp_path: Path) -> None:
    parent = train(tmp_path, "--fail-rank", "1")
    assert parent["error"] == "ValueError" and parent["message"] == "rank 1 fails on purpose"
    assert parent["notes"][0].startswith("Raised in XLA process 1")
    assert "tests/accel_tpu/models.py" in parent["notes"][0]  # the traceback of the failing process
    assert parent["seconds"] < 120  # rank 0 waited in a collective: it was stopped, not left hanging


def test_the_earliest_error_of_the_processes_is_raised_not_the_lowest_rank(tmp_path: Path) -> None:
    # Rank 1 fails first; rank 0 then fails in the collective it was waiting in. Under load rank 0's
    # consequence was raised (its file sorts first), hiding the cause.
    from torchplug_tpu import _launcher

    results = str(tmp_path / "results.pt")
    _launcher._record_error(f"{results}.error-1", 1, ValueError("rank 1 fails on purpose"))
    time.sleep(0.01)
    _launcher._record_error(f"{results}.error-0", 0, EOFError("the peer went away"))
    with pytest.raises(ValueError, match="rank 1 fails on purpose") as info:
        _launcher._raise_process_error(results)
    assert info.value.__notes__[0].startswith("Raised in XLA process 1 (of 2 that failed)")


def test_the_time_the_trainer_noted_ranks_an_error_not_the_time_it_was_recorded(tmp_path: Path) -> None:
    # Rank 1's on_exception hooks waited in a collective that failed rank 0, so rank 1 recorded its error
    # last (CI, 2026-11-28: rank 0's UnpicklingError was raised). The time noted before the hooks wins.
    from torchplug.utilities.shutdown import note_failure_time
    from torchplug_tpu import _launcher

    results = str(tmp_path / "results.pt")
    cause = ValueError("rank 1 fails on purpose")
    note_failure_time(cause)
    time.sleep(0.01)
    _launcher._record_error(f"{results}.error-0", 0, pickle.UnpicklingError("garbage from a mismatched collective"))
    time.sleep(0.01)
    _launcher._record_error(f"{results}.error-1", 1, cause)
    with pytest.raises(ValueError, match="rank 1 fails on purpose"):
        _launcher._raise_process_error(results)


# -- in this process, before any launch -----------------------------------------------------------


@pytest.fixture
def two_chips(fake_xla: ModuleType, fake_chips: Callable[[int], None]) -> None:
    fake_chips(2)


@pytest.mark.usefixtures("two_chips")
def test_before_the_launch_it_is_rank_zero_and_asks_the_runtime_nothing(tmp_path: Path, fake_state: ModuleType) -> None:
    trainer = torchplug.Trainer(accelerator="tpu", devices=2, **quiet(tmp_path))
    strategy = trainer.strategy
    assert isinstance(strategy, XLAStrategy) and isinstance(strategy.cluster_environment, XLAEnvironment)
    assert isinstance(strategy.launcher, XLALauncher) and strategy.launcher.is_interactive_compatible
    assert (strategy.global_rank, strategy.local_rank, strategy.node_rank, strategy.world_size) == (0, 0, 0, 2)
    assert trainer.is_global_zero
    strategy.barrier()
    assert strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.all_gather(torch.tensor([1.0])).shape == (1, 1)
    assert strategy.reduce(torch.tensor(2.0)) == 2.0 and strategy.reduce_boolean_decision(True)
    with pytest.raises(RuntimeError, match="strategy='xla' knows its XLA device only inside the processes"):
        _ = strategy.root_device
    assert fake_state.started is False
    assert repr(strategy) == "XLAStrategy(start_method='fork', sync_module_states=True)"


@pytest.mark.usefixtures("two_chips")
def test_reduce_op_must_be_known(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"reduce_op='avg': choose one of sum, mean, max, min"):
        XLAStrategy().reduce(torch.tensor(1.0), reduce_op="avg")


@pytest.mark.usefixtures("two_chips")
def test_a_device_count_other_than_one_or_all_is_refused(tmp_path: Path) -> None:
    three = [torch.device("xla", i) for i in range(3)]
    with pytest.raises(
        MisconfigurationError,
        match=r"starts one process on every XLA device of this host \(2\), "
        r"but 3 devices were asked for\. Hint: use devices=2",
    ):
        torchplug.Trainer(accelerator="tpu", strategy=XLAStrategy(parallel_devices=three), **quiet(tmp_path))


@pytest.mark.usefixtures("two_chips")
def test_one_device_runs_in_this_process(tmp_path: Path, fake_state: ModuleType) -> None:
    trainer = torchplug.Trainer(accelerator="tpu", strategy="xla", devices=1, **quiet(tmp_path, max_steps=2))
    model = Regressor()
    trainer.fit(model, DataLoader(dataset(32), batch_size=8))
    assert trainer.global_step == 2
    assert "spawn:1:fork" in fake_state.calls


@pytest.mark.usefixtures("two_chips")
def test_names_map_to_xla_precisions() -> None:
    assert XLAStrategy().precision_for("bf16-mixed") == "xla-bf16-mixed"
    assert XLAStrategy().precision_for("vendor-fp8") == "vendor-fp8"


def test_start_method_is_checked(fake_xla: ModuleType) -> None:
    with pytest.raises(MisconfigurationError, match=r"start_method='thread' cannot start XLA processes here"):
        XLALauncher(XLAStrategy(), "thread")
    assert XLALauncher(XLAStrategy(), "spawn").is_interactive_compatible is False


def test_gradient_sync_is_skipped_while_accumulating(
    fake_xla: ModuleType, fake_state: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_XLA_WORLD_SIZE", "2")  # pretend to be one of two processes (no peer: record only)
    import torch_xla.core.xla_model as xm

    reduced: list[str] = []
    monkeypatch.setattr(xm, "reduce_gradients", lambda optimizer, **_: reduced.append("optimizer"))
    monkeypatch.setattr(xm, "all_reduce", lambda op, tensors, scale=1.0, **_: reduced.append(f"{op}/{scale}"))
    strategy = XLAStrategy(precision=torchplug.Precision())
    strategy._launched = True
    model = torch.nn.Linear(2, 1)
    strategy.connect(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with strategy.no_backward_sync():
        strategy.backward(model(torch.ones(1, 2)).sum(), optimizer)
    assert reduced == []
    strategy.backward(model(torch.ones(1, 2)).sum(), optimizer)
    strategy.backward(model(torch.ones(1, 2)).sum(), None)  # manual optimization: the module's gradients
    assert reduced == ["optimizer", "sum/0.5"]
