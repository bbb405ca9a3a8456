"""Instruction counts of marked regions of a child process, under valgrind's callgrind.

A measured child runs under ``valgrind --tool=callgrind --instr-atstart=no``: nothing is counted
(and the interpreter runs about ten times faster than when instrumented) until the child calls
:func:`region`, which zeroes the counters, instruments the block it wraps and writes its count
into a dump named after the region. Start-up (the interpreter, ``import torch``) and whatever the
child does outside a region are left out, so a region's count is the same from run to run and
from host to host, whatever else the host runs.

The memory allocators are left out of every count (callgrind's ``--toggle-collect`` on their entry
points, :data:`ALLOCATORS`): how many instructions one ``malloc`` takes depends on the heap's
history (which bins hold what), not on the code measured. Measured on the lean step: the same
841 ``malloc`` calls a step took 3,000 instructions more in one build than another whose Python
code differed by one call, and the allocators' share moved by ±4,000 instructions a step between
builds, against ±1,000 for all the rest. A change that allocates more still shows: the objects'
construction, reference counting and destruction are counted.

Python cannot issue valgrind's client requests itself: ``gate/callgrind_marks.c`` does, compiled
once with the C compiler into a small shared library that the child loads with ctypes. The parent
passes the library's path in ``TORCHPLUG_CALLGRIND_MARKS``; without it (a native run) a region is
a plain block.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Final

MARKS_ENV: Final = "TORCHPLUG_CALLGRIND_MARKS"
SOURCE: Final = Path(__file__).resolve().parent / "gate" / "callgrind_marks.c"
HEADER: Final = "valgrind/callgrind.h"

#: The allocators' entry points whose instructions (their callees' included) are not counted: glibc's
#: and CPython's object allocator (pymalloc).
ALLOCATORS: Final = (
    "malloc", "free", "calloc", "realloc", "posix_memalign", "aligned_alloc", "memalign",
    "_PyObject_Malloc", "_PyObject_Calloc", "_PyObject_Realloc", "_PyObject_Free",
)  # fmt: skip

_library: ctypes.CDLL | None = None


class CallgrindError(RuntimeError):
    """Callgrind, the C compiler or a measured child failed; the message says which and how to fix it."""


@contextlib.contextmanager
def region(name: str) -> Iterator[None]:
    """Count the instructions of the block under callgrind, as the dump ``name`` (a plain block otherwise)."""
    global _library
    path = os.environ.get(MARKS_ENV)
    if not path:
        yield
        return
    if _library is None:
        _library = ctypes.CDLL(path)
        _library.torchplug_region_end.argtypes = [ctypes.c_char_p]
    _library.torchplug_region_begin()
    try:
        yield
    finally:
        _library.torchplug_region_end(name.encode())


def marks_library(cache: Path | None = None) -> Path:
    """The compiled marks library, built on first use into ``cache`` (keyed by the source's digest)."""
    if shutil.which("valgrind") is None:
        raise CallgrindError("valgrind is not installed. Hint: apt-get install valgrind (tools/install-system-deps).")
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise CallgrindError("no C compiler (cc or gcc) to build gate/callgrind_marks.c. Hint: apt-get install gcc.")
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:16]
    folder = cache or Path(tempfile.gettempdir()) / "torchplug-callgrind-marks"
    library = folder / f"marks-{digest}.so"
    if library.exists():
        return library
    folder.mkdir(parents=True, exist_ok=True)
    partial = library.with_suffix(f".{os.getpid()}.tmp")
    command = [compiler, "-O1", "-shared", "-fPIC", "-o", str(partial), str(SOURCE)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        hint = f" Hint: {HEADER} comes with valgrind's package." if HEADER in done.stderr else ""
        raise CallgrindError(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stderr}{hint}")
    partial.replace(library)
    return library


_DESC: Final = re.compile(r"^desc: Trigger: Client Request: (.*)$", re.MULTILINE)
_TOTALS: Final = re.compile(r"^(?:totals|summary): (\d+)", re.MULTILINE)


def read_dumps(folder: Path) -> dict[str, int]:
    """Each region's instruction count, by name, from the dumps callgrind wrote into ``folder``."""
    counts: dict[str, int] = {}
    for dump in sorted(folder.glob("callgrind.out*")):
        text = dump.read_text(errors="replace")
        name, total = _DESC.search(text), _TOTALS.search(text)
        if name is not None and total is not None:
            counts[name.group(1).strip()] = counts.get(name.group(1).strip(), 0) + int(total.group(1))
    return counts


def count_regions(argv: Sequence[str], env: Mapping[str, str] | None = None, cwd: Path | None = None) -> dict[str, int]:
    """Run ``argv`` (a Python command line) under callgrind; the instruction count of each region it marks.

    The memory allocators (:data:`ALLOCATORS`) are left out of the counts.

    The hash seed is fixed, so that dict and set orders, and with them the counts, repeat from run to run.
    """
    library = marks_library()
    with tempfile.TemporaryDirectory(prefix="torchplug-callgrind-") as tmp:
        out = Path(tmp)
        command = [
            "valgrind", "--tool=callgrind", "--instr-atstart=no", "--dump-line=no",
            *(f"--toggle-collect={name}" for name in ALLOCATORS),
            "--collect-atstart=yes",  # after --toggle-collect, which turns it off: collect, except in ALLOCATORS
            f"--callgrind-out-file={out}/callgrind.out", *argv,
        ]  # fmt: skip
        child_env = {**(env if env is not None else os.environ), MARKS_ENV: str(library), "PYTHONHASHSEED": "0"}
        done = subprocess.run(command, capture_output=True, text=True, check=False, env=child_env, cwd=cwd)
        if done.returncode != 0:
            raise CallgrindError(
                f"{' '.join(argv)} failed under callgrind (exit {done.returncode}):\n{done.stderr[-3000:]}"
            )
        counts = read_dumps(out)
    if not counts:
        raise CallgrindError(f"{' '.join(argv)} marked no region (see benchmarks/_callgrind.py region()).")
    return counts


def python_command(*args: str) -> list[str]:
    """A command line that runs this interpreter with ``args``."""
    return [sys.executable, *args]
