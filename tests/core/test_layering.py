"""The layer drawing of ARCHITECTURE.md, held: a lower layer imports no higher one at run time.

The drawing, from the top: user code and the ``core`` command (``cli/``), the callbacks and the
tuner beside it; the Trainer (``trainer/``); the run and its loops (``loops/``); assembly; the six
plugin kinds (base classes and the core's built-in implementations); the plugin system. Each rule
below names the modules of one layer and the packages above it that they must not import at run
time. Imports under ``if TYPE_CHECKING:`` are type annotations only and are allowed; an import
inside a function is a run-time import like any other (it runs as soon as the function does).

The modules are read, not imported (their syntax tree is searched for imports), so a violation
anywhere is found, with its ``file:line``, whether or not a test happens to run that function.
The check follows imports through the core's other modules (``utilities/``...): a plugin-layer
module that imports a helper which imports the Trainer breaks the rule too, and the message shows
the chain. To add a layer (or a package to a layer), add a :class:`Rule` to :data:`RULES`.
"""

from __future__ import annotations

import ast
import importlib.util
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import pytest

#: The layers above the plugin layer: what a plugin, a base class or the plugin system never imports.
RUN_LAYER: Final = (
    "torchplug.trainer",
    "torchplug.loops",
    "torchplug.callbacks",
    "torchplug.core",
    "torchplug.cli",
    "torchplug.tuner",
)

#: The Trainer itself: what the loops never import (they receive the run state and collaborators instead).
TRAINER_FACADE: Final = (
    "torchplug.trainer.trainer",
    "torchplug.trainer.run",
    "torchplug.trainer.properties",
    "torchplug.trainer.connector",
)

#: The plugin system: hook specs, discovery, the registry (a lookup table) and the boundary that calls plugin code.
PLUGIN_SYSTEM: Final = (
    "torchplug.hookspecs",
    "torchplug._discovery",
    "torchplug._host",
    "torchplug._registry",
    "torchplug._boundary",
    "torchplug._settings",
    "torchplug._builtin",
    "torchplug._listing",
    "torchplug._deadline",
    "torchplug._errors",
    "torchplug._install_hints",
)

#: The six plugin kinds: each package holds the base class and the core's built-in implementations.
PLUGIN_KINDS: Final = (
    "torchplug.accelerators",
    "torchplug.strategies",
    "torchplug.precision",
    "torchplug.io",
    "torchplug.environments",
    "torchplug.loggers",
)


@dataclass(frozen=True)
class Rule:
    """One layer of the drawing: its modules (names or package prefixes) and what they must not import."""

    layer: str
    modules: tuple[str, ...]
    forbidden: tuple[str, ...]
    allowed: tuple[str, ...] = ()  # exceptions inside a forbidden package (a base class the layer calls)

    def forbids(self, module: str) -> bool:
        return _within(module, self.forbidden) and not _within(module, self.allowed)


RULES: Final = (
    Rule("plugin system", PLUGIN_SYSTEM, RUN_LAYER),
    Rule("plugin kinds (base classes and built-ins)", PLUGIN_KINDS, RUN_LAYER),
    # The loops use the run's collaborators (trainer/states, hooks, metrics, data, checkpoint_connector...),
    # handed to them or imported as functions, but never the Trainer facade, its runner or its properties.
    # The hook runner knows the Callback base class (the hooks' interface), not the callbacks themselves.
    Rule(
        "loops",
        ("torchplug.loops",),
        (*TRAINER_FACADE, "torchplug.callbacks", "torchplug.cli", "torchplug.tuner"),
        allowed=("torchplug.callbacks.callback",),
    ),
)


@dataclass(frozen=True)
class Import:
    """One run-time import: the module it is in, where, and the module it loads."""

    importer: str
    path: Path
    line: int
    target: str

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root.parent)}:{self.line}"


def _within(name: str, prefixes: tuple[str, ...]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def runtime_imports(source: str, module: str, path: Path) -> list[Import]:
    """Every import in ``source`` that runs at run time: anywhere but under ``if TYPE_CHECKING:``.

    ``from package import name`` yields ``package.name`` (it loads that submodule when there is
    one, and ``package`` in any case); relative imports are made absolute.
    """
    found: list[Import] = []
    package = _package_of(module, path)

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for other in child.orelse:
                    visit_one(other)
                continue
            visit_one(child)

    def visit_one(node: ast.AST) -> None:
        if isinstance(node, ast.Import):
            found.extend(Import(module, path, node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, base] if base else parts)
            found.append(Import(module, path, node.lineno, base))
            found.extend(Import(module, path, node.lineno, f"{base}.{alias.name}") for alias in node.names)
        visit(node)

    visit(ast.parse(source, str(path)))
    return found


def _source_root() -> Path:
    spec = importlib.util.find_spec("torchplug")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the ``torchplug`` package: dotted name → file."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        modules[name] = path
    return modules


def _loaded_by(target: str, modules: dict[str, Path]) -> Iterator[str]:
    """The modules of the core that importing ``target`` runs: it (when it is a module) and its packages."""
    parts = target.split(".")
    for end in range(1, len(parts) + 1):
        name = ".".join(parts[:end])
        if name in modules:
            yield name


def violations(rule: Rule, root: Path) -> list[str]:
    """Each run-time import of a forbidden module that ``rule``'s layer reaches, as ``file:line``.

    An import in the layer itself is shown alone; one in a module the layer imports (directly or
    not) is shown with the shortest chain of imports that reaches it from the layer.
    """
    modules = _modules(root)
    imports = {name: runtime_imports(path.read_text(), name, path) for name, path in modules.items()}
    shortest: dict[tuple[Path, int], tuple[Import, ...]] = {}  # the offending statement -> how it is reached
    for start in (name for name in modules if _within(name, rule.modules)):
        seen = {start}
        queue: deque[tuple[str, tuple[Import, ...]]] = deque([(start, ())])
        while queue:
            name, chain = queue.popleft()
            for imp in imports[name]:
                if not (imp.target == "torchplug" or imp.target.startswith("torchplug.")):
                    continue
                steps = (*chain, imp)
                if rule.forbids(imp.target):
                    known = shortest.get((imp.path, imp.line))
                    if known is None or len(steps) < len(known):
                        shortest[imp.path, imp.line] = steps
                    continue
                for loaded in _loaded_by(imp.target, modules):
                    if loaded not in seen and not rule.forbids(loaded):
                        seen.add(loaded)
                        queue.append((loaded, steps))
    return sorted(_describe(steps, root) for steps in shortest.values())


def _describe(steps: tuple[Import, ...], root: Path) -> str:
    last = steps[-1]
    text = f"{last.where(root)} imports {last.target}"
    if len(steps) > 1:
        text += " (reached by " + " -> ".join(f"{s.where(root)} imports {s.target}" for s in steps[:-1]) + ")"
    return text


def _params() -> Iterator[object]:
    root = _source_root()
    names = _modules(root)
    for rule in RULES:
        present = any(_within(name, rule.modules) for name in names)
        marks = () if present else (pytest.mark.skip(reason=f"no module of {', '.join(rule.modules)} exists yet"),)
        yield pytest.param(rule, id=rule.layer, marks=marks)


@pytest.mark.parametrize("rule", list(_params()))
def test_no_layer_imports_a_higher_one_at_run_time(rule: Rule) -> None:
    root = _source_root()
    found = violations(rule, root)
    assert not found, (
        f"The {rule.layer} must not import {', '.join(rule.forbidden)} at run time (ARCHITECTURE.md, the layers). "
        "Pass what it needs in, type it with a Protocol, or import it under `if TYPE_CHECKING:`. Found:\n  "
        + "\n  ".join(found)
    )


def test_every_module_of_the_plugin_system_is_named_in_the_rule() -> None:
    """A new private module at the top of the package belongs to a layer: add it to a rule (or to the drawing)."""
    root = _source_root()
    top = sorted(p.stem for p in root.glob("_*.py") if p.stem not in ("__init__", "__main__"))
    unnamed = [f"torchplug.{stem}" for stem in top if f"torchplug.{stem}" not in PLUGIN_SYSTEM]
    assert not unnamed, f"Modules of no layer: {unnamed}. Add each to PLUGIN_SYSTEM (or to another rule)."


# -- the analysis itself --------------------------------------------------------------------------


def _imports_of(source: str, module: str = "torchplug.strategies.example") -> list[tuple[int, str]]:
    path = Path("torchplug/strategies/example.py")
    return [(i.line, i.target) for i in runtime_imports(source, module, path)]


def test_function_level_imports_are_run_time_imports() -> None:
    source = (
        "def connect(module):\n"
        "    from torchplug.trainer.hooks import is_overridden\n"
        "    import torchplug.core.module\n"
    )
    assert _imports_of(source) == [
        (2, "torchplug.trainer.hooks"),
        (2, "torchplug.trainer.hooks.is_overridden"),
        (3, "torchplug.core.module"),
    ]


def test_imports_under_type_checking_are_not_but_its_else_branch_is() -> None:
    source = (
        "import typing\n"
        "if typing.TYPE_CHECKING:\n    from torchplug.trainer import Trainer\n"
        "else:\n    from torchplug.callbacks import Callback\n"
        "if TYPE_CHECKING:\n    import torchplug.core\n"
    )
    assert _imports_of(source) == [(1, "typing"), (5, "torchplug.callbacks"), (5, "torchplug.callbacks.Callback")]


def test_relative_imports_are_made_absolute() -> None:
    source = "from .. import trainer\nfrom ..core.module import Module\nfrom . import ddp\n"
    assert _imports_of(source) == [
        (1, "torchplug"),
        (1, "torchplug.trainer"),
        (2, "torchplug.core.module"),
        (2, "torchplug.core.module.Module"),
        (3, "torchplug.strategies"),
        (3, "torchplug.strategies.ddp"),
    ]


def test_a_chain_through_a_helper_module_is_found_with_each_step(tmp_path: Path) -> None:
    root = tmp_path / "torchplug"
    for name, text in {
        "__init__.py": "",
        "io/__init__.py": "",
        "io/checkpoint_io.py": "import os\n\ndef exists(path):\n    from torchplug.utilities import paths\n",
        "utilities/__init__.py": "",
        "utilities/paths.py": "from torchplug.trainer.trainer import Trainer\n",
        "trainer/__init__.py": "",
        "trainer/trainer.py": "",
    }.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    rule = Rule("plugin kinds", ("torchplug.io",), RUN_LAYER)
    assert violations(rule, root) == [
        "torchplug/utilities/paths.py:1 imports torchplug.trainer.trainer"
        " (reached by torchplug/io/checkpoint_io.py:4 imports torchplug.utilities.paths)"
    ]
