"""Fixtures for the core's tests: real (tiny) installed distributions on sys.path, fresh plugin hosts, the log."""

from __future__ import annotations

import logging
import sys
import textwrap
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from torchplug._host import PluginHost
from torchplug._settings import PluginSettings

MakeDist = Callable[..., str]


@pytest.fixture
def site_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A directory on sys.path where tests install distributions; their modules are forgotten afterwards."""
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    before = set(sys.modules)
    yield site
    for name in set(sys.modules) - before:
        if name.startswith("tp_test_"):
            del sys.modules[name]


@pytest.fixture
def make_dist(site_dir: Path) -> MakeDist:
    """Install a distribution the way pip lays it out: ``<name>.dist-info`` plus its modules.

    ``make_dist("vendor-a", plugins={"xpu": "CODE"})`` creates a plugin module from CODE and an
    entry point ``xpu`` in ``torchplug.plugins`` naming it. Returns a unique module prefix.
    """

    def make(
        name: str,
        version: str = "1.0",
        plugins: dict[str, str] | None = None,
        requires: tuple[str, ...] = ("core>=0.1,<0.2",),
        modules: dict[str, str] | None = None,
        entry_points: dict[str, str] | None = None,
        location: Path | None = None,
    ) -> str:
        root = location or site_dir
        prefix = f"tp_test_{name.replace('-', '_')}_{uuid.uuid4().hex[:6]}"
        eps = dict(entry_points or {})
        for ep_name, code in (plugins or {}).items():
            module = f"{prefix}_{ep_name.replace('-', '_')}"
            (root / f"{module}.py").write_text(textwrap.dedent(code))
            eps[ep_name] = module
        for module, code in (modules or {}).items():
            source = textwrap.dedent(code).replace("PREFIX", prefix)
            (root / f"{module.replace('PREFIX', prefix)}.py").write_text(source)
        info = root / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        meta += [f"Requires-Dist: {req}" for req in requires]
        (info / "METADATA").write_text("\n".join(meta) + "\n")
        lines = ["[torchplug.plugins]"] + [f"{k} = {v.replace('PREFIX', prefix)}" for k, v in eps.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
        return prefix

    return make


@pytest.fixture
def new_host() -> Callable[..., PluginHost]:
    """Build a PluginHost with explicit settings (non-strict unless asked), independent of the process one."""

    def build(**settings: object) -> PluginHost:
        settings.setdefault("strict", False)
        return PluginHost(PluginSettings(**settings))  # type: ignore[arg-type]

    return build


ACCELERATOR_PLUGIN = """
    from torchplug import hookimpl

    @hookimpl
    def torchplug_register_accelerators(registry):
        registry.register("{name}", "torchplug.accelerators.cpu:CPUAccelerator", description="{description}")
"""


def accelerator_plugin(name: str, description: str = "test accelerator") -> str:
    """Source of a plugin module that registers the CPU accelerator class under ``name``."""
    return ACCELERATOR_PLUGIN.format(name=name, description=description)


@pytest.fixture
def plugin_source() -> Callable[..., str]:
    """The source-code builder of a simple accelerator plugin module (see :func:`accelerator_plugin`)."""
    return accelerator_plugin


class LogRecords(logging.Handler):
    """The ``torchplug`` logger's records during a test, whatever the logging configuration of the process.

    (``caplog`` sees them only when the logger propagates to the root logger, which depends on whether
    the root logger had handlers when torchplug was imported.)
    """

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def messages(self, level: int | None = None) -> list[str]:
        """The messages logged, of ``level`` only when given."""
        return [r.getMessage() for r in self.records if level is None or r.levelno == level]

    @property
    def text(self) -> str:
        """Every message logged, one per line."""
        return "\n".join(self.messages())


@pytest.fixture
def torchplug_log() -> Iterator[LogRecords]:
    """Collects what torchplug logs during the test (``torchplug_log.messages(logging.WARNING)``)."""
    handler = LogRecords()
    logger = logging.getLogger("torchplug")
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)
