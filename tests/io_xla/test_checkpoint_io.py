"""XLACheckpointIO: tensors moved to the CPU, atomic writes on real filesystems (even under SIGKILL), and
loading onto the right device."""

from __future__ import annotations

import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

import torchplug
from tests.accel_tpu.fake import subprocess_env
from tests.checkpoint_io_support import Unpicklable, assert_last_complete, assert_same, kill_while_writing, listing
from torchplug._errors import CheckpointLoadError
from torchplug_xla_io import XLACheckpointIO
from torchplug_xla_io.checkpoint_io import to_cpu


def make_checkpoint(seed: int = 0) -> dict[str, Any]:
    generator = torch.Generator().manual_seed(seed)
    return {
        "state_dict": {"layer.weight": torch.randn(16, 8, generator=generator), "layer.bias": torch.zeros(16)},
        "optimizer_states": [{"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1, "params": [0]}]}],
        "global_step": 1234,
        "nested": {"tuple": (4, "five"), "none": None},
    }


# -- registration ---------------------------------------------------------------------------------


def test_registered_as_xla_by_io_xla() -> None:
    entry = torchplug.plugin_host().registry("checkpoint_io").resolve("xla")
    assert entry.target_path == "torchplug_xla_io.checkpoint_io:XLACheckpointIO"
    assert entry.provider.distribution == "io-xla" and entry.run_probe() is None
    assert isinstance(torchplug.plugin_host().registry("checkpoint_io").get("xla"), XLACheckpointIO)


# -- without torch_xla ----------------------------------------------------------------------------


@pytest.mark.usefixtures("no_xla")
def test_round_trip_on_every_filesystem_without_torch_xla(root: str) -> None:
    io = XLACheckpointIO()
    io.save_checkpoint(make_checkpoint(), f"{root}/run/epoch=2.ckpt")
    loaded = io.load_checkpoint(f"{root}/run/epoch=2.ckpt")
    assert_same(loaded, make_checkpoint())
    assert loaded["state_dict"]["layer.weight"].device.type == "cpu"
    assert io.exists(f"{root}/run/epoch=2.ckpt")
    assert listing(f"{root}/run") == ["epoch=2.ckpt"]  # no temporary file left behind
    io.remove_checkpoint(f"{root}/run/epoch=2.ckpt")
    assert not io.exists(f"{root}/run/epoch=2.ckpt")
    io.remove_checkpoint(f"{root}/run/epoch=2.ckpt")  # already gone: nothing happens
    assert "torch_xla" not in sys.modules


@pytest.mark.usefixtures("no_xla")
def test_cpu_tensors_are_not_copied_without_torch_xla() -> None:
    weight = torch.ones(3)
    assert to_cpu({"w": weight})["w"] is weight


class Hyperparameters:
    """An arbitrary object: only a trusting load (``weights_only=False``) may unpickle it."""

    lr = 0.1


def test_saves_load_with_weights_only_and_refuse_objects_unless_trusted(tmp_path: Path) -> None:
    io = XLACheckpointIO()
    io.save_checkpoint({"hparams": Hyperparameters()}, str(tmp_path / "model.ckpt"))
    with pytest.raises(CheckpointLoadError, match=r"holds Python objects that the safe loader does not run"):
        io.load_checkpoint(str(tmp_path / "model.ckpt"), map_location="cpu")
    assert io.load_checkpoint(str(tmp_path / "model.ckpt"), map_location="cpu", weights_only=False)["hparams"].lr == 0.1


def test_load_of_a_missing_file_names_the_path(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"Checkpoint file not found: .*nowhere\.ckpt"):
        XLACheckpointIO().load_checkpoint(str(tmp_path / "nowhere.ckpt"), map_location="cpu")


def test_storage_options_are_refused_with_a_hint(tmp_path: Path) -> None:
    with pytest.raises(
        TypeError,
        match=r"storage_options=\{'anon': True\} is not supported by XLACheckpointIO\. "
        r"Hint:",
    ):
        XLACheckpointIO().save_checkpoint(make_checkpoint(), str(tmp_path / "x.ckpt"), storage_options={"anon": True})
    assert not (tmp_path / "x.ckpt").exists()


def test_a_save_that_fails_midway_keeps_the_previous_checkpoint(root: str) -> None:
    io = XLACheckpointIO()
    io.save_checkpoint(make_checkpoint(seed=1), f"{root}/last.ckpt")
    broken = {"big": torch.ones(1_000_000), "then": Unpicklable()}  # the tensor data is written first
    with pytest.raises(RuntimeError, match="refuses to be pickled"):
        io.save_checkpoint(broken, f"{root}/last.ckpt")
    assert_same(io.load_checkpoint(f"{root}/last.ckpt", map_location="cpu"), make_checkpoint(seed=1))
    assert listing(root) == ["last.ckpt"]  # the temporary file is gone too


def test_fsync_is_passed_to_the_atomic_writer(tmp_path: Path) -> None:
    io = XLACheckpointIO(fsync=True)
    io.save_checkpoint(make_checkpoint(), str(tmp_path / "durable.ckpt"))
    assert io.fsync is True and repr(io) == "XLACheckpointIO(fsync=True)"
    assert_same(io.load_checkpoint(str(tmp_path / "durable.ckpt"), map_location="cpu"), make_checkpoint())


# -- with torch_xla -------------------------------------------------------------------------------


def test_xla_tensors_go_through_torch_xlas_batched_transfer(
    tmp_path: Path, fake_xla: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch_xla.core.xla_model as xm

    converted: list[Any] = []
    real = xm._maybe_convert_to_cpu

    def convert(data: Any, convert: bool = True) -> Any:
        converted.append(data)
        result = real(data, convert)
        result["converted_by_torch_xla"] = True  # mark what torch_xla handed back: that is what must be written
        return result

    monkeypatch.setattr(xm, "_maybe_convert_to_cpu", convert)
    checkpoint = make_checkpoint()
    XLACheckpointIO().save_checkpoint(checkpoint, str(tmp_path / "xla.ckpt"))
    assert converted == [checkpoint] and "converted_by_torch_xla" not in checkpoint  # the caller's dict untouched
    loaded = torch.load(tmp_path / "xla.ckpt", weights_only=True)
    assert loaded["converted_by_torch_xla"] is True
    assert_same({k: v for k, v in loaded.items() if k != "converted_by_torch_xla"}, checkpoint)


def test_load_puts_tensors_on_this_processs_xla_device(
    tmp_path: Path, fake_xla: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    io = XLACheckpointIO()
    io.save_checkpoint(make_checkpoint(), str(tmp_path / "xla.ckpt"))
    monkeypatch.setattr(fake_xla, "device", lambda index=None: torch.device("meta"))  # a device we can tell apart
    loaded = io.load_checkpoint(str(tmp_path / "xla.ckpt"))
    assert loaded["state_dict"]["layer.weight"].device.type == "meta"
    assert loaded["optimizer_states"][0]["state"][0]["step"].device.type == "meta"
    assert loaded["global_step"] == 1234
    on_cpu = io.load_checkpoint(str(tmp_path / "xla.ckpt"), map_location="cpu")  # an explicit place wins
    assert on_cpu["state_dict"]["layer.weight"].device.type == "cpu"


def test_load_falls_back_to_xla_device_on_older_torch_xla(
    tmp_path: Path, fake_xla: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch_xla.core.xla_model as xm

    io = XLACheckpointIO()
    io.save_checkpoint(make_checkpoint(), str(tmp_path / "xla.ckpt"))
    monkeypatch.delattr(fake_xla, "device")  # torch_xla < 2.5 has only xm.xla_device()
    monkeypatch.setattr(xm, "xla_device", lambda n=None, devkind=None: torch.device("meta"))
    assert io.load_checkpoint(str(tmp_path / "xla.ckpt"))["state_dict"]["layer.bias"].device.type == "meta"


# -- a real SIGKILL in the middle of a save -------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("kill_after_mb", [1, 64, 128], ids=lambda mb: f"killed-after-{mb}MB-of-144MB")
def test_sigkill_mid_save_leaves_the_last_complete_checkpoint(tmp_path: Path, kill_after_mb: int) -> None:
    last_printed, size, leftovers = kill_while_writing(
        tmp_path,
        kill_after_mb * 2**20,
        env=subprocess_env(fake=True),
        # the fake torch_xla: the saves go through its batched transfer to the CPU
        imports="import torch_xla\nfrom torchplug_xla_io import XLACheckpointIO",
        io="XLACheckpointIO()",
    )
    loaded = XLACheckpointIO().load_checkpoint(str(tmp_path / "ckpt" / "last.ckpt"), map_location="cpu")
    assert_last_complete(loaded, last_printed, size, leftovers)
