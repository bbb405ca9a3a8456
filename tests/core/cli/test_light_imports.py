"""``import torchplug.cli`` and the commands that only list plugins import neither torch nor jsonargparse."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("torch", "jsonargparse")
REPORT = "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'jsonargparse'}), file=sys.stderr)"


def heavy_modules(code: str, *args: str) -> str:
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False
    )
    return result.stderr.strip().splitlines()[-1]


def test_import_torchplug_cli_is_light() -> None:
    code = f"import sys, torchplug, torchplug.cli\nfrom torchplug.cli import main\n{REPORT}"
    assert heavy_modules(code) == "[]"


@pytest.mark.parametrize(
    "command", [["plugins", "list"], ["plugins", "list", "--json"], ["--help"], ["--version"]], ids=" ".join
)
def test_listing_commands_are_light(command: list[str]) -> None:
    code = (
        "import runpy, sys; sys.argv = ['core', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('torchplug', run_name='__main__')\nexcept SystemExit:\n    pass\n" + REPORT
    )
    assert heavy_modules(code, *command) == "[]"


def test_trainer_cli_loads_on_first_use() -> None:
    code = f"import sys\nfrom torchplug.cli import TrainerCLI\n{REPORT}"
    assert heavy_modules(code) == str(sorted(HEAVY))
