"""MkDocs hooks: the generated parts of the site, rebuilt from the code at every build.

Markers in a page's markdown are replaced before it is rendered:

- ``<!-- api: MODULE [exclude=A,B] [only=C,D] -->``: a mkdocstrings block for every name in
  ``MODULE.__all__`` (read from the source, without importing it), titled by its public import path;
- ``<!-- generated: cli -->``: ``--help`` of every ``core`` subcommand, from the parsers themselves;
- ``<!-- generated: env-vars -->``: every ``TORCHPLUG_*`` variable the packages read, where it is
  read, and what it does (``docs/reference/env_vars.yml``); a variable read in the code and not
  described there, or described and no longer read, fails the build;
- ``<!-- generated: benchmarks -->``: the charts of ``docs/benchmarks/*.json``, drawn by
  ``docs/tools/charts.py`` into the site (never committed), with the host and the date.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import io
import os
import re
import sys
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).parent))

import charts  # noqa: E402  (beside this file)

_API = re.compile(
    r"^<!-- api: (?P<module>[\w.]+)(?: exclude=(?P<exclude>[\w,]+))?(?: only=(?P<only>[\w,]+))? -->$", re.MULTILINE
)
_GENERATED = re.compile(r"^<!-- generated: (?P<what>[\w-]+) -->$", re.MULTILINE)
_ENV_VAR = re.compile(r"[\"'](TORCHPLUG_[A-Z0-9_]+)[\"']")


# --- the API reference ------------------------------------------------------------------------


def _source_of(module: str) -> Path:
    """The ``__init__.py`` or module file that defines ``module``, among the packages' ``src``."""
    parts = module.split(".")
    for src in sorted(ROOT.glob("packages/*/src")):
        base = src.joinpath(*parts)
        for candidate in (base / "__init__.py", base.with_suffix(".py")):
            if candidate.is_file():
                return candidate
    raise PluginError(f"api: no module {module!r} under packages/*/src")


@cache
def public_names(module: str) -> dict[str, str]:
    """``{name: defining module}`` for every name of ``module.__all__``, read from the source.

    A name comes from an import in the module (``from x import Name``, also under
    ``TYPE_CHECKING``) or from a lazy table (a dict literal ``{"Name": "x.y"}`` given to
    ``lazy_attributes``); a name defined in the module itself maps to the module.
    """
    tree = ast.parse(_source_of(module).read_text())
    origin: dict[str, str] = {}
    exported: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                origin.setdefault(alias.asname or alias.name, node.module)
        elif isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if (
                    isinstance(key, ast.Constant)
                    and isinstance(value, ast.Constant)
                    and isinstance(key.value, str)
                    and isinstance(value.value, str)
                    and "." in value.value
                ):
                    origin.setdefault(key.value, value.value.partition(":")[0])
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node in tree.body:
            origin.setdefault(node.name, module)
        elif isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            exported = list(ast.literal_eval(node.value))
    for node in tree.body:  # module-level constants (OUTCOMES...)
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                if isinstance(target, ast.Name):
                    origin.setdefault(target.id, module)
    return {name: origin[name] for name in exported if name in origin and name != "__version__"}


def _api_block(match: re.Match[str]) -> str:
    module = match["module"]
    exclude = set(filter(None, (match["exclude"] or "").split(",")))
    only = list(filter(None, (match["only"] or "").split(",")))
    names = public_names(module)
    unknown = (exclude | set(only)) - set(names)
    if unknown:
        raise PluginError(f"api: {module} exports no {', '.join(sorted(unknown))} (excluded on the page)")
    blocks = []
    for name in only or names:
        defined_in = names[name]
        if name in exclude:
            continue
        # The anchor gives the public path an id of its own: links and cross-references name
        # `torchplug.Trainer`, never the module that defines it today.
        blocks.append(
            f"[](){{#{module}.{name}}}\n"
            f'::: {defined_in}.{name}\n    options:\n      heading: "{module}.{name}"\n      toc_label: "{name}"\n'
        )
    return "\n".join(blocks)


# --- the `core` command -------------------------------------------------------------------------


def _walk(parser: argparse.ArgumentParser, prog: str) -> list[tuple[str, str]]:
    helps = [(prog, parser.format_help())]
    for action in parser._actions:  # argparse has no public way to list subparsers
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                if sub.add_help:  # the training commands are parsed (and documented) by jsonargparse
                    helps += _walk(sub, f"{prog} {name}")
    return helps


def _training_help(command: str) -> tuple[str, str]:
    """``core COMMAND --help``, run in this process (jsonargparse builds it from the Trainer's signature)."""
    from torchplug.cli.trainer_cli import run_command

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = run_command([command, "--help"])
    if code != 0:
        raise PluginError(f"core {command} --help exited {code}")
    return f"core {command}", out.getvalue()


def cli_reference() -> str:
    """Every ``core`` subcommand's ``--help``, in the order ``core --help`` lists them."""
    os.environ.setdefault("COLUMNS", "100")
    from torchplug.cli._main import TRAINING_COMMANDS, build_parser

    helps = _walk(build_parser(), "core")
    helps[1:1] = [_training_help(command) for command in TRAINING_COMMANDS]
    out = []
    for prog, text in helps:
        level = "#" * min(2 + prog.count(" ") - 1, 4) if prog != "core" else "##"
        out += [f"{level} `{prog}`", "", "```text", text.rstrip(), "```", ""]
    return "\n".join(out)


# --- the environment variables -----------------------------------------------------------------


def env_var_readers() -> dict[str, list[str]]:
    """``{variable: [module, ...]}``: the modules of packages/*/src that name each variable."""
    found: dict[str, set[str]] = {}
    for path in sorted(ROOT.glob("packages/*/src/**/*.py")):
        src = next(p for p in path.parents if p.name == "src")
        module = ".".join(path.relative_to(src).with_suffix("").parts).removesuffix(".__init__")
        for name in _ENV_VAR.findall(path.read_text()):
            found.setdefault(name, set()).add(module)
    return {name: sorted(modules) for name, modules in sorted(found.items())}


def env_var_reference() -> str:
    """The table of every variable, checked against the descriptions in ``env_vars.yml``."""
    described: dict[str, dict[str, Any]] = yaml.safe_load((ROOT / "docs/reference/env_vars.yml").read_text())
    readers = env_var_readers()
    undocumented = sorted(set(readers) - set(described))
    stale = sorted(set(described) - set(readers))
    if undocumented or stale:
        raise PluginError(
            "env-vars: docs/reference/env_vars.yml is out of date: "
            + (
                f"not described: {', '.join(f'{n} (read in {readers[n][0]})' for n in undocumented)}; "
                if undocumented
                else ""
            )
            + (f"described but read nowhere: {', '.join(stale)}" if stale else "")
        )
    rows = ["| variable | effect | read in |", "|---|---|---|"]
    for name, modules in readers.items():
        entry = described[name]
        effect = " ".join(str(entry["effect"]).split())
        if entry.get("internal"):
            effect = f"*Set by torchplug for the processes it starts; not for users.* {effect}"
        where = "<br>".join(f"`{m}`" for m in modules)
        rows.append(f"| `{name}` | {effect} | {where} |")
    return "\n".join(rows)


# --- mkdocs events ----------------------------------------------------------------------------

_GENERATORS = {"cli": cli_reference, "env-vars": env_var_reference, "benchmarks": charts.markdown}


def on_files(files: Files, config: Any) -> Files:
    """Add the benchmark charts, drawn now from the committed JSON results, to the site."""
    for name, png in charts.draw_all(ROOT / "docs" / "benchmarks").items():
        files.append(File.generated(config, f"explanation/charts/{name}.png", content=png))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Replace the markers of generated content."""
    markdown = _API.sub(_api_block, markdown)
    return _GENERATED.sub(lambda m: _generate(m["what"]), markdown)


def _generate(what: str) -> str:
    if what not in _GENERATORS:
        raise PluginError(f"unknown generated section {what!r}; known: {', '.join(_GENERATORS)}")
    return _GENERATORS[what]()
