"""INSTALL_HINTS is generated from the first-party packages' own registrations, and the committed table is current."""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

import pytest

from torchplug import UnknownPluginError
from torchplug._install_hints import INSTALL_HINTS
from torchplug._registry import KINDS, Registry

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "tools" / "gen-install-hints"
COMMITTED = ROOT / "packages" / "core" / "src" / "torchplug" / "_install_hints.py"


@pytest.fixture(scope="module")
def generator() -> dict[str, Any]:
    """The functions of tools/gen-install-hints (run as a module, not as the command)."""
    return runpy.run_path(str(GENERATOR), run_name="gen_install_hints")


def test_the_committed_table_is_what_the_generator_writes(generator: dict[str, Any]) -> None:
    expected = generator["render"](generator["collect"]())
    assert COMMITTED.read_text(encoding="utf-8") == expected, (
        "packages/core/src/torchplug/_install_hints.py is stale: the packages' _plugin.py registrations changed. "
        "Hint: run tools/gen-install-hints and commit the result."
    )


def test_the_generator_finds_every_first_party_package(generator: dict[str, Any]) -> None:
    found = {plugin.distribution for plugin in generator["first_party_plugins"]()}
    assert found == {
        "accel-cuda",
        "accel-tpu",
        "accel-ipu",
        "accel-hpu",
        "accel-mps",
        "env-slurm",
        "io-xla",
        "strategy-deepspeed",
        "strategy-horovod",
        "logger-mlflow",
        "logger-wandb",
    }


def test_every_first_party_name_and_alias_has_a_hint(generator: dict[str, Any]) -> None:
    """Each plugin module's hooks run against the real Registry; each entry's names map to its distribution."""
    checked = 0
    for plugin in generator["first_party_plugins"]():
        for kind, registry in generator["run_hooks"](plugin, Registry).items():
            for entry in registry.entries():
                for name in (entry.name, *entry.aliases):
                    assert INSTALL_HINTS[kind].get(name) == plugin.distribution, (kind, name)
                    checked += 1
    assert checked >= 20


def test_the_table_has_every_kind_and_the_names_that_drifted_before() -> None:
    assert tuple(INSTALL_HINTS) == KINDS
    assert INSTALL_HINTS["precision"]["xla-bf16-mixed"] == "accel-tpu"
    assert INSTALL_HINTS["precision"]["fp8"] == "accel-hpu"  # the user's name that hpu-fp8 serves


def test_the_registry_uses_the_generated_table() -> None:
    import torchplug._registry

    assert torchplug._registry.INSTALL_HINTS is INSTALL_HINTS
    with pytest.raises(UnknownPluginError, match="Hint: pip install accel-tpu"):
        Registry("precision").resolve("xla-bf16-mixed")


def test_check_mode_reports_a_stale_table_and_writing_fixes_it(tmp_path: Path) -> None:
    own = runpy.run_path(str(GENERATOR), run_name="gen_install_hints")  # its OUTPUT is changed below
    stale = tmp_path / "_install_hints.py"
    stale.write_text("INSTALL_HINTS = {}\n", encoding="utf-8")
    own["main"].__globals__.update(OUTPUT=stale, ROOT=tmp_path)
    assert own["main"](["--check"]) == 1
    assert own["main"]([]) == 0
    assert own["main"](["--check"]) == 0
    assert stale.read_text(encoding="utf-8") == COMMITTED.read_text(encoding="utf-8")
