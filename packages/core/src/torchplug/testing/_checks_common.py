"""Checks every plugin kind shares: how it is registered, and what listing it imports."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any, Final

from torchplug._registry import BASE_CLASSES, KINDS
from torchplug.testing._check import CheckFailed, CheckSkipped, check
from torchplug.testing._context import Context
from torchplug.utilities.printable import printable

#: Top-level modules that listing plugins may import besides the standard library and the plugin's own package.
LISTING_ALLOWED: Final = frozenset(
    {
        "torchplug",
        "pluggy",
        "packaging",
        "typing_extensions",
        "importlib_metadata",
        "zipp",
        "_distutils_hack",
        "__main__",
        "__mp_main__",
    }
)


@check(
    KINDS,
    "registered",
    summary="the name resolves to a lazy 'module:Class' target with a description, and the class loads",
    fix="register a dotted path with a description: registry.register(NAME, 'pkg.module:Class', "
    "description='...'); the class must subclass the kind's base class and import without error",
)
def registered(context: Context) -> str:
    subject = context.subject
    entry = subject.entry
    problems = []
    if not isinstance(entry.target, str):
        problems.append(
            f"the target is the class {entry.target_path} itself, so the plugin module imports it (and torch) "
            "whenever plugins are listed; register 'module:Class' instead"
        )
    if not entry.description.strip():
        problems.append("the description is empty: `core plugins list` shows nothing for it")
    if problems:
        raise CheckFailed("; ".join(problems))
    subject.load()  # raises BrokenPluginError (with the distribution) when it fails
    base = BASE_CLASSES[subject.kind].rpartition(":")[2]
    return f"{entry.target_path} ({base}) from {entry.provider}"


@check(
    KINDS,
    "listing_is_light",
    summary="`core plugins list` in a fresh process imports neither torch nor a vendor library for this plugin",
    fix="keep the plugin module to registrations of dotted paths, and make the probe find the vendor library "
    "without importing it (torchplug.utilities.imports.module_available); import torch and the library "
    "only in the classes' modules",
)
def listing_is_light(context: Context) -> str:
    provider = context.subject.entry.provider
    if provider.distribution is None and provider.plugin == "runtime":
        raise CheckSkipped("registered at run time by user code, not by a plugin module: there is nothing to list")
    plugin = "" if provider.builtin else (provider.distribution or provider.plugin)
    report = _run_listing(context, plugin)
    problems = []
    if report["torch"]:
        problems.append(f"torch was imported ({', '.join(report['torch'])})")
    if report["foreign"]:
        problems.append(f"these libraries were imported: {', '.join(report['foreign'])}")
    status = report["status"]
    if status in (None, "broken"):
        problems.append(
            f"the listing shows {context.subject.entry.name!r} as {status or 'missing'}: {printable(report['reason'])}"
        )
    if problems:
        raise CheckFailed(f"listing the plugins with {plugin or 'the core'} loaded: {'; '.join(problems)}")
    reason = f" ({report['reason']})" if report["reason"] else ""
    return f"listed as {status}{reason} in {report['seconds']:.2f} s; imported only its own modules"


def _run_listing(context: Context, plugin: str) -> dict[str, Any]:
    subject = context.subject
    command = [
        sys.executable,
        "-m",
        "torchplug.testing._worker",
        "listing",
        "--kind",
        subject.kind,
        "--name",
        subject.entry.name,
        "--plugin",
        plugin,
        "--target",
        subject.entry.target_path,
    ]
    done = subprocess.run(
        command, env=context.env(), capture_output=True, text=True, timeout=context.timeout, check=False
    )
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise CheckFailed(f"listing the plugins failed (exit code {done.returncode}):\n{done.stderr.strip()}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result
