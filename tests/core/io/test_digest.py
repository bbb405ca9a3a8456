"""Checkpoints carry their own integrity: a save seals the file, a load verifies it and names what differs.

* Every file a ``torch`` or ``async`` save writes ends with torchplug's seal in the zip comment,
  and stays an ordinary checkpoint for ``torch.load`` and any zip reader.
* One byte flipped inside a tensor's data (bit rot) is refused on load, naming the file and the
  record; one flipped in the archive's directory is refused naming the directory.
* A file without a seal (``torch.save``'s, Lightning's) loads as before, said once per process.
* A sharded (DCP) directory: a flipped byte, a cut shard or a missing shard is refused on load,
  naming the shard file.
"""

from __future__ import annotations

import logging
import struct
import zipfile
from pathlib import Path

import pytest
import torch

import torchplug
from torchplug.io import AsyncCheckpointIO, TorchCheckpointIO
from torchplug.io import torch_io as torch_io_module
from torchplug.io._digest import SEAL_PREFIX, IntegrityError, verify_file

CHECKPOINT = {"state_dict": {"layer.weight": torch.arange(4096, dtype=torch.float32)}, "global_step": 7}


def _data_offset(path: Path, suffix: str) -> int:
    """Where the data of the record whose name ends with ``suffix`` starts in the file."""
    with zipfile.ZipFile(path) as archive:
        info = next(i for i in archive.infolist() if i.filename.endswith(suffix))
    raw = path.read_bytes()
    name_length, extra_length = struct.unpack("<HH", raw[info.header_offset + 26 : info.header_offset + 30])
    return info.header_offset + 30 + name_length + extra_length


def _flip(path: Path, offset: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 0x01
    path.write_bytes(bytes(raw))


def test_a_saved_file_is_sealed_and_stays_an_ordinary_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    TorchCheckpointIO().save_checkpoint(CHECKPOINT, str(path))
    with zipfile.ZipFile(path) as archive:
        assert archive.comment.startswith(SEAL_PREFIX)
        assert archive.testzip() is None  # every record's CRC matches: a valid zip for any reader
    assert torch.equal(torch.load(path, weights_only=True)["state_dict"]["layer.weight"], torch.arange(4096.0))
    found = verify_file(str(path))
    assert found.sealed and found.records > 3 and found.bytes >= 4096 * 4


def test_an_async_save_is_sealed_too(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    io = AsyncCheckpointIO(TorchCheckpointIO())
    io.save_checkpoint(CHECKPOINT, str(path))
    io.teardown()
    assert verify_file(str(path)).sealed


def test_one_flipped_bit_in_a_tensor_is_refused_naming_the_file_and_the_record(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    TorchCheckpointIO().save_checkpoint(CHECKPOINT, str(path))
    _flip(path, _data_offset(path, "data/0") + 1000)
    with pytest.raises(torchplug.CheckpointLoadError) as info:
        TorchCheckpointIO().load_checkpoint(str(path))
    message = str(info.value)
    assert message.startswith(f"Cannot load the checkpoint {path}: record '")  # torch names it after the temp file
    assert "/data/0' (16,384 bytes at byte " in message and "differs from what was written" in message
    assert torch.load(path, weights_only=True)["global_step"] == 7  # torch alone loads the damaged file silently


def test_a_flipped_bit_in_the_archive_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    TorchCheckpointIO().save_checkpoint(CHECKPOINT, str(path))
    with zipfile.ZipFile(path) as archive:
        directory = archive.start_dir  # type: ignore[attr-defined]
    _flip(path, directory + 50)  # inside the first entry's name or sizes
    with pytest.raises(torchplug.CheckpointLoadError, match=r"the archive.s directory .* differs from the digest"):
        TorchCheckpointIO().load_checkpoint(str(path))


def test_verification_can_be_turned_off(tmp_path: Path) -> None:
    path = tmp_path / "last.ckpt"
    TorchCheckpointIO().save_checkpoint(CHECKPOINT, str(path))
    _flip(path, _data_offset(path, "data/0") + 1000)
    assert TorchCheckpointIO(verify=False).load_checkpoint(str(path))["global_step"] == 7


def test_a_file_without_a_seal_loads_as_before_said_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_io_module, "_SAID_UNSEALED", set())
    first, second = tmp_path / "lightning.ckpt", tmp_path / "older.ckpt"
    torch.save(CHECKPOINT, first)
    torch.save(CHECKPOINT, second)
    said: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: said.append(record.getMessage())  # type: ignore[method-assign]
    logger = logging.getLogger("torchplug")
    logger.addHandler(handler)
    try:
        assert TorchCheckpointIO().load_checkpoint(str(first))["global_step"] == 7
        assert TorchCheckpointIO().load_checkpoint(str(second))["global_step"] == 7
    finally:
        logger.removeHandler(handler)
    assert [line for line in said if "carries no digest" in line] == [
        f"{first} carries no digest (written by Lightning, torch.save or an older torchplug): it is "
        "loaded without verification (said once). Saving it again with torchplug adds one."
    ]


def test_verify_file_checks_the_crcs_of_an_unsealed_file_when_asked(tmp_path: Path) -> None:
    path = tmp_path / "plain.pt"
    torch.save(CHECKPOINT, path)
    assert not verify_file(str(path)).records  # not asked: only the seal is looked for
    found = verify_file(str(path), check_unsealed=True)
    assert not found.sealed and found.records > 3
    _flip(path, _data_offset(path, "data/0") + 7)
    with pytest.raises(IntegrityError, match="record 'plain/data/0'"):
        verify_file(str(path), check_unsealed=True)


# -- sharded directories ---------------------------------------------------------------------------


def _sharded(tmp_path: Path) -> Path:
    from torchplug.io.dcp_io import DistributedCheckpointIO

    path = tmp_path / "sharded.ckpt"
    DistributedCheckpointIO().save_checkpoint(
        {"state_dict": {"w": torch.arange(8192, dtype=torch.float32)}, "optimizer_states": [], "global_step": 3},
        str(path),
    )
    return path


def _shard(path: Path) -> Path:
    return next(p for p in path.iterdir() if p.name.endswith(".distcp"))


def test_a_flipped_bit_in_a_shard_is_refused_naming_the_shard_file(tmp_path: Path) -> None:
    from torchplug.io.dcp_io import DistributedCheckpointIO

    path = _sharded(tmp_path)
    shard = _shard(path)
    raw = shard.read_bytes()
    at = raw.find(torch.arange(8192, dtype=torch.float32).numpy().tobytes()[4000:4016])
    assert at > 0
    _flip(shard, at + 3)
    with pytest.raises(torchplug.CheckpointLoadError) as info:
        DistributedCheckpointIO().load_checkpoint(str(path))
    message = str(info.value)
    assert (
        f"{path}/{shard.name}: item 'state_dict.w': record " in message and "differs from what was written" in message
    )


def test_a_cut_shard_and_a_missing_shard_are_named(tmp_path: Path) -> None:
    from torchplug.io.dcp_io import DistributedCheckpointIO

    path = _sharded(tmp_path)
    shard = _shard(path)
    shard.write_bytes(shard.read_bytes()[:1000])
    with pytest.raises(torchplug.CheckpointLoadError, match=f"{shard.name}: truncated: the shard file is 1,000 bytes"):
        DistributedCheckpointIO().load_checkpoint(str(path))
    shard.unlink()
    with pytest.raises(torchplug.CheckpointLoadError, match=f"{shard.name}: shard file missing"):
        DistributedCheckpointIO().load_checkpoint(str(path))


def test_a_directory_without_its_metadata_is_named_as_such(tmp_path: Path) -> None:
    from torchplug.io.dcp_io import DistributedCheckpointIO

    path = _sharded(tmp_path)
    (path / ".metadata").unlink()
    with pytest.raises(torchplug.CheckpointLoadError, match=r"it is a directory without \.metadata"):
        DistributedCheckpointIO().load_checkpoint(str(path))
