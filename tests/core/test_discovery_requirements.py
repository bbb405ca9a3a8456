"""The requirement plugins declare on core, checked without packaging for plain release ranges."""

from __future__ import annotations

import subprocess
import sys

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from torchplug import _discovery
from torchplug._discovery import _core_requirement, _incompatibility, _ReleaseRange

SPECIFIERS = [">=0.1,<0.2", ">=0.1", "<1", "==0.1", "!=0.1.0", ">0.1", "<=0.2.0", ">= 0.1 , < 0.2", "==1.0.0,>0"]
CORES = ["0.1", "0.1.0", "0.1.5", "0.2", "0.2.0", "1.0", "0.0.9", "2"]


@pytest.mark.parametrize("specifier", SPECIFIERS)
@pytest.mark.parametrize("core", CORES)
def test_a_plain_release_range_agrees_with_packaging(specifier: str, core: str) -> None:
    plain = _ReleaseRange.parse(specifier)
    assert plain is not None
    expected = SpecifierSet(specifier)
    assert plain.contains(core) == expected.contains(Version(core), prereleases=True)
    assert str(plain) == str(expected)


@pytest.mark.parametrize("specifier", ["~=0.1", "==0.1.*", ">=0.1rc1", "===0.1", ">=0.1+local", ""])
def test_other_forms_are_left_to_packaging(specifier: str) -> None:
    assert _ReleaseRange.parse(specifier) is None


@pytest.mark.parametrize("core", ["0.2.0rc1", "0.1.dev3", "0+unknown", "0.1.post1"])
def test_a_core_that_is_not_a_plain_release_is_judged_by_packaging(core: str) -> None:
    requirement = _core_requirement(["core>=0.1,<0.2"])
    assert isinstance(requirement, _ReleaseRange)
    expected = SpecifierSet(">=0.1,<0.2").contains(Version(core), prereleases=True)
    assert (_incompatibility("vendor-a", "1.0", requirement, core) == "") == expected


def test_an_incompatible_plugin_is_named_with_the_requirement_as_packaging_writes_it() -> None:
    requirement = _core_requirement(["torch>=2", "core>=0.1,<0.2"])
    message = _incompatibility("vendor-a", "1.0", requirement, "0.3")
    assert message.startswith("vendor-a 1.0 requires core<0.2,>=0.1, but core 0.3 is installed.")


def test_a_requirement_with_a_marker_still_goes_through_packaging() -> None:
    requirement = _core_requirement(['core>=0.1,<0.2; python_version >= "3"'])
    assert isinstance(requirement, SpecifierSet)
    assert str(requirement) == "<0.2,>=0.1"


def test_discovery_of_plain_requirements_does_not_import_packaging() -> None:
    code = (
        "import sys\n"
        "from torchplug import _discovery\n"
        "r = _discovery._core_requirement(['core>=0.1,<0.2'])\n"
        "assert _discovery._incompatibility('a', '1', r, '0.1.0') == ''\n"
        "print(sorted(m for m in sys.modules if m.startswith('packaging')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    assert _discovery.CORE_DISTRIBUTION == "core"
