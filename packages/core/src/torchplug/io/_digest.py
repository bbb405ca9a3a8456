"""The integrity of checkpoint files: the digest a save records, and its verification without loading a model.

What a checkpoint file carries. ``torch.save`` writes a zip archive and, while it writes, computes
the CRC-32 of every record (each tensor's storage, the pickled structure) into the archive's
central directory: every byte of content is covered by a checksum computed while it was written,
at no cost of ours. After ``torch.save`` returns, torchplug *seals* the file: it appends to the
archive's comment (the last bytes of the file, which ``torch.load``, Lightning and every zip
reader ignore) a BLAKE2b digest of the central directory, that is of the record names, sizes,
offsets and CRCs. The seal is written into the hidden temporary file before it is renamed into
place, so a checkpoint under its final name is sealed or absent, never half-sealed.

Why not one BLAKE2b of the whole stream: on the reference host BLAKE2b hashes at a fifth of
memory bandwidth, so a save would cost about 1.5x ``torch.save``; the CRCs torch computes
anyway cost nothing more, detect every error of up to 32 consecutive bits in a record, and
name the record that differs.

Verification (:func:`verify_file`) checks the seal, then recomputes every record's CRC from the
file (memory-mapped when local, on several threads) and names the first record that differs.
A file without a seal (Lightning's, torchplug's before the seal, ``torch.save``'s) is reported as
such; its CRCs are checked only when asked (``core checkpoint verify``).

A sharded (DCP) directory is made of such archives too: DCP writes every tensor and blob of a
shard file with ``torch.save``, so :func:`verify_directory` checks each item's records, and names
the shard file and the item that differ, or the shard that is missing or cut short.
"""

from __future__ import annotations

import hashlib
import io
import mmap
import os
import struct
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any, Final

__all__ = [
    "DIRECTORY_SEAL",
    "SEAL_PREFIX",
    "IntegrityError",
    "Verification",
    "read_seal",
    "seal_directory",
    "seal_file",
    "verify_directory",
    "verify_file",
]

#: The start of the zip comment a sealed checkpoint ends with; the hex BLAKE2b-128 of the central directory follows.
SEAL_PREFIX: Final = b"torchplug-digest v1 crc32+blake2b-128:"
_EOCD: Final = struct.Struct("<4sHHHHIIH")  # end of central directory record, without its comment
_EOCD_SIGNATURE: Final = b"PK\x05\x06"
_LOCAL_HEADER: Final = struct.Struct("<4sHHHHHIIIHH")
#: Records past this many bytes are checked on a thread of their own.
_PARALLEL_MIN_BYTES: Final = 8 << 20


class IntegrityError(ValueError):
    """A checkpoint's bytes are not those written: the message names the file and the part that differs.

    Attributes:
        path: The file (a shard file of a sharded checkpoint).
        reason: What is wrong, without the path.
    """

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Verification:
    """What a verification found (when it raised nothing).

    Attributes:
        sealed: The file carries torchplug's seal (its directory digest matched).
        records: How many records had their CRC-32 checked (0 when only the seal was read).
        bytes: How many bytes of records were checked.
    """

    sealed: bool
    records: int
    bytes: int

    def describe(self) -> str:
        """One line for people: what was verified."""
        if not self.records:
            return "not verified: no digest recorded (written by Lightning, torch.save or an older torchplug)"
        what = f"{self.records} record(s), {self.bytes:,} bytes, CRC-32 each"
        if self.sealed:
            return f"verified: torchplug digest of the directory and {what}"
        return f"checked: no torchplug digest, but torch's per-record CRC-32 match ({what})"


def _digest(directory: bytes) -> bytes:
    return SEAL_PREFIX + hashlib.blake2b(directory, digest_size=16).hexdigest().encode()


def seal_file(path: str) -> bool:
    """Append the seal to the zip archive that ``torch.save`` has just written at ``path``; False when it cannot.

    Only the central directory is read back (kilobytes, from the page cache): the records' data
    were checksummed by ``torch.save`` while it wrote them.
    """
    with open(path, "r+b") as stream:
        size = stream.seek(0, os.SEEK_END)
        if size < _EOCD.size:
            return False
        stream.seek(size - _EOCD.size)
        fields = _EOCD.unpack(stream.read(_EOCD.size))
        if fields[0] != _EOCD_SIGNATURE or fields[-1] != 0:
            return False  # not torch's zip, or already has a comment
        start = _directory_start(stream)
        if start is None:
            return False
        stream.seek(start)
        seal = _digest(stream.read(size - _EOCD.size - start))
        stream.seek(size - 2)
        stream.write(struct.pack("<H", len(seal)) + seal)
    return True


def _directory_start(stream: IO[bytes]) -> int | None:
    try:
        with zipfile.ZipFile(stream) as archive:
            return int(archive.start_dir)  # type: ignore[attr-defined]
    except (zipfile.BadZipFile, OSError, ValueError):
        return None


def read_seal(stream: IO[bytes], size: int) -> bytes | None:
    """The zip comment at the end of ``stream`` (``size`` bytes) when it is torchplug's seal, else None."""
    tail = min(size, _EOCD.size + len(SEAL_PREFIX) + 32)
    stream.seek(size - tail)
    end = stream.read(tail)
    at = end.rfind(SEAL_PREFIX)
    if at < 0 or at < _EOCD.size or end[at - _EOCD.size : at - _EOCD.size + 4] != _EOCD_SIGNATURE:
        return None
    return end[at:]


def verify_file(
    path: str, stream: IO[bytes] | None = None, check_unsealed: bool = False, name: str | None = None
) -> Verification:
    """Check the checkpoint file at ``path`` against what was recorded when it was written.

    Args:
        path: A local path (memory-mapped), or only a name for messages when ``stream`` is given.
        stream: A readable, seekable binary stream of the file (a remote file); None: open ``path``.
        check_unsealed: Also check the records' CRCs of a file without torchplug's seal.
        name: How messages call the file (default: ``path``).

    Raises:
        IntegrityError: The file is cut short, not a zip archive, or a record differs; the message
            names the file and the part.
    """
    label = name or path
    if stream is not None:
        return _verify_stream(stream, label, check_unsealed)
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        if size == 0:
            raise IntegrityError(label, "the file is empty (0 bytes)")
        with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                return _verify_bytes(view, file, label, check_unsealed)
            finally:
                view.release()


def _verify_stream(stream: IO[bytes], label: str, check_unsealed: bool) -> Verification:
    size = stream.seek(0, os.SEEK_END)
    if size == 0:
        raise IntegrityError(label, "the file is empty (0 bytes)")
    return _verify_bytes(None, stream, label, check_unsealed)


def _verify_bytes(view: memoryview | None, stream: IO[bytes], label: str, check_unsealed: bool) -> Verification:
    size = stream.seek(0, os.SEEK_END)
    archive = _open_archive(stream, size, label)
    with archive:
        seal = read_seal(stream, size)
        if seal is None and not check_unsealed:
            return Verification(sealed=False, records=0, bytes=0)
        if seal is not None:
            start = int(archive.start_dir)  # type: ignore[attr-defined]
            stream.seek(start)
            if _digest(stream.read(size - _EOCD.size - len(seal) - start)) != seal:
                raise IntegrityError(
                    label,
                    "the archive's directory (the names, sizes and checksums of its records) differs from the digest "
                    "recorded when it was written",
                )
        records = [info for info in archive.infolist() if not info.is_dir()]
        spans = [(info, _data_offset(stream, info, size, label)) for info in records]
    checked = _check_records(view, stream, spans, label)
    return Verification(sealed=seal is not None, records=len(spans), bytes=checked)


def _open_archive(stream: IO[bytes], size: int, label: str) -> zipfile.ZipFile:
    stream.seek(0)
    head = stream.read(4)
    if head != b"PK\x03\x04":
        kind = (
            "a plain pickle (torch's legacy format)" if head[:1] == b"\x80" else f"not a zip archive (starts {head!r})"
        )
        raise IntegrityError(label, f"the file ({size:,} bytes) is {kind}: torch.save writes zip archives")
    try:
        return zipfile.ZipFile(stream)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise IntegrityError(
            label, f"truncated: the file is {size:,} bytes and its end (the archive's directory) is missing ({exc})"
        ) from exc


def _data_offset(stream: IO[bytes], info: zipfile.ZipInfo, size: int, label: str) -> int:
    stream.seek(info.header_offset)
    header = stream.read(_LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
        raise IntegrityError(
            label, f"the header of record {info.filename!r} (at byte {info.header_offset:,}) is damaged"
        )
    name_length, extra_length = _LOCAL_HEADER.unpack(header)[-2:]
    offset = int(info.header_offset) + _LOCAL_HEADER.size + int(name_length) + int(extra_length)
    if offset + info.compress_size > size:
        raise IntegrityError(
            label,
            f"truncated: record {info.filename!r} needs bytes up to {offset + info.compress_size:,}, "
            f"the file has {size:,}",
        )
    return offset


def _check_records(
    view: memoryview | None, stream: IO[bytes], spans: list[tuple[zipfile.ZipInfo, int]], label: str
) -> int:
    """Recompute each record's CRC-32 (several threads for big mapped files); raise on the first that differs."""

    def crc_of(info: zipfile.ZipInfo, offset: int) -> int:
        if view is not None:
            return zlib.crc32(view[offset : offset + info.compress_size])
        stream.seek(offset)
        crc, left = 0, info.compress_size
        while left:
            chunk = stream.read(min(left, 8 << 20))
            if not chunk:
                break
            crc, left = zlib.crc32(chunk, crc), left - len(chunk)
        return crc

    checkable = [(info, offset) for info, offset in spans if info.compress_type == zipfile.ZIP_STORED]
    total = sum(info.compress_size for info, _ in checkable)
    big = [span for span in checkable if span[0].compress_size >= _PARALLEL_MIN_BYTES]
    if view is not None and len(big) > 1:
        with ThreadPoolExecutor(min(len(big), _threads()), thread_name_prefix="torchplug-verify") as pool:
            crcs = dict(zip((id(info) for info, _ in big), pool.map(lambda span: crc_of(*span), big)))
    else:
        crcs = {}
    for info, offset in checkable:
        crc = crcs.get(id(info))
        if crc is None:
            crc = crc_of(info, offset)
        if info.CRC and crc != info.CRC:  # 0: written with torch's CRCs turned off
            raise IntegrityError(
                label,
                f"record {info.filename!r} ({info.compress_size:,} bytes at byte {offset:,}) differs from what was "
                f"written (CRC-32 {crc:08x}, recorded {info.CRC:08x})",
            )
    return total


def _threads() -> int:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cpus))


#: The file of a sharded checkpoint directory that holds the digest of its ``.metadata`` (the seal of the directory).
DIRECTORY_SEAL: Final = ".torchplug-digest"


def seal_directory(fs: Any, fs_path: str) -> None:
    """Write the seal of the finished sharded directory ``fs_path`` (before it is renamed into place).

    The items of each shard file were checksummed by ``torch.save`` as DCP wrote them; the seal
    covers the ``.metadata`` that lists them (their files, offsets and lengths).
    """
    with fs.open(f"{fs_path}/.metadata", "rb") as stream:
        seal = _digest(stream.read())
    with fs.open(f"{fs_path}/{DIRECTORY_SEAL}", "wb") as stream:
        stream.write(seal)


def _check_directory_seal(path: str, fs: Any, fs_path: str) -> bool:
    if not fs.exists(f"{fs_path}/{DIRECTORY_SEAL}"):
        return False
    with fs.open(f"{fs_path}/{DIRECTORY_SEAL}", "rb") as stream:
        recorded = stream.read()
    with fs.open(f"{fs_path}/.metadata", "rb") as stream:
        if _digest(stream.read()) != recorded:
            raise IntegrityError(
                f"{path.rstrip('/')}/.metadata",
                "differs from the digest recorded when the checkpoint was written (the list of shard files and items)",
            )
    return True


def verify_directory(path: str, fs: Any, fs_path: str, metadata: Any) -> Verification:
    """Check every item of the sharded (DCP) checkpoint at ``fs_path``, described by its ``metadata``.

    Raises:
        IntegrityError: A shard file is missing or cut short, or an item's records differ; the
            message names the shard file (and the item).
    """
    sealed = _check_directory_seal(path, fs, fs_path)
    storage: dict[Any, Any] = dict(getattr(metadata, "storage_data", None) or {})
    by_file: dict[str, list[tuple[Any, Any]]] = {}
    for index, info in storage.items():
        by_file.setdefault(info.relative_path, []).append((index, info))
    records = checked = 0
    for relative, items in sorted(by_file.items()):
        shard = f"{fs_path}/{relative}"
        label = f"{path.rstrip('/')}/{relative}"
        if not fs.exists(shard):
            raise IntegrityError(
                label, f"shard file missing (the checkpoint's .metadata lists {len(items)} item(s) in it)"
            )
        size = int(fs.size(shard))
        with fs.open(shard, "rb") as stream:
            for index, info in sorted(items, key=lambda item: int(item[1].offset)):
                end = int(info.offset) + int(info.length)
                if end > size:
                    raise IntegrityError(
                        label,
                        f"truncated: the shard file is {size:,} bytes, item {index.fqn!r} needs bytes up to {end:,}",
                    )
                if getattr(info, "transform_descriptors", None):
                    continue  # compressed or otherwise transformed by a DCP extension: no torch.save archive
                stream.seek(int(info.offset))
                part = io.BytesIO(stream.read(int(info.length)))
                try:
                    found = _verify_bytes(None, part, label, check_unsealed=True)
                except IntegrityError as exc:
                    raise IntegrityError(label, f"item {index.fqn!r}: {exc.reason}") from exc
                records += found.records
                checked += found.bytes
    return Verification(sealed=sealed, records=records, bytes=checked)
