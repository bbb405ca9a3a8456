"""The hostlist parser: every form SLURM writes into SLURM_*_NODELIST, in scontrol's order.

The expected lists were printed by ``scontrol show hostnames`` (SLURM 22.05);
``test_cluster.py::test_hostlist_matches_scontrol`` checks them against the real scontrol.
"""

from __future__ import annotations

import pytest

from torchplug_slurm._hostlist import MAX_RANGE, HostlistError, expand_hostlist, first_host, iter_hostlist

CASES = {
    "single": ("vm", ["vm"]),
    "range": ("node[1-3]", ["node1", "node2", "node3"]),
    "zero-padding": ("node[001-010]", [f"node{i:03d}" for i in range(1, 11)]),
    "padding-from-lower-bound": (
        "n[9-11],x[009-11],y[1-010]",
        ["n9", "n10", "n11", "x009", "x010", "x011", *[f"y{i}" for i in range(1, 11)]],
    ),
    "padding-crossing-width": ("n[099-101]", ["n099", "n100", "n101"]),
    "comma-inside-brackets": ("node[1,3-4,07]", ["node1", "node3", "node4", "node07"]),
    "comma-list": ("a,b,c", ["a", "b", "c"]),
    "whitespace-list": ("a b\tc", ["a", "b", "c"]),
    "empty-items-skipped": (",n[1-2],,x,", ["n1", "n2", "x"]),
    "digits-before-bracket": ("n1[0-2]", ["n10", "n11", "n12"]),
    "bracket-only": ("[1-2]", ["1", "2"]),
    "single-number-bracket": ("n[05]", ["n05"]),
    "duplicates-kept": ("n[1-2],n[2-3]", ["n1", "n2", "n2", "n3"]),
    "two-brackets": ("rack[1-2]-node[01-04]", [f"rack{r}-node{n:02d}" for r in (1, 2) for n in range(1, 5)]),
    "two-brackets-and-host": (
        "rack[1-2]-node[01-04],gpu7",
        [*(f"rack{r}-node{n:02d}" for r in (1, 2) for n in range(1, 5)), "gpu7"],
    ),
    "three-brackets-slurm-order": (
        "a[1-2]b[3-4]c[5,7]",
        ["a1b3c5", "a1b3c7", "a2b3c5", "a2b3c7", "a1b4c5", "a1b4c7", "a2b4c5", "a2b4c7"],
    ),
    "four-brackets-slurm-order": (
        "a[1-2]b[3-4]c[5-6]d[7-8]",  # c slowest, then b, then a; d fastest
        [f"a{a}b{b}c{c}d{d}" for c in (5, 6) for b in (3, 4) for a in (1, 2) for d in (7, 8)],
    ),
    "separator-between-brackets": ("n[1-2]-[3-4]", ["n1-3", "n1-4", "n2-3", "n2-4"]),
    "huge-numbers": ("n[4294967295-4294967296]", ["n4294967295", "n4294967296"]),
    "fqdn": ("node-1.example.com", ["node-1.example.com"]),
    "suffix-after-bracket": ("node[1-2].ib", ["node1.ib", "node2.ib"]),  # newer SLURM; 22.05 rejects it
}


@pytest.mark.parametrize(("hostlist", "expected"), list(CASES.values()), ids=list(CASES))
def test_expand(hostlist: str, expected: list[str]) -> None:
    assert expand_hostlist(hostlist) == expected
    assert first_host(hostlist) == expected[0]


def test_lightning_gets_rack1_we_get_the_first_host() -> None:
    assert first_host("rack[1-2]-node[01-04],gpu7") == "rack1-node01"
    assert len(expand_hostlist("rack[1-2]-node[01-04],gpu7")) == 9


def test_first_host_is_lazy() -> None:
    hosts = iter_hostlist(f"n[0-{MAX_RANGE - 1}]x[0-{MAX_RANGE - 1}]")  # 4 billion names
    assert next(hosts) == "n0x0"
    assert first_host(f"n[0-{MAX_RANGE - 1}]x[0-{MAX_RANGE - 1}]") == "n0x0"


def test_limit() -> None:
    assert expand_hostlist("n[1-3]", limit=3) == ["n1", "n2", "n3"]
    with pytest.raises(HostlistError, match=r"more than 2 host names"):
        expand_hostlist("n[1-3]", limit=2)


ERRORS = {
    "unclosed": ("n[1-", r"'\[' is never closed \(at position 1\)"),
    "stray-close": ("n1-2]", r"'\]' closes no '\['"),
    "nested": ("n[[1]]", r"brackets cannot be nested"),
    "empty-brackets": ("n[]", r"empty brackets"),
    "letters": ("n[a-b]", r"'a-b' is not a number or a range lo-hi"),
    "backwards": ("n[3-1]", r"the range '3-1' goes backwards"),
    "double-dash": ("n[1--3]", r"'1--3' is not a number"),
    "three-bounds": ("n[1-2-3]", r"'1-2-3' is not a number"),
    "empty-item": ("n[1,,2]", r"'' is not a number"),
    "negative": ("n[-1]", r"'-1' is not a number"),
    "whitespace-inside": ("n[ 1-2]", r"whitespace inside brackets"),
    "too-many": ("n[1-100000]", rf"holds more than {MAX_RANGE} hosts"),
}


@pytest.mark.parametrize(("hostlist", "message"), list(ERRORS.values()), ids=list(ERRORS))
def test_errors_say_what_and_where(hostlist: str, message: str) -> None:
    with pytest.raises(HostlistError, match=message) as info:
        expand_hostlist(hostlist)
    assert repr(hostlist) in str(info.value)
    assert "such as 'node[01-04,07],gpu7'" in str(info.value)


@pytest.mark.parametrize("hostlist", ["", " ", ",,"], ids=["empty", "blank", "commas"])
def test_no_host(hostlist: str) -> None:
    assert expand_hostlist(hostlist) == []
    with pytest.raises(HostlistError, match="names no host"):
        first_host(hostlist)


def test_error_is_a_value_error() -> None:
    assert issubclass(HostlistError, ValueError)
