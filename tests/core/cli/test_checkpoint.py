"""``core checkpoint inspect|consolidate`` and ``torchplug.io.consolidate_checkpoint``, on both formats."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import fsspec
import pytest
import torch

import torchplug
from tests.core.cli.conftest import Core
from tests.core.trainer.models import BlobData, Classifier, quiet, weights
from torchplug import MisconfigurationError
from torchplug.io import consolidate_checkpoint, inspect_checkpoint

STEPS = 16  # one epoch of 512 samples in batches of 32


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, torch.Tensor]]:
    """One fit (one process) saving its final state twice: a file (``torch``) and a sharded directory (``dcp``)."""
    root = tmp_path_factory.mktemp("ckpts")
    torch.manual_seed(0)
    model = Classifier(hidden=24, scheduler="step")
    trainer = torchplug.Trainer(**quiet(max_epochs=1))
    trainer.fit(model, datamodule=BlobData())
    trainer.save_checkpoint(root / "model.ckpt")
    sharded = torchplug.Trainer(**quiet(max_epochs=1, plugins=["dcp"]))
    sharded.fit(model, datamodule=BlobData(), ckpt_path=str(root / "model.ckpt"))  # resumes at the end: saves as is
    sharded.save_checkpoint(root / "sharded.ckpt")
    return root, weights(model)


def test_inspect_a_file(written: tuple[Path, Any], core: Core) -> None:
    root, _ = written
    result = core("checkpoint", "inspect", str(root / "model.ckpt"))
    assert result.code == 0, result
    assert "format       file" in result.out
    assert f"epoch        1    global_step {STEPS}" in result.out  # the epoch to run next
    assert "net.0.weight  float32 (24, 16)" in result.out
    assert "optimizer 0  state for 4 parameter(s), 1 group(s)" in result.out
    assert "schedulers   1" in result.out
    summary = json.loads(core("checkpoint", "inspect", str(root / "model.ckpt"), "--json").out)
    assert summary["parameters"] == 24 * 16 + 24 + 4 * 24 + 4
    assert summary["hyper_parameters"]["hidden"] == 24 and summary["torchplug_version"] == torchplug.__version__


def test_inspect_a_sharded_directory_without_reading_its_tensors(written: tuple[Path, Any], core: Core) -> None:
    root, _ = written
    result = core("checkpoint", "inspect", str(root / "sharded.ckpt"), "--json")
    assert result.code == 0, result
    summary = json.loads(result.out)
    assert (summary["format"], summary["processes"], summary["global_step"]) == ("sharded", 1, STEPS)
    assert summary["tensors"]["net.0.weight"] == {"shape": [24, 16], "dtype": "float32"}
    assert summary["optimizers"] == [{"state_entries": 4, "param_groups": 1}]
    assert {"state_dict", "optimizer_states", "loops", "callbacks", "rng"} <= set(summary["keys"])
    assert summary == inspect_checkpoint(root / "sharded.ckpt") | {"path": str(root / "sharded.ckpt")}


def test_consolidate_writes_one_file_that_load_from_checkpoint_reads(
    written: tuple[Path, dict[str, torch.Tensor]], core: Core, tmp_path: Path
) -> None:
    root, expected = written
    result = core("checkpoint", "consolidate", str(root / "sharded.ckpt"), str(tmp_path / "one.ckpt"))
    assert result.code == 0, result
    assert result.out.strip() == f"consolidated {root / 'sharded.ckpt'} -> {tmp_path / 'one.ckpt'}"
    checkpoint = torch.load(tmp_path / "one.ckpt", weights_only=True)
    assert checkpoint["global_step"] == STEPS and "optimizer_states" not in checkpoint and "rng" not in checkpoint
    model = Classifier.load_from_checkpoint(str(tmp_path / "one.ckpt"))
    assert model.hparams.hidden == 24
    assert all(torch.equal(v, expected[k]) for k, v in weights(model).items())
    # The Python function, to another filesystem; and fit refuses to "resume" from weights alone.
    consolidate_checkpoint(root / "sharded.ckpt", "memory://consolidated/one.ckpt")
    assert fsspec.filesystem("memory").exists("/consolidated/one.ckpt")
    trainer = torchplug.Trainer(**quiet(max_epochs=2))
    with pytest.raises(MisconfigurationError, match="holds only weights"):
        trainer.fit(Classifier(hidden=24), datamodule=BlobData(), ckpt_path=str(tmp_path / "one.ckpt"))


def test_what_cannot_be_read_is_an_error_that_says_why(written: tuple[Path, Any], core: Core, tmp_path: Path) -> None:
    root, _ = written
    missing = core("checkpoint", "inspect", str(tmp_path / "nope.ckpt"))
    assert (missing.code, missing.err.strip()) == (
        2,
        f"core checkpoint inspect: error: FileNotFoundError: Checkpoint not found: {tmp_path / 'nope.ckpt'}",
    )
    torn = tmp_path / "torn.ckpt"
    torn.mkdir()
    (torn / "__0_0.distcp").write_bytes(b"half a shard")  # its save never finished: no .metadata
    result = core("checkpoint", "consolidate", str(torn), str(tmp_path / "out.ckpt"))
    assert result.code == 2 and "no .metadata: its save did not finish?" in result.err
    assert not (tmp_path / "out.ckpt").exists()
    with pytest.raises(SystemExit) as usage:
        core("checkpoint", "consolidate", str(root / "sharded.ckpt"))
    assert usage.value.code == 2


def test_consolidate_never_replaces_a_file_unless_asked(written: tuple[Path, Any], core: Core, tmp_path: Path) -> None:
    root, _ = written
    sharded, out = str(root / "sharded.ckpt"), tmp_path / "out.ckpt"
    out.write_text("someone's notes")
    result = core("checkpoint", "consolidate", sharded, str(out))
    assert (result.code, result.err.strip()) == (
        2,
        f"core checkpoint consolidate: error: OUTPUT={str(out)!r} exists already and is not replaced. Hint: give "
        "another path, or add --overwrite.",
    )
    assert out.read_text() == "someone's notes"
    assert core("checkpoint", "consolidate", sharded, str(out), "--overwrite").code == 0
    assert torch.load(out, weights_only=True)["global_step"] == STEPS


def test_consolidate_refuses_its_own_input_and_a_directory(
    written: tuple[Path, Any], core: Core, tmp_path: Path
) -> None:
    root, _ = written
    copy = tmp_path / "training.ckpt"
    copy.write_bytes((root / "model.ckpt").read_bytes())
    for output in (str(copy), f"{tmp_path}/../{tmp_path.name}/training.ckpt"):  # the same file, named twice
        result = core("checkpoint", "consolidate", str(copy), output, "--overwrite")
        assert result.code == 2, result
        assert "is the checkpoint being read: consolidating it in place would replace its training state" in result.err
    assert "optimizer_states" in torch.load(copy, weights_only=True)  # the training state is still there
    result = core("checkpoint", "consolidate", str(root / "sharded.ckpt"), str(tmp_path))
    assert result.code == 2, result
    assert f"OUTPUT={str(tmp_path)!r} is a directory; consolidate writes one file." in result.err
    assert f"Hint: give the file's path, for example {tmp_path}/model.ckpt." in result.err


def test_inspect_names_a_file_that_is_not_a_checkpoint(core: Core, tmp_path: Path) -> None:
    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    torch.save([1, 2], tmp_path / "list.pt")
    for name, cause in (("notes.ckpt", "is not a checkpoint (it starts b'not '"), ("list.pt", "it holds a list")):
        result = core("checkpoint", "inspect", str(tmp_path / name))
        assert result.code == 2, result  # a usage error: PATH names no checkpoint
        assert result.err.startswith(
            f"core checkpoint inspect: error: CheckpointLoadError: Cannot load the checkpoint {tmp_path / name}: "
        ), result
        assert cause in result.err and "mmap" not in result.err
    # A checkpoint in torch.save's older format cannot be memory-mapped: it is read whole.
    torch.save({"state_dict": {"w": torch.ones(2)}, "global_step": 3}, tmp_path / "old.pt",
               _use_new_zipfile_serialization=False)  # fmt: skip
    result = core("checkpoint", "inspect", str(tmp_path / "old.pt"), "--json")
    assert result.code == 0, result
    assert json.loads(result.out)["tensors"] == {"w": {"shape": [2], "dtype": "float32"}}


def test_the_help_names_the_formats(core: Core) -> None:
    with pytest.raises(SystemExit) as exit_info:
        core("checkpoint", "inspect", "--help")
    assert exit_info.value.code == 0


def test_verify_says_intact_or_names_the_part_that_differs(
    written: tuple[Path, Any], core: Core, tmp_path: Path
) -> None:
    root, _ = written
    for name in ("model.ckpt", "sharded.ckpt"):
        result = core("checkpoint", "verify", str(root / name))
        assert result.code == 0, result
        assert result.out.startswith(f"{root / name}: verified: "), result
        assert "integrity    verified: " in core("checkpoint", "inspect", str(root / name)).out
    damaged = tmp_path / "damaged.ckpt"
    raw = bytearray((root / "model.ckpt").read_bytes())
    weight = raw.find(weights_bytes(root))
    raw[weight + 5] ^= 0x10
    damaged.write_bytes(bytes(raw))
    result = core("checkpoint", "verify", str(damaged))
    assert result.code == 1 and result.out == "", result
    assert result.err.startswith(f"core checkpoint verify: FAILED: {damaged}: record '"), result
    assert "differs from what was written" in result.err and "Traceback" not in result.err
    inspected = core("checkpoint", "inspect", str(damaged))
    assert inspected.code == 2 and "Traceback" not in inspected.err, inspected
    torch.save({"state_dict": {}}, tmp_path / "plain.pt")
    plain = core("checkpoint", "verify", str(tmp_path / "plain.pt"))
    assert plain.code == 0 and "checked: no torchplug digest, but torch's per-record CRC-32 match" in plain.out
    assert "integrity    checked: no torchplug digest" in core("checkpoint", "inspect", str(tmp_path / "plain.pt")).out
    (tmp_path / "cut.ckpt").write_bytes((root / "model.ckpt").read_bytes()[:3000])
    cut = core("checkpoint", "verify", str(tmp_path / "cut.ckpt"))
    assert cut.code == 1 and "truncated" in cut.err, cut
    missing = core("checkpoint", "verify", str(tmp_path / "nope.ckpt"))
    assert missing.code == 2 and "Checkpoint not found" in missing.err


def weights_bytes(root: Path) -> bytes:
    """A run of bytes from the middle of the first layer's weights in ``model.ckpt``."""
    weight = torch.load(root / "model.ckpt", weights_only=True)["state_dict"]["net.0.weight"]
    return weight.contiguous().numpy().tobytes()[64:96]


def test_a_cut_shard_is_named_by_inspect_and_verify(written: tuple[Path, Any], core: Core, tmp_path: Path) -> None:
    import shutil

    root, _ = written
    copy = tmp_path / "sharded.ckpt"
    shutil.copytree(root / "sharded.ckpt", copy)
    shard = next(p for p in sorted(copy.iterdir()) if p.name.endswith(".distcp"))
    shard.write_bytes(shard.read_bytes()[:500])
    inspected = core("checkpoint", "inspect", str(copy))
    assert inspected.code == 2 and "Traceback" not in inspected.err, inspected
    assert f"{copy}/{shard.name}: truncated: the shard file is 500 bytes" in inspected.err
    verified = core("checkpoint", "verify", str(copy))
    assert verified.code == 1 and f"{copy}/{shard.name}: truncated" in verified.err, verified
