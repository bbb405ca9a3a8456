"""``core plugins new KIND NAME``: write a complete plugin package that passes ``core plugins verify NAME``.

The package follows CONTRIBUTING.md's skeleton (``pyproject.toml`` with the entry point and the
supported core range, a lazy ``__init__.py``, ``_plugin.py``, ``_vendor.py``, the kind's module,
``py.typed``, a README and a test module that runs the conformance suite). The templates are
package data (``torchplug/cli/_templates``), rendered with :class:`string.Template`.
"""

from __future__ import annotations

import argparse
import dataclasses
import keyword
import re
import shutil
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any, Final

from torchplug._discovery import core_version

__all__ = ["KINDS", "ScaffoldError", "add_parser", "core_requirement", "generate"]

_NAME_RE: Final = re.compile(r"^[a-z][a-z0-9_]*$")


class ScaffoldError(ValueError):
    """The package cannot be generated as asked (bad name, taken name, existing folder); exit code 2."""


@dataclass(frozen=True)
class _Kind:
    """What differs between the six kinds of generated package."""

    prefix: str  # of the distribution name
    module: str
    suffix: str  # of the class name
    base: str
    label: str
    hook: str
    description: str
    fill_in: str
    needs_torch: bool = True


KINDS: Final = {
    "accelerator": _Kind(
        prefix="accel",
        module="accelerator",
        suffix="Accelerator",
        base="Accelerator",
        label="accelerator",
        hook="torchplug_register_accelerators",
        description="$title devices; devices=N, -1 or [ids]",
        fill_in="Start with `_vendor.py` (the runtime's import name, install hint and device count), then "
        "`accelerator.py` (`device_type`, `get_parallel_devices`, `setup_device`, the random state), then "
        "the capabilities (`process_group_backend`, `supported_precisions`, `auto_priority`).",
    ),
    "strategy": _Kind(
        prefix="strategy",
        module="strategy",
        suffix="Strategy",
        base="Strategy",
        label="strategy",
        hook="torchplug_register_strategies",
        description="how the model is spread over $title's devices",
        fill_in="Start with `strategy.py`: the launcher, the process group, the module wrapper, the collectives.",
    ),
    "precision": _Kind(
        prefix="precision",
        module="precision",
        suffix="Precision",
        base="Precision",
        label="precision",
        hook="torchplug_register_precisions",
        description="the numerics of training on $title",
        fill_in="Start with `precision.py`: the module dtype, the autocast context, the loss scaler and its state.",
    ),
    "checkpoint_io": _Kind(
        prefix="io",
        module="checkpoint_io",
        suffix="CheckpointIO",
        base="CheckpointIO",
        label="checkpoint IO",
        hook="torchplug_register_checkpoint_io",
        description="checkpoints written atomically to $title's storage",
        fill_in="Start with `checkpoint_io.py`: your storage's writer and reader, and the options it takes.",
    ),
    "cluster_environment": _Kind(
        prefix="env",
        module="environment",
        suffix="Environment",
        base="ClusterEnvironment",
        label="cluster environment",
        hook="torchplug_register_cluster_environments",
        description="ranks and rendezvous from $title's scheduler",
        fill_in="Start with `environment.py`: the variables your scheduler sets, and the rendezvous address and "
        "port; then declare a one-process job's variables in `tests/test_conformance.py`.",
        needs_torch=False,
    ),
    "logger": _Kind(
        prefix="logger",
        module="logger",
        suffix="Logger",
        base="Logger",
        label="logger",
        hook="torchplug_register_loggers",
        description="metrics and hyperparameters to $title",
        fill_in="Start with `_vendor.py` (your tracking client's import name and install hint), then `logger.py`: "
        "the run it starts on first use, `log_metrics`, `log_hyperparams`, `finalize`.",
        needs_torch=False,
    ),
}

_SUITES: Final = {
    "accelerator": "AcceleratorSuite",
    "strategy": "StrategySuite",
    "precision": "PrecisionSuite",
    "checkpoint_io": "CheckpointIOSuite",
    "cluster_environment": "ClusterEnvironmentSuite",
    "logger": "LoggerSuite",
}

_USAGE: Final = {
    "accelerator": 'accelerator="$name"',
    "strategy": 'strategy="$name"',
    "precision": 'precision="$name"',
    "checkpoint_io": 'plugins=["$name"]',
    "cluster_environment": 'plugins=["$name"]',
    "logger": 'logger="$name"',
}

_VENDOR_DEVICES: Final = '''

def device_count() -> int:
    """How many devices this process can use, counted without initialising the runtime (safe before a fork).

    VENDOR: ask your runtime, for example ``int(runtime().device_count())``. Until ``RUNTIME_MODULE``
    is set: ${upper}_SIMULATED_DEVICES simulated devices on the CPU, 1 by default (so that plain
    ``accelerator="$name"`` runs one process, as on a machine with one card);
    ``${upper}_SIMULATED_DEVICES=2`` runs the two-process checks of ``core plugins verify``.
    """
    if RUNTIME_MODULE is None:
        return int(os.environ.get("${upper}_SIMULATED_DEVICES", "1"))
    return int(runtime().device_count())
'''

_VENDOR_DEVICES_REPORT: Final = """
        return data
    try:
        data["devices"] = device_count()
    except Exception as exc:  # a report never fails: the error is the finding
        data["devices"] = f"{type(exc).__name__}: {exc}\""""

_ENV_SUITE_EXTRA: Final = """
    # The variables ${title}'s scheduler sets for a job of one process (the checks run under them).
    environment_variables: ClassVar[dict[str, str]] = {
        "${upper}_JOB_ID": "1",
        "${upper}_NTASKS": "1",
        "${upper}_RANK": "0",
        "${upper}_LOCAL_RANK": "0",
        "${upper}_NODE_RANK": "0",
        "${upper}_NTASKS_PER_NODE": "1",
    }"""


def core_requirement(version: str | None = None) -> str:
    """The ``Requires-Dist`` on core for a package written against ``version`` (default: the installed core).

    ``0.1.3`` gives ``core>=0.1,<0.2`` (a 0.x minor release may break plugins); ``1.4.0`` gives ``core>=1.4,<2``.
    """
    from packaging.version import InvalidVersion, Version

    try:
        parsed = Version(version or core_version())
    except InvalidVersion:
        parsed = Version("0.1")
    major, minor = (*parsed.release, 0)[:2]
    if (major, minor) == (0, 0):  # an uninstalled source tree ("0+unknown"): the first release line
        minor = 1
    upper = f"0.{minor + 1}" if major == 0 else str(major + 1)
    return f"core>={major}.{minor},<{upper}"


def _variables(kind: str, name: str) -> dict[str, str]:
    spec = KINDS[kind]
    title = "".join(part.capitalize() for part in name.split("_"))
    base = {"name": name, "title": title, "upper": name.upper()}
    dependencies = [core_requirement(), "typing_extensions>=4.10"] + (["torch>=2.6"] if spec.needs_torch else [])
    devices = kind == "accelerator"
    values = {
        **base,
        "kind": kind,
        "kind_label": spec.label,
        "dist": f"{spec.prefix}-{name.replace('_', '-')}",
        "package": f"torchplug_{name}",
        "module": spec.module,
        "cls": f"{title}{spec.suffix}",
        "base": spec.base,
        "hook": spec.hook,
        "suite": _SUITES[kind],
        "core_requirement": core_requirement(),
        "dependencies": ", ".join(f'"{d}"' for d in dependencies),
        "description": Template(spec.description).substitute(base),
        "usage": Template(_USAGE[kind]).substitute(base),
        "fill_in": spec.fill_in,
        "vendor_all": ', "device_count"' if devices else "",
        "vendor_extra": Template(_VENDOR_DEVICES).substitute(base) if devices else "",
        "vendor_report": _VENDOR_DEVICES_REPORT if devices else "",
        "suite_extra": Template(_ENV_SUITE_EXTRA).substitute(base) if kind == "cluster_environment" else "",
    }
    return values


def _files(kind: str, values: dict[str, str]) -> dict[str, str]:
    """Relative path -> template file name."""
    package = f"src/{values['package']}"
    return {
        "pyproject.toml": "pyproject.toml.tmpl",
        "README.md": "README.md.tmpl",
        ".gitignore": "gitignore.tmpl",
        f"{package}/__init__.py": "__init__.py.tmpl",
        f"{package}/_plugin.py": "_plugin.py.tmpl",
        f"{package}/_vendor.py": "_vendor.py.tmpl",
        f"{package}/{KINDS[kind].module}.py": f"{KINDS[kind].module}.py.tmpl",
        f"{package}/py.typed": "",
        "tests/conftest.py": "conftest.py.tmpl",
        "tests/test_conformance.py": "test_conformance.py.tmpl",
    }


def _render(template: str, values: dict[str, str]) -> str:
    if not template:
        return ""
    text = (resources.files("torchplug.cli") / "_templates" / template).read_text(encoding="utf-8")
    rendered = Template(text).substitute(values)
    if template == "_vendor.py.tmpl" and values["vendor_extra"]:  # the simulated devices read a variable
        rendered = rendered.replace("import importlib\n", "import importlib\nimport os\n", 1)
    return rendered


def check_name(kind: str, name: str, taken: list[str] | None = None) -> None:
    """Refuse a name that cannot be a registry name and a Python package name, or that is taken.

    Raises:
        ScaffoldError: The name is not lower-case letters, digits and ``_`` starting with a letter,
            is a Python keyword, or is already registered for ``kind``.
    """
    if not _NAME_RE.match(name) or keyword.iskeyword(name):
        raise ScaffoldError(
            f"NAME {name!r} is not valid: it is the registry name and part of the package name "
            f"torchplug_NAME, so use lower-case letters, digits and '_', starting with a letter (for example 'acme')."
        )
    if taken is not None and name in taken:
        raise ScaffoldError(
            f"{KINDS[kind].label} {name!r} is already registered here (core plugins show {name}). "
            "Pick another name: the installed one would keep it."
        )


def generate(kind: str, name: str, directory: Path | None = None, *, taken: list[str] | None = None) -> Path:
    """Write the package of a ``kind`` plugin registered as ``name``; return its folder.

    Args:
        kind: One of :data:`KINDS`.
        name: The registry name (also the package's: ``torchplug_<name>``).
        directory: The folder to create (default: ``./<distribution name>``); it must not exist.
        taken: Names already registered for ``kind`` (refused).

    Raises:
        ScaffoldError: Unknown kind, bad or taken name, the folder exists, or it cannot be written.
    """
    if kind not in KINDS:
        raise ScaffoldError(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")
    check_name(kind, name, taken)
    values = _variables(kind, name)
    target = Path(directory) if directory is not None else Path.cwd() / values["dist"]
    if target.exists():
        raise ScaffoldError(f"{str(target)!r} already exists: give a new folder with --dir, or remove it.")
    rendered = {relative: _render(template, values) for relative, template in _files(kind, values).items()}
    try:
        for relative, text in rendered.items():  # every template rendered first: nothing half-written on an error
            path = target / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    except OSError as exc:  # the folder did not exist before: what was written of it goes again
        shutil.rmtree(target, ignore_errors=True)
        raise ScaffoldError(
            f"{str(target)!r} cannot be written ({type(exc).__name__}: {exc.strerror or exc}); nothing was left there. "
            "Hint: give a folder you can write to with --dir."
        ) from exc
    return target


def add_parser(sub: Any) -> None:
    """Add ``plugins new`` to the ``core plugins`` subcommands."""
    new = sub.add_parser(
        "new",
        help="write a new plugin package that passes `core plugins verify` as generated",
        description="Write a complete plugin package: pyproject.toml (entry point, supported core versions), "
        "_plugin.py, _vendor.py, the class with every method documented and marked VENDOR: where you fill it "
        "in, a README, py.typed and a test module that runs the conformance suite. A generated accelerator "
        "computes on the CPU until you fill it in.",
        epilog="exit codes:\n  0  the package was written\n  2  usage error: bad kind or NAME, NAME taken, "
        "the folder exists",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    new.add_argument("kind", choices=list(KINDS), help="the plugin kind")
    new.add_argument("name", help="the registry name, e.g. 'acme' (package torchplug_acme)")
    new.add_argument("--dir", type=Path, help="the folder to create (default: ./<distribution name>)")
    new.set_defaults(handler=_new)


def _new(args: argparse.Namespace) -> int:
    from torchplug._host import PluginHost
    from torchplug._settings import PluginSettings

    host = PluginHost(dataclasses.replace(PluginSettings.from_env(), strict=False))
    try:
        target = generate(args.kind, args.name, args.dir, taken=host.registry(args.kind).names())
    except ScaffoldError as exc:
        print(f"core: error: {exc}", file=sys.stderr)
        return 2
    values = _variables(args.kind, args.name)
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    print(f"Wrote {values['dist']} ({KINDS[args.kind].label} {args.name!r}, class {values['cls']}) in {target}:")
    print("".join(f"  {f}\n" for f in files), end="")
    print(
        f"\nNext:\n  pip install -e {target}        # then: core plugins list shows {args.name!r}\n"
        f"  core plugins verify {args.name}\n"
        f"  grep -rn VENDOR: {target / 'src'}   # the places to fill in; verify again after each\n"
        f"  python -m build {target}        # the wheel to publish"
    )
    return 0
