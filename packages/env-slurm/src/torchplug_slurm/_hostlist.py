"""SLURM hostlists: ``rack[1-2]-node[01-04],gpu7`` expanded to host names, as ``scontrol show hostnames`` does.

The grammar (the one SLURM writes into ``SLURM_JOB_NODELIST`` and friends):

* Host expressions are separated by commas or whitespace outside brackets; empty ones are skipped.
* A bracket holds comma-separated numbers and ``lo-hi`` ranges: ``node[1,3-5]``.
* Every number of a range is zero-padded to the width of its lower bound, as SLURM does:
  ``node[001-010]`` gives ``node001``…``node010``; ``node[9-11]`` gives ``node9``, ``node10``, ``node11``.
* An expression may hold several brackets; it expands to every combination, in SLURM's order: the
  last bracket varies fastest, then the first, the second, and so on
  (``rack[1-2]-node[01-04]`` gives ``rack1-node01``…``rack1-node04``, ``rack2-node01``…).
* Text may follow a bracket (``node[1-2].ib``); SLURM 22.05 rejects that, newer versions accept it.

Pure Python, no I/O: it never runs ``scontrol``. Expanding is lazy, so :func:`first_host` of a
list of thousands of nodes costs almost nothing.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

__all__ = ["MAX_RANGE", "HostlistError", "expand_hostlist", "first_host", "iter_hostlist"]

#: The most hosts one bracket range may hold (SLURM's own limit, ``MAX_RANGE``).
MAX_RANGE: Final = 64 * 1024

_EXAMPLE: Final = "Expected host names with bracketed ranges, such as 'node[01-04,07],gpu7'."
_RANGE_RE: Final = re.compile(r"(\d+)(?:-(\d+))?")


class HostlistError(ValueError):
    """A hostlist that SLURM's grammar does not allow; the message shows where."""


@dataclass(frozen=True, slots=True)
class _Range:
    """The numbers of one bracket, already formatted with their zero padding."""

    pieces: tuple[tuple[int, int, int], ...]  # (lo, hi, width)

    def __iter__(self) -> Iterator[str]:
        for lo, hi, width in self.pieces:
            for number in range(lo, hi + 1):
                yield f"{number:0{width}d}"


def iter_hostlist(hostlist: str) -> Iterator[str]:
    """Yield the host names of ``hostlist`` one by one, in SLURM's order.

    The whole hostlist is checked before the first name is yielded.

    Raises:
        HostlistError: Unbalanced or nested brackets, or a bracket that is not numbers and ranges.
    """
    expressions = [_parse_expression(hostlist, text, start) for text, start in _split(hostlist)]
    for parts in expressions:
        yield from _expand(parts)


def expand_hostlist(hostlist: str, limit: int | None = None) -> list[str]:
    """All host names of ``hostlist``, in SLURM's order (duplicates kept, as SLURM keeps them).

    Args:
        hostlist: For example ``"rack[1-2]-node[01-04],gpu7"``.
        limit: Refuse to expand more than this many names (default: no limit beyond
            :data:`MAX_RANGE` per bracket range).

    Raises:
        HostlistError: The hostlist is malformed, or it holds more than ``limit`` names.
    """
    hosts = list(itertools.islice(iter_hostlist(hostlist), None if limit is None else limit + 1))
    if limit is not None and len(hosts) > limit:
        raise HostlistError(f"The SLURM hostlist {hostlist!r} holds more than {limit} host names.")
    return hosts


def first_host(hostlist: str) -> str:
    """The first host name of ``hostlist`` (where SLURM puts task 0 of a step).

    Raises:
        HostlistError: The hostlist is malformed or names no host.
    """
    for host in iter_hostlist(hostlist):
        return host
    raise HostlistError(f"The SLURM hostlist {hostlist!r} names no host. {_EXAMPLE}")


def _split(hostlist: str) -> Iterator[tuple[str, int]]:
    """The host expressions of ``hostlist`` with their offsets, split at top-level commas and whitespace."""
    start, depth = 0, 0
    for position, char in enumerate(hostlist):
        if char == "[":
            if depth:
                raise _error(hostlist, position, "brackets cannot be nested")
            depth = 1
        elif char == "]":
            if not depth:
                raise _error(hostlist, position, "']' closes no '['")
            depth = 0
        elif char == "," or char.isspace():
            if depth and char.isspace():
                raise _error(hostlist, position, "whitespace inside brackets")
            if not depth:
                if position > start:
                    yield hostlist[start:position], start
                start = position + 1
    if depth:
        raise _error(hostlist, hostlist.rindex("["), "'[' is never closed")
    if len(hostlist) > start:
        yield hostlist[start:], start


def _parse_expression(hostlist: str, text: str, offset: int) -> list[str | _Range]:
    """Split one expression into literal text and bracket ranges: ``a[1-2]b`` → ``["a", _Range, "b"]``."""
    parts: list[str | _Range] = []
    for match in re.finditer(r"\[([^\]]*)\]|[^\[]+", text):
        if match.group(0).startswith("["):
            parts.append(_parse_range(hostlist, match.group(1), offset + match.start()))
        else:
            parts.append(match.group(0))
    return parts


def _parse_range(hostlist: str, body: str, position: int) -> _Range:
    if not body:
        raise _error(hostlist, position, "empty brackets")
    pieces = []
    for piece in body.split(","):
        match = _RANGE_RE.fullmatch(piece)
        if match is None:
            raise _error(hostlist, position, f"{piece!r} is not a number or a range lo-hi")
        lo_text, hi_text = match.group(1), match.group(2)
        lo, hi = int(lo_text), int(hi_text if hi_text is not None else lo_text)
        if hi < lo:
            raise _error(hostlist, position, f"the range {piece!r} goes backwards")
        if hi - lo + 1 > MAX_RANGE:
            raise _error(hostlist, position, f"the range {piece!r} holds more than {MAX_RANGE} hosts")
        pieces.append((lo, hi, len(lo_text)))
    return _Range(tuple(pieces))


def _expand(parts: list[str | _Range]) -> Iterator[str]:
    """Every combination of the ranges of one expression, in SLURM's order."""
    slots = [i for i, part in enumerate(parts) if isinstance(part, _Range)]
    if not slots:
        yield "".join(str(part) for part in parts)
        return
    # SLURM varies the last bracket fastest, then the first, the second, ...: iterate the others
    # from the second-to-last down to the first (slowest first), with the last one innermost.
    order = [*reversed(slots[:-1]), slots[-1]]
    ranges = [parts[i] for i in order]
    for values in itertools.product(*ranges):  # type: ignore[call-overload]
        filled = list(parts)
        for slot, value in zip(order, values):
            filled[slot] = value
        yield "".join(str(part) for part in filled)


def _error(hostlist: str, position: int, problem: str) -> HostlistError:
    return HostlistError(f"Invalid SLURM hostlist {hostlist!r}: {problem} (at position {position}). {_EXAMPLE}")
