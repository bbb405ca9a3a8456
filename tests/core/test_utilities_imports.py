"""torchplug.utilities.imports: looking for modules and distributions without importing them, and lazy exports."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import types
from typing import Any

import pytest

from torchplug.utilities.imports import distribution_version, lazy_attributes, module_available


def test_module_available_finds_without_importing() -> None:
    sys.modules.pop("colorsys", None)
    assert module_available("colorsys")
    assert "colorsys" not in sys.modules
    assert not module_available("torchplug_no_such_module")
    assert not module_available("torchplug_no_such_package.child")  # the parent cannot be imported


def test_a_blocked_module_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "colorsys", None)  # how Python marks a module that must not import
    assert not module_available("colorsys")


def test_distribution_version() -> None:
    assert distribution_version("pluggy")
    assert distribution_version("torchplug-no-such-distribution") is None


def test_lazy_attributes_import_on_first_use_and_give_the_version() -> None:
    module = types.ModuleType("tp_lazy_test")
    getattr_, dir_ = lazy_attributes(module.__name__, {"dumps": "json"}, vars(module), distribution="pluggy")
    assert "dumps" not in vars(module)
    import json

    assert getattr_("dumps") is json.dumps
    assert vars(module)["dumps"] is json.dumps  # cached
    assert getattr_("__version__") == distribution_version("pluggy")
    assert {"dumps", "__version__"} <= set(dir_())
    with pytest.raises(AttributeError, match=r"tp_lazy_test.*nothing"):
        getattr_("nothing")


@pytest.mark.parametrize(
    ("flag", "module"), [("_OMEGACONF_AVAILABLE", "omegaconf"), ("_TORCHVISION_AVAILABLE", "torchvision")]
)
def test_lightnings_availability_flags_are_looked_up_once_on_first_access(
    flag: str, module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from torchplug.utilities import imports

    monkeypatch.delitem(vars(imports), flag, raising=False)
    monkeypatch.delitem(sys.modules, module, raising=False)
    real = importlib.util.find_spec
    asked: list[str] = []

    def find_spec(name: str, *args: Any) -> Any:
        asked.append(name)
        return real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    value = getattr(imports, flag)
    assert value is (real(module) is not None)
    assert getattr(imports, flag) is value
    assert asked == [module]  # looked up once, then kept
    assert module not in sys.modules  # found, not imported


def test_import_torchplug_looks_up_no_availability_flag() -> None:
    code = "import torchplug, torchplug.utilities.imports as i; print(sorted(set(i._FLAGS) & set(vars(i))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
