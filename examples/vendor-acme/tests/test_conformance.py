"""torchplug's conformance suite against ``acme``: with acme_runtime installed, and without it.

Run from this folder with the package installed (``pip install '.[runtime,test]'`` and
``pip install ./runtime``): ``pytest tests``. The same checks run with ``core plugins verify acme``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import ClassVar

import pytest

from torchplug.testing import AcceleratorSuite
from torchplug.utilities.imports import distribution_version

#: The runtime's sources, used when acme-runtime is not installed (a checkout of this repository).
RUNTIME_SOURCES = Path(__file__).resolve().parents[1] / "runtime" / "src"


class TestAcmeConformance(AcceleratorSuite):
    plugin: ClassVar[str] = "acme"
    known_failures: ClassVar[dict[str, str]] = {}

    @pytest.fixture
    def plugin_setup(self, monkeypatch: pytest.MonkeyPatch) -> None:
        if distribution_version("acme-runtime") is None:  # not installed: the sources beside this package
            monkeypatch.syspath_prepend(str(RUNTIME_SOURCES))
        monkeypatch.setenv("ACME_DEVICE_COUNT", "2")


class TestAcmeWithoutRuntime(AcceleratorSuite):
    """Where acme_runtime is missing, every check that needs it is skipped with the install hint."""

    plugin: ClassVar[str] = "acme"

    @pytest.fixture
    def plugin_setup(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setitem(sys.modules, "acme_runtime", None)  # as if it were not installed
