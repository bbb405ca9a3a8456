"""ARCHITECTURE.md names every module of the core with its role, so a newcomer finds each one there."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCE = ROOT / "packages" / "core" / "src" / "torchplug"


def test_every_module_of_the_core_is_named_in_architecture_md():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    unnamed = []
    for path in sorted(SOURCE.rglob("*.py")):
        relative = path.relative_to(SOURCE).as_posix()
        name = relative[: -len("__init__.py")] if path.name == "__init__.py" else relative
        if name and f"`{name}`" not in text:
            unnamed.append(name)
    assert not unnamed, (
        f"ARCHITECTURE.md does not name {len(unnamed)} module(s) of the core: {', '.join(unnamed)}. "
        "Hint: add each to the module table with its one-line role (`python tools/module-table` prints one)."
    )
