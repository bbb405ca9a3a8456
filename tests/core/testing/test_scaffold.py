"""``core plugins new KIND NAME``: a complete package for each kind, refused names and folders, and the core range."""

from __future__ import annotations

import importlib.util
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from tests.core.testing.conftest import child_env
from torchplug.cli._scaffold import KINDS, ScaffoldError, core_requirement, generate
from torchplug.testing import verify

CLASSES = {
    "accelerator": ("accel-acme", "accelerator", "AcmeAccelerator", "AcceleratorSuite"),
    "strategy": ("strategy-acme", "strategy", "AcmeStrategy", "StrategySuite"),
    "precision": ("precision-acme", "precision", "AcmePrecision", "PrecisionSuite"),
    "checkpoint_io": ("io-acme", "checkpoint_io", "AcmeCheckpointIO", "CheckpointIOSuite"),
    "cluster_environment": ("env-acme", "environment", "AcmeEnvironment", "ClusterEnvironmentSuite"),
    "logger": ("logger-acme", "logger", "AcmeLogger", "LoggerSuite"),
}


def core(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "torchplug", *args],
        env=child_env(),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_package_has_the_contributing_skeleton(tmp_path: Path, kind: str) -> None:
    dist, module, cls, suite = CLASSES[kind]
    target = generate(kind, "acme", tmp_path / dist)
    files = sorted(str(p.relative_to(target)) for p in target.rglob("*") if p.is_file())
    assert files == sorted(
        [
            ".gitignore",
            "README.md",
            "pyproject.toml",
            "src/torchplug_acme/__init__.py",
            "src/torchplug_acme/_plugin.py",
            "src/torchplug_acme/_vendor.py",
            f"src/torchplug_acme/{module}.py",
            "src/torchplug_acme/py.typed",
            "tests/conftest.py",
            "tests/test_conformance.py",
        ]
    )
    project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
    assert project["name"] == dist
    assert project["dependencies"][0] == core_requirement()
    assert project["entry-points"]["torchplug.plugins"] == {"acme": "torchplug_acme._plugin"}
    for path in target.rglob("*.py"):
        py_compile.compile(str(path), doraise=True)
    source = (target / f"src/torchplug_acme/{module}.py").read_text()
    assert f"class {cls}(" in source and "VENDOR:" in source
    assert f'registry.register(\n        "acme",\n        "torchplug_acme.{module}:{cls}",' in (
        (target / "src/torchplug_acme/_plugin.py").read_text()
    )
    test = (target / "tests/test_conformance.py").read_text()
    assert f"class Test{cls}Conformance({suite}):" in test and 'plugin: ClassVar[str] = "acme"' in test
    readme = (target / "README.md").read_text()
    assert readme.startswith(f"# {dist}\n") and "core plugins verify acme" in readme


def test_the_plugin_module_imports_nothing_but_torchplug(tmp_path: Path) -> None:
    target = generate("accelerator", "acme", tmp_path / "pkg")
    plugin = (target / "src/torchplug_acme/_plugin.py").read_text()
    imports = [line for line in plugin.splitlines() if line.startswith(("import ", "from "))]
    assert imports == [
        "from __future__ import annotations",
        "from typing import TYPE_CHECKING, Any",
        "from torchplug import hookimpl",
    ]


@pytest.mark.parametrize(
    ("version", "requirement"),
    [
        ("0.1.0", "core>=0.1,<0.2"),
        ("0.3.7", "core>=0.3,<0.4"),
        ("1.4.0", "core>=1.4,<2"),
        ("0+unknown", "core>=0.1,<0.2"),
    ],
)
def test_the_core_range_follows_the_installed_core(version: str, requirement: str) -> None:
    assert core_requirement(version) == requirement


@pytest.mark.parametrize("name", ["Acme", "my-npu", "1npu", "class", "", "npu.v2"])
def test_bad_names_are_refused(tmp_path: Path, name: str) -> None:
    with pytest.raises(ScaffoldError, match=rf"NAME {name!r} is not valid: .* lower-case letters, digits and '_'"):
        generate("accelerator", name, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


def test_cli_writes_the_package_and_says_what_next(tmp_path: Path) -> None:
    result = core("plugins", "new", "accelerator", "acme", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(
        f"Wrote accel-acme (accelerator 'acme', class AcmeAccelerator) in {tmp_path / 'accel-acme'}:"
    )
    assert "  core plugins verify acme\n" in result.stdout
    assert (tmp_path / "accel-acme" / "src" / "torchplug_acme" / "accelerator.py").is_file()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["accelerator", "Bad-Name"], "core: error: NAME 'Bad-Name' is not valid"),
        (["accelerator", "cpu"], "core: error: accelerator 'cpu' is already registered here (core plugins show cpu)"),
        (["strategy", "ddp"], "core: error: strategy 'ddp' is already registered here"),
        (["accelerator", "acme", "--dir", "."], "already exists: give a new folder with --dir, or remove it."),
        (["gadget", "acme"], "argument kind: invalid choice: 'gadget'"),
        (
            ["accelerator", "acme", "--dir", "/proc/torchplug-acme"],
            "core: error: '/proc/torchplug-acme' cannot be written (FileNotFoundError: No such file or directory); "
            "nothing was left there. Hint: give a folder you can write to with --dir.",
        ),
    ],
    ids=["bad-name", "taken-accelerator", "taken-strategy", "existing-folder", "unknown-kind", "unwritable-folder"],
)
def test_cli_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = core("plugins", "new", *args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert list(tmp_path.iterdir()) == []


def install(target: Path, site: Path, dist: str) -> None:
    """Lay the generated package out as pip installs it: its import package and a dist-info with the entry point."""
    shutil.copytree(target / "src" / "torchplug_acme", site / "torchplug_acme")
    project = tomllib.loads((target / "pyproject.toml").read_text())["project"]
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir()
    requires = "".join(f"Requires-Dist: {r}\n" for r in project["dependencies"])
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n{requires}")
    (info / "entry_points.txt").write_text("[torchplug.plugins]\nacme = torchplug_acme._plugin\n")


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
def test_each_generated_kind_passes_verify_as_generated(
    tmp_path: Path, site_dir: Path, new_host: object, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dist = CLASSES[kind][0]
    install(generate(kind, "acme", tmp_path / dist), site_dir, dist)
    host = new_host(autoload=False, requested=(dist,))  # type: ignore[operator]
    try:
        report = verify("acme", kind, host=host)
    finally:
        for name in [m for m in sys.modules if m == "torchplug_acme" or m.startswith("torchplug_acme.")]:
            del sys.modules[name]
    assert report.conforms, report.format()
    assert not [r for r in report.results if r.outcome != "passed" and r.check.name not in ALLOWED_SKIPS[kind]], (
        report.format()
    )


#: The checks a generated package skips, with the reason given (nothing else may be skipped).
ALLOWED_SKIPS: dict[str, set[str]] = {
    "accelerator": {"ddp_fit", "collectives"},  # one simulated device by default: "needs 2 devices, found 1"
    "strategy": {"ddp_fit"},  # a single-process strategy, as generated
    "precision": set(),
    "checkpoint_io": set(),
    "cluster_environment": {"detected", "ranks", "validate_settings", "teardown", "preemption"},  # no job declared
    "logger": set(),
}


def test_the_generated_accelerator_simulates_one_device_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Plain ``accelerator="acme"`` must not start a two-process DDP run on a machine with no card."""
    target = generate("accelerator", "acme", tmp_path / "accel-acme")
    spec = importlib.util.spec_from_file_location("_acme_vendor", target / "src" / "torchplug_acme" / "_vendor.py")
    assert spec is not None and spec.loader is not None
    vendor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(vendor)
    monkeypatch.delenv("ACME_SIMULATED_DEVICES", raising=False)
    assert vendor.device_count() == 1
    monkeypatch.setenv("ACME_SIMULATED_DEVICES", "2")
    assert vendor.device_count() == 2
    accelerator = (target / "src" / "torchplug_acme" / "accelerator.py").read_text()
    assert 'set_device(device.index), once\n        # get_parallel_devices() returns torch.device("acme", index)' in (
        accelerator
    )
    assert 'torchplug.Trainer(accelerator="acme", max_epochs=3)' in (target / "README.md").read_text()
