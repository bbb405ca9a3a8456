"""``core``, the ``torchplug`` console script and ``python -m torchplug`` are one command."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.integration.conftest import Result, Scenario, Wheel

pytestmark = pytest.mark.slow

LAUNCHERS = {
    "torchplug-script": ("torchplug",),
    "python-m-torchplug": ("python", "-m", "torchplug"),
}

#: A timing in the text output: ``load_ms       0.835``.
TIMING = re.compile(r"^(\s+load_ms\s+)[\d.]+$", re.MULTILINE)

COMMANDS = {
    "list": ["plugins", "list"],
    "list-json": ["plugins", "list", "--json"],
    "list-check": ["plugins", "list", "--check"],
    "list-kind": ["plugins", "list", "--kind", "accelerators"],
    "show": ["plugins", "show", "xpu"],
    "show-broken": ["plugins", "show", "npu"],
    "show-unknown": ["plugins", "show", "nosuchname"],
    "version": ["--version"],
    "no-command": [],
}


@pytest.fixture(scope="module")
def as_core() -> dict[tuple[str, ...], Result]:
    """What ``core`` printed for each command, run once for every launcher to compare with."""
    return {}


def _without_timings(data: Any) -> Any:
    """A JSON document without its timings (``*_ms``, ``seconds``), which differ from run to run."""
    if isinstance(data, dict):
        return {k: _without_timings(v) for k, v in data.items() if not k.endswith("_ms") and k != "seconds"}
    if isinstance(data, list):
        return [_without_timings(v) for v in data]
    return data


def _comparable(result: Result) -> tuple[int, Any, str]:
    """Exit code, output without its timings, and stderr."""
    if result.stdout.startswith("{"):
        return result.returncode, _without_timings(result.json()), result.stderr
    return result.returncode, TIMING.sub(r"\1", result.stdout), result.stderr


@pytest.mark.parametrize("command", list(COMMANDS.values()), ids=list(COMMANDS))
@pytest.mark.parametrize("launcher", list(LAUNCHERS.values()), ids=list(LAUNCHERS))
def test_every_launcher_behaves_like_core(
    zoo: Scenario, as_core: dict[tuple[str, ...], Result], launcher: tuple[str, ...], command: list[str]
) -> None:
    key = tuple(command)
    if key not in as_core:
        as_core[key] = zoo.core(*command)
    expected = as_core[key]
    got = zoo.run(*launcher, *command)
    assert _comparable(got) == _comparable(expected), f"{got}\n\nexpected, as core:\n{expected}"


def test_version(zoo: Scenario, core_wheel: Wheel) -> None:
    result = zoo.core("--version")
    assert (result.returncode, result.stdout) == (0, f"core {core_wheel.version}\n")
