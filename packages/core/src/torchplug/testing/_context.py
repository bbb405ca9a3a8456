"""The plugin under test (:class:`Subject`) and what one check gets to work with (:class:`Context`).

This module imports no torch: finding the plugin only reads the registries.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from torchplug._boundary import why_unavailable
from torchplug._errors import BrokenPluginError, PluginConflictError
from torchplug._host import PluginHost, plugin_host
from torchplug._registry import KINDS, RegistryEntry
from torchplug.testing._check import CheckSkipped

__all__ = ["Context", "Subject", "UsageError", "subprocess_environment"]

#: Variables of an enclosing launcher or scheduler, never passed to the processes a check starts.
_LAUNCHER_VARIABLES: Final = frozenset(
    {
        "LOCAL_RANK",
        "RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "NODE_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "TORCHPLUG_PARENT_PID",
        "TORCHPLUG_FAILURE_NOTE_FD",
        "TORCHPLUG_CLUSTER_ENVIRONMENT",
        "TORCHPLUG_GLOBAL_SEED",
    }
)

_LABELS: Final = {
    "accelerator": "accelerator",
    "strategy": "strategy",
    "precision": "precision",
    "checkpoint_io": "checkpoint IO",
    "cluster_environment": "cluster environment",
    "logger": "logger",
}


class UsageError(ValueError):
    """The plugin to verify cannot be found as given (unknown name, several kinds, conflict); exit code 2."""


@dataclass
class Subject:
    """The plugin under test: its kind, registry name and entry, and the accelerator its checks train on.

    Attributes:
        kind: One of the six plugin kinds.
        name: The registry name (or alias, or ``name@provider``) as given.
        entry: The registry entry the name selects.
        host: The plugins of this process (the checks resolve names from it).
        accelerator: The accelerator name the checks of the other kinds train on; None: chosen
            from the installed accelerators (see :meth:`partner`).
        variables: Environment variables a cluster environment is checked under (the variables its
            scheduler sets for a one-process job).
    """

    kind: str
    name: str
    entry: RegistryEntry[Any]
    host: PluginHost
    accelerator: str | None = None
    variables: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def find(
        cls,
        name: str,
        kind: str | None = None,
        *,
        host: PluginHost | None = None,
        accelerator: str | None = None,
        variables: Mapping[str, str] | None = None,
    ) -> Subject:
        """Find the plugin registered as ``name`` (among the six kinds, or only ``kind``).

        Raises:
            UsageError: No plugin registers the name, several kinds do and ``kind`` is not given,
                or several distributions claim it; the message says how to choose.
        """
        host = host or plugin_host()
        kinds = (kind,) if kind else KINDS
        if kind is not None and kind not in KINDS:
            raise UsageError(f"unknown kind {kind!r}; choose from {', '.join(KINDS)}")
        found = [k for k in kinds if name in host.registry(k)]
        if not found:
            installed = sorted({n for k in kinds for n in host.registry(k).names()})
            where = f"no {_LABELS[kind]}" if kind else "no plugin"
            raise UsageError(
                f"{where} is registered as {name!r}. Installed: {', '.join(installed)}. Hint: core plugins list"
            )
        if len(found) > 1:
            raise UsageError(
                f"{name!r} is registered as several kinds: {', '.join(found)}. Hint: add --kind {found[0]}"
            )
        return cls(
            kind=found[0],
            name=name,
            entry=_entry(host, found[0], name),
            host=host,
            accelerator=accelerator,
            variables=dict(variables or {}),
        )

    @property
    def label(self) -> str:
        """``accelerator 'xpu'`` (for messages)."""
        return f"{_LABELS[self.kind]} {self.entry.name!r}"

    def load(self) -> Any:
        """The plugin's class (imported on first use; raises the registry's ``BrokenPluginError``).

        Typed ``Any``: the checks read the class attributes of whichever kind it is. An accelerator
        is seen as its ``runtime_class()`` (the class an instance will have on this machine).
        """
        cls = self.entry.load()
        if self.kind == "accelerator":
            return cls.runtime_class()
        return cls

    def create(self) -> Any:
        """A new instance, with the registered init params."""
        return self.entry.create()

    def unavailable(self) -> str | None:
        """Why the plugin cannot run here (its probe, then its class's ``is_available``), or None."""
        reason = self.entry.run_probe()
        if reason is None and callable(getattr(self.load(), "is_available", None)):
            reason = why_unavailable(self.load(), self.entry)
        return reason

    def require_available(self) -> None:
        """Skip the check when the plugin cannot run here, with its own reason."""
        reason = self.unavailable()
        if reason is not None:
            raise CheckSkipped(f"{self.label} cannot run here: {reason}")

    # -- the accelerator the other kinds train on -------------------------------------------

    def partner(self) -> str:
        """The accelerator that trains with this plugin: the one given, else the installed one that names it, else cpu.

        A strategy pairs with an accelerator whose ``single_device_strategy`` or
        ``parallel_strategy`` it is; a precision with one that declares it among its
        ``supported_precisions``; a checkpoint IO with an available one whose
        ``default_checkpoint_io`` it is. Among several, one from the plugin's own distribution wins.
        """
        if self.kind == "accelerator":
            return self.entry.name
        if self.accelerator is not None:
            return self.accelerator
        chosen = "cpu"
        for entry in self._accelerators():
            try:
                cls = entry.load()
                if self.kind == "checkpoint_io" and why_unavailable(cls, entry) is not None:
                    continue
            except Exception:  # another plugin's broken accelerator is not this check's business
                continue
            if _names_plugin(cls, self.kind, self.entry.name):
                if entry.provider == self.entry.provider:
                    return entry.name
                chosen = entry.name if chosen == "cpu" else chosen
        return chosen

    def _accelerators(self) -> list[RegistryEntry[Any]]:
        registry = self.host.registry("accelerator")
        winners = [registry.resolution(n).winner for n in registry.names()]
        return [w for w in winners if w is not None and w.error is None]

    def require_partner_available(self) -> str:
        """The partner accelerator's name; skips the check when it cannot run here."""
        name = self.partner()
        if self.kind == "accelerator":
            self.require_available()
            return name
        self.require_available()
        entry = self.host.registry("accelerator").resolve(name)
        reason = entry.run_probe() or why_unavailable(entry.load(), entry)
        if reason is not None:
            raise CheckSkipped(f"{self.label} trains on accelerator {name!r}, which cannot run here: {reason}")
        return name

    def trainer_arguments(self) -> dict[str, Any]:
        """The Trainer arguments that put this plugin to use (``accelerator=``, ``strategy=``, ``plugins=``...)."""
        arguments: dict[str, Any] = {"accelerator": self.partner(), "plugin_host": self.host}
        if self.kind == "strategy":
            arguments["strategy"] = self.name
        elif self.kind == "precision":
            arguments["precision"] = self.name
        elif self.kind in ("checkpoint_io", "cluster_environment"):
            arguments["plugins"] = [self.name]
        elif self.kind == "logger":
            arguments["logger"] = self.name
        return arguments


def _entry(host: PluginHost, kind: str, name: str) -> RegistryEntry[Any]:
    registry = host.registry(kind)
    try:
        return registry.resolve(name)
    except PluginConflictError as exc:
        raise UsageError(f"{exc} Hint: core plugins verify NAME@PROVIDER") from exc
    except BrokenPluginError:
        # A broken plugin is verified too: its "registered" check fails with the error.
        key = name.partition("@")[0].lower()
        return next(e for e in registry.entries() if key in (e.name, *e.aliases))


def _names_plugin(accelerator: type, kind: str, name: str) -> bool:
    if kind == "strategy":
        return name in (
            getattr(accelerator, "single_device_strategy", None),
            getattr(accelerator, "parallel_strategy", None),
        )
    if kind == "precision":
        return name in (getattr(accelerator, "supported_precisions", None) or ())
    if kind == "checkpoint_io":
        return getattr(accelerator, "default_checkpoint_io", None) == name
    return False


def subprocess_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a process a check starts: this one's, with its ``sys.path`` as ``PYTHONPATH``.

    Whatever the test put on ``sys.path`` (a fake vendor library, the repository) is found by the
    child too; variables of an enclosing launcher (``RANK``, ``MASTER_PORT``...) are dropped so the
    child starts its own ranks.
    """
    env = {k: v for k, v in os.environ.items() if k not in _LAUNCHER_VARIABLES and not k.startswith("TORCHELASTIC_")}
    paths = [p for p in sys.path if p and os.path.exists(p)]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


@dataclass
class Context:
    """What one check works with: the plugin, a scratch directory, and results shared between checks.

    Attributes:
        subject: The plugin under test.
        cache: Results shared by the checks of one run (a multi-process fit is run once for two checks).
        timeout: Seconds a process started by a check may run.
    """

    subject: Subject
    cache: dict[Any, Any] = field(default_factory=dict)
    timeout: float = 300.0
    _workdir: Path | None = None

    @property
    def workdir(self) -> Path:
        """A fresh directory for this check, removed when the check ends."""
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix=f"torchplug-verify-{self.subject.entry.name}-"))
        return self._workdir

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a process this check starts (see :func:`subprocess_environment`).

        A plugin loaded from a module named in ``TORCHPLUG_PLUGINS`` (no distribution) is named there
        for the child too, so that it finds the same plugin.
        """
        provider = self.subject.entry.provider
        variables = dict(self.subject.variables)
        if provider.distribution is None and provider.plugin != "runtime":
            requested = [n for n in os.environ.get("TORCHPLUG_PLUGINS", "").split(",") if n.strip()]
            variables["TORCHPLUG_PLUGINS"] = ",".join(dict.fromkeys([*requested, provider.plugin]))
        return subprocess_environment({**variables, **extra})

    @contextlib.contextmanager
    def isolated(self) -> Iterator[None]:
        """Run a check with the subject's variables set, and this process's environment restored afterwards.

        Whatever the plugin or the Trainer exports during a check (``MASTER_PORT``, a seed...) is
        undone, so checks do not leak into each other or into the caller.
        """
        saved = dict(os.environ)
        os.environ.update(self.subject.variables)
        try:
            yield
        finally:
            if os.environ != saved:
                os.environ.clear()
                os.environ.update(saved)

    def close(self) -> None:
        """Remove the scratch directory."""
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
