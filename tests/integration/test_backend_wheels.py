"""Issue 4's acceptance: our packages built to wheels and installed by pip, offline, into fresh venvs.

One module-scoped folder of wheels (``WHEELS``) holds the wheels built from ``packages/`` and the
dependencies they need besides torch (fetched with ``pip download``). Two fresh venvs get torch first
(pinned, from the configured wheel folder or index), then our packages with
``pip install --no-index --find-links WHEELS ...`` and no pip configuration at all, so the folder
alone must satisfy them:

- ``three``: ``core accel-cuda env-slurm``, the install the design page promises;
- ``seven``: all our packages (the seven of issue 4, and the strategy packages and accel-mps since).

Every command runs with the ``SLURM_*`` variables removed (these tests may run inside a SLURM job).

An import of a vendor library that is not installed leaves no trace (no ``sys.modules`` entry, no
``-X importtime`` line), so the checks that nothing imports torch_xla, poptorch, habana_frameworks,
deepspeed or horovod run twice: as the venv is, and with empty stand-ins of the libraries on
``PYTHONPATH``, where an import would succeed and show (their probes find them there, so the states
differ in that run).
"""

from __future__ import annotations

import configparser
import os
import re
import shutil
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path
from typing import Any, Final

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from tests.integration.conftest import (
    CONSTRAINTS,
    PIP_TIMEOUT,
    TORCH_REQUIREMENT,
    Listing,
    Result,
    Scenario,
    Venv,
    Wheel,
    WheelBuilder,
    clean_env,
    run_ok,
)

pytestmark = pytest.mark.slow

ENTRY_POINT_GROUP: Final = "torchplug.plugins"


@dataclass(frozen=True)
class Package:
    """One of our distributions, as the design page's table lists it."""

    distribution: str
    import_package: str
    #: Its one ``torchplug.plugins`` entry point (name, module); None for the core, whose host loads
    #: ``torchplug._builtin`` itself, through the same hooks, without an entry point.
    entry_point: tuple[str, str] | None

    @property
    def folder(self) -> str:
        """The package folder, relative to the repository root."""
        return f"packages/{self.distribution}"


PACKAGES: Final = (
    Package("core", "torchplug", None),
    Package("accel-cuda", "torchplug_cuda", ("cuda", "torchplug_cuda._plugin")),
    Package("accel-tpu", "torchplug_tpu", ("tpu", "torchplug_tpu._plugin")),
    Package("accel-ipu", "torchplug_ipu", ("ipu", "torchplug_ipu._plugin")),
    Package("accel-hpu", "torchplug_hpu", ("hpu", "torchplug_hpu._plugin")),
    Package("accel-mps", "torchplug_mps", ("mps", "torchplug_mps._plugin")),
    Package("env-slurm", "torchplug_slurm", ("slurm", "torchplug_slurm._plugin")),
    Package("io-xla", "torchplug_xla_io", ("xla_io", "torchplug_xla_io._plugin")),
    Package("strategy-deepspeed", "torchplug_deepspeed", ("deepspeed", "torchplug_deepspeed._plugin")),
    Package("strategy-horovod", "torchplug_horovod", ("horovod", "torchplug_horovod._plugin")),
    Package("logger-mlflow", "torchplug_mlflow", ("mlflow", "torchplug_mlflow._plugin")),
    Package("logger-wandb", "torchplug_wandb", ("wandb", "torchplug_wandb._plugin")),
)
OURS: Final = tuple(p.distribution for p in PACKAGES)
THREE: Final = ("core", "accel-cuda", "env-slurm")


@dataclass(frozen=True)
class Vendor:
    """A backend whose vendor library is not installed here, and what its error must say."""

    accelerator: str
    distribution: str
    library: str
    #: How to get the library, as the message must say it.
    install_hint: str


VENDORS: Final = (
    Vendor("tpu", "accel-tpu", "torch_xla", "pip install torch_xla"),
    Vendor("ipu", "accel-ipu", "poptorch", "pip install <sdk>/poptorch-*.whl"),
    # Intel Gaudi's PyTorch bridge is not on PyPI: it comes with Intel's installer or container, so the
    # hint names the package and the installation guide rather than a bare `pip install`.
    Vendor("hpu", "accel-hpu", "habana_frameworks", "habana-torch-plugin"),
)


@dataclass(frozen=True)
class StrategyVendor:
    """A strategy package whose library is not installed in the fresh venvs, and what its listing must say."""

    distribution: str
    library: str
    #: What every entry's reason must contain.
    says: tuple[str, ...]


STRATEGY_VENDORS: Final = (
    StrategyVendor("strategy-deepspeed", "deepspeed", ("deepspeed is not installed", "pip install deepspeed")),
    # horovod does not install from PyPI against this torch: the reason says so and names the alternatives.
    StrategyVendor(
        "strategy-horovod",
        "horovod",
        ("horovod is not installed", "tools/build_horovod.py", "strategy='ddp' started by torchrun"),
    ),
)
#: The logger packages, whose tracking library is not installed in the fresh venvs either: (distribution,
#: library, what the reason says).
LOGGER_VENDORS: Final = (
    StrategyVendor("logger-mlflow", "mlflow", ("mlflow is not installed", "pip install mlflow")),
    StrategyVendor("logger-wandb", "wandb", ("wandb is not installed", "pip install wandb")),
)
VENDOR_LIBRARIES: Final = (
    *(v.library for v in VENDORS),
    *(v.library for v in STRATEGY_VENDORS),
    *(v.library for v in LOGGER_VENDORS),
)
#: Their distributions, which no package may require (an optional extra at most).
VENDOR_DISTRIBUTIONS: Final = (
    *("torch-xla", "poptorch", "habana-torch-plugin", "deepspeed", "horovod"),
    *("mlflow", "mlflow-skinny", "wandb"),
)

#: The environment of every command: no SLURM variable, so env-slurm must say "not detected".
NO_SLURM: Final = {k: None for k in os.environ if k.startswith("SLURM_")}

#: pip with no configuration file and no PIP_* index setting: ``--find-links WHEELS`` is all it has.
OFFLINE_PIP: Final = {
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_FIND_LINKS": None,
    "PIP_INDEX_URL": None,
    "PIP_EXTRA_INDEX_URL": None,
    "PIP_NO_INDEX": None,
    "PIP_CONSTRAINT": None,
}

#: Builds a CPU Trainer and prints, as JSON, what it chose and which vendor modules are imported.
CPU_TRAINER = f"""
import json, sys
from torchplug import Trainer
trainer = Trainer(accelerator="cpu")
vendor = sorted(m for m in sys.modules if m.split(".")[0] in {VENDOR_LIBRARIES!r})
print(json.dumps({{"accelerator": type(trainer.accelerator).__name__, "vendor": vendor}}))
"""

#: Runs ``core plugins list`` in-process and prints, as JSON, its exit code and the torch and vendor modules imported.
LIST_MODULES = f"""
import contextlib, io, json, sys
from torchplug.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    code = main(["plugins", "list"])
modules = sorted(m for m in sys.modules if m.split(".")[0] in {("torch", *VENDOR_LIBRARIES)!r})
print(json.dumps({{"exit": code, "modules": modules}}))
"""

#: Asks for each vendor accelerator and prints, as JSON, the error each raised.
VENDOR_TRAINERS = f"""
import json, sys
from torchplug import Trainer
errors = {{}}
for name in {tuple(v.accelerator for v in VENDORS)!r}:
    try:
        Trainer(accelerator=name)
    except Exception as exc:
        errors[name] = {{"types": [c.__name__ for c in type(exc).__mro__], "message": str(exc)}}
    else:
        errors[name] = None
vendor = sorted(m for m in sys.modules if m.split(".")[0] in {VENDOR_LIBRARIES!r})
print(json.dumps({{"errors": errors, "vendor": vendor}}))
"""

#: Prints, as JSON, each of our distributions installed in the venv: version, where, how.
INSTALLED = f"""
import importlib.metadata as m, json
found = {{}}
for name in {OURS!r}:
    try:
        dist = m.distribution(name)
    except m.PackageNotFoundError:
        continue
    found[name] = {{"version": dist.version, "location": str(dist.locate_file("")),
                   "direct_url": dist.read_text("direct_url.json"), "installer": dist.read_text("INSTALLER")}}
print(json.dumps(found))
"""


# -- wheels -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wheels_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """WHEELS: the one folder of wheels every offline install below reads."""
    return tmp_path_factory.mktemp("wheels-backends")


@pytest.fixture(scope="module")
def backend_wheels(wheel_builder: WheelBuilder, wheels_dir: Path) -> dict[str, Wheel]:
    """Our wheels, built from ``packages/`` (the core's is shared with the other tests), copied to WHEELS."""
    wheels = {}
    for package in PACKAGES:
        built = wheel_builder(package.folder)
        copy = wheels_dir / built.path.name
        shutil.copyfile(built.path, copy)
        wheels[package.distribution] = Wheel.from_path(copy)
    return wheels


@pytest.fixture(scope="module")
def wheelhouse(backend_wheels: dict[str, Wheel], build_python: Path, wheels_dir: Path) -> Path:
    """WHEELS completed with the dependencies our wheels declare besides torch and each other, from the index."""
    requirements = sorted(
        {
            str(r)
            for wheel in backend_wheels.values()
            for r in _requirements(wheel)
            if canonicalize_name(r.name) not in {*OURS, "torch"}
        }
    )
    assert requirements, "the core declares its dependencies: there must be some to fetch"
    run_ok(
        [
            build_python,
            "-m",
            "pip",
            "download",
            "--disable-pip-version-check",
            "--only-binary",
            ":all:",
            "--dest",
            wheels_dir,
            "-c",
            CONSTRAINTS,
            *requirements,
        ],
        clean_env(),
        timeout=PIP_TIMEOUT,
    )
    return wheels_dir


def _metadata(wheel: Wheel) -> Any:
    """The wheel's METADATA headers (an ``email.message.Message``)."""
    with zipfile.ZipFile(wheel.path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        return Parser().parsestr(archive.read(name).decode())


def _requirements(wheel: Wheel) -> list[Requirement]:
    """The wheel's Requires-Dist, without the optional ones (those behind an ``extra`` marker)."""
    requirements = [Requirement(line) for line in _metadata(wheel).get_all("Requires-Dist") or []]
    return [r for r in requirements if r.marker is None or "extra" not in str(r.marker)]


def _entry_points(wheel: Wheel) -> dict[str, dict[str, str]]:
    """The wheel's entry points by group (an empty dict when it declares none)."""
    with zipfile.ZipFile(wheel.path) as archive:
        names = [n for n in archive.namelist() if n.endswith(".dist-info/entry_points.txt")]
        if not names:
            return {}
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # entry-point names keep their case
        parser.read_string(archive.read(names[0]).decode())
    return {group: dict(parser[group]) for group in parser.sections()}


def _files(wheel: Wheel) -> list[str]:
    with zipfile.ZipFile(wheel.path) as archive:
        return archive.namelist()


def test_seven_wheels_build(backend_wheels: dict[str, Wheel], wheels_dir: Path) -> None:
    assert sorted(p.name for p in wheels_dir.glob("*.whl")) == sorted(w.path.name for w in backend_wheels.values())
    assert len(backend_wheels) == len(PACKAGES)
    for distribution, wheel in backend_wheels.items():
        name, _, build, tags = parse_wheel_filename(wheel.path.name)
        assert (name, build) == (distribution, ())
        assert {str(t) for t in tags} == {"py3-none-any"}, f"{wheel.path.name} is not a pure-Python wheel"
        meta = _metadata(wheel)
        assert (meta["Name"], meta["Version"]) == (distribution, wheel.version)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.distribution)
def test_each_wheel_has_its_package_and_its_one_plugin_entry_point(
    package: Package, backend_wheels: dict[str, Wheel]
) -> None:
    wheel = backend_wheels[package.distribution]
    files = _files(wheel)
    assert f"{package.import_package}/__init__.py" in files
    assert f"{package.import_package}/py.typed" in files
    assert not [f for f in files if f.endswith(".pyc") or "/tests/" in f]
    assert _metadata(wheel).get_payload().strip(), "the README is the long description"

    entry_points = _entry_points(wheel)
    if package.entry_point is None:  # the core: its built-ins register through the hooks, loaded by the host
        assert ENTRY_POINT_GROUP not in entry_points
        assert "torchplug/_builtin.py" in files
        assert entry_points["console_scripts"] == {"core": "torchplug.cli:main", "torchplug": "torchplug.cli:main"}
    else:
        name, module = package.entry_point
        assert entry_points == {ENTRY_POINT_GROUP: {name: module}}
        assert f"{module.replace('.', '/')}.py" in files


@pytest.mark.parametrize("package", PACKAGES[1:], ids=lambda p: p.distribution)
def test_each_backend_requires_a_core_range_that_includes_this_core(
    package: Package, backend_wheels: dict[str, Wheel]
) -> None:
    wheel = backend_wheels[package.distribution]
    core = [r for r in _requirements(wheel) if r.name == "core"]
    assert len(core) == 1, f"{package.distribution} must require core once, got {core}"
    specifier = core[0].specifier
    assert str(specifier), f"{package.distribution} must say which core versions it supports"
    assert specifier.contains(backend_wheels["core"].version)
    assert any(s.operator in ("<", "<=", "~=", "==") for s in specifier), "a range has an upper bound"
    assert not [r for r in _requirements(wheel) if canonicalize_name(r.name) in VENDOR_DISTRIBUTIONS]


def test_wheelhouse_holds_every_dependency_but_torch(wheelhouse: Path, backend_wheels: dict[str, Wheel]) -> None:
    names = {canonicalize_name(parse_wheel_filename(p.name)[0]) for p in wheelhouse.glob("*.whl")}
    assert {r.name for r in _requirements(backend_wheels["core"])} - {"torch"} <= names
    assert "torch" not in names  # torch is installed first, on its own
    assert not list(wheelhouse.glob("*.tar.gz"))


# -- the fresh venvs ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """A fresh venv after the offline install, and that install's pip output."""

    scenario: Scenario
    pip: Result

    def stubbed(self, stubs: Path) -> Scenario:
        """The same venv with the vendor stand-ins on ``PYTHONPATH``."""
        return Scenario(self.scenario.venv, stubs)


def _install_offline(root: Path, wheelhouse: Path, distributions: tuple[str, ...]) -> Installed:
    venv = Venv.create(root)
    venv.pip_install(TORCH_REQUIREMENT)  # first, from wherever pip finds torch here (the local wheel folder)
    pip = run_ok(
        [
            venv.python,
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "--no-index",
            "--find-links",
            wheelhouse,
            "-c",
            CONSTRAINTS,
            *distributions,
        ],
        clean_env(OFFLINE_PIP),
        timeout=PIP_TIMEOUT,
    )
    return Installed(Scenario(venv, None), pip)


@pytest.fixture(scope="module")
def three(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """``pip install --no-index --find-links WHEELS core accel-cuda env-slurm`` in a fresh venv with torch."""
    return _install_offline(tmp_path_factory.mktemp("backends-three") / "venv", wheelhouse, THREE)


@pytest.fixture(scope="module")
def seven(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Installed:
    """All our packages, installed the same way in another fresh venv."""
    return _install_offline(tmp_path_factory.mktemp("backends-seven") / "venv", wheelhouse, OURS)


@pytest.fixture(scope="module")
def vendor_stubs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with an empty package for each vendor library (torch_xla, deepspeed...): importable, so visible."""
    root = tmp_path_factory.mktemp("vendor-stubs")
    for library in VENDOR_LIBRARIES:
        (root / library).mkdir()
        (root / library / "__init__.py").write_text(f'"""A stand-in for {library}: an import of it is the bug."""\n')
    return root


def _torch_has_cuda(scenario: Scenario) -> bool:
    """Whether the venv's torch can use a GPU here (what accel-cuda must report honestly)."""
    return bool(scenario.python_json("import json, torch; print(json.dumps(torch.cuda.is_available()))"))


def _assert_installed_exactly(
    installed: Installed, distributions: tuple[str, ...], backend_wheels: dict[str, Wheel]
) -> None:
    found = installed.scenario.python_json(INSTALLED)
    assert sorted(found) == sorted(distributions)
    root = installed.scenario.venv.root.resolve()
    for name, info in found.items():
        assert info["version"] == backend_wheels[name].version
        assert Path(info["location"]).resolve().is_relative_to(root), f"{name} is not installed in the venv"
        assert info["direct_url"] is None  # from the folder of wheels: not editable, not a path or URL
        assert info["installer"].strip() == "pip"
    done = re.search(r"^Successfully installed (.*)$", installed.pip.stdout, re.MULTILINE)
    assert done is not None, str(installed.pip)
    names = {canonicalize_name(item.rsplit("-", 1)[0]) for item in done.group(1).split()}
    assert sorted(names & set(OURS)) == sorted(distributions)
    assert "torch" not in names, "torch was installed first and must not be replaced"
    check = installed.scenario.python("-m", "pip", "check")
    assert check.returncode == 0, str(check)


def _imported(importtime: str, packages: tuple[str, ...]) -> list[str]:
    """The modules of ``packages`` in a ``python -X importtime`` report."""
    modules = [line.rsplit("|", 1)[-1].strip() for line in importtime.splitlines() if line.startswith("import time:")]
    return [m for m in modules if m.split(".")[0] in packages]


# -- core, accel-cuda and env-slurm -------------------------------------------------------------


def test_offline_install_of_three_installs_exactly_those(three: Installed, backend_wheels: dict[str, Wheel]) -> None:
    _assert_installed_exactly(three, THREE, backend_wheels)


def test_three_are_listed_with_their_honest_state(three: Installed, backend_wheels: dict[str, Wheel]) -> None:
    listing = three.scenario.listing(env=NO_SLURM)
    assert listing.states() == {"core": "ok", "accel-cuda": "ok", "env-slurm": "ok"}
    assert listing.plugin("accel-cuda")["requires_core"] == "<0.2,>=0.1"
    _assert_cuda_honest(listing, backend_wheels, _torch_has_cuda(three.scenario))
    _assert_slurm_not_detected(listing, backend_wheels)
    providers = {e["provider"]["distribution"] for e in listing.data["entries"]}
    assert providers == {"core", "accel-cuda", "env-slurm"}


def _assert_cuda_honest(listing: Listing, backend_wheels: dict[str, Wheel], torch_has_cuda: bool) -> None:
    cuda = listing.entry("cuda")
    assert (cuda["aliases"], cuda["provider"]["distribution"], cuda["provider"]["version"]) == (
        ["gpu"],
        "accel-cuda",
        backend_wheels["accel-cuda"].version,
    )
    if torch_has_cuda:
        assert (cuda["status"], cuda["reason"]) == ("ok", None)
    else:
        assert cuda["status"] == "unavailable"
        assert re.search(r"CUDA|GPU|NVIDIA", cuda["reason"] or ""), cuda
        assert "Hint:" in cuda["reason"]


def _assert_slurm_not_detected(listing: Listing, backend_wheels: dict[str, Wheel]) -> None:
    slurm = listing.entry("slurm", "cluster_environment")
    assert slurm["provider"]["distribution"] == "env-slurm"
    assert slurm["provider"]["version"] == backend_wheels["env-slurm"].version
    assert (slurm["status"], slurm["detected"]) == ("ok", False)
    assert slurm["reason"].startswith("not detected"), slurm
    assert listing.entry("local", "cluster_environment")["detected"] is True


@pytest.fixture(params=["three", "seven"])
def installed(request: pytest.FixtureRequest) -> Installed:
    """Each of the two venvs in turn."""
    result: Installed = request.getfixturevalue(request.param)
    return result


@pytest.mark.parametrize("stubs", [False, True], ids=["as-is", "vendor-stubs"])
def test_listing_imports_no_vendor_library_and_no_torch(installed: Installed, vendor_stubs: Path, stubs: bool) -> None:
    scenario = installed.stubbed(vendor_stubs) if stubs else installed.scenario
    result = scenario.python("-X", "importtime", "-m", "torchplug", "plugins", "list", env=NO_SLURM)
    assert result.returncode == 0, str(result)
    assert "cuda" in result.stdout and "slurm" in result.stdout
    assert "torchplug._host" in result.stderr, "no -X importtime report"
    assert _imported(result.stderr, VENDOR_LIBRARIES) == []
    assert _imported(result.stderr, ("torch",)) == []  # listing never imports torch (design page)
    # -X importtime only sees `import` statements, not importlib.import_module (which loads the plugin
    # modules and their probes), so the same listing in-process must leave no such module either
    assert scenario.python_json(LIST_MODULES, env=NO_SLURM) == {"exit": 0, "modules": []}


@pytest.mark.parametrize("stubs", [False, True], ids=["as-is", "vendor-stubs"])
def test_cpu_trainer_imports_no_vendor_library(installed: Installed, vendor_stubs: Path, stubs: bool) -> None:
    scenario = installed.stubbed(vendor_stubs) if stubs else installed.scenario
    assert scenario.python_json(CPU_TRAINER, env=NO_SLURM) == {"accelerator": "CPUAccelerator", "vendor": []}


# -- all seven ----------------------------------------------------------------------------------


def test_offline_install_of_seven(seven: Installed, backend_wheels: dict[str, Wheel]) -> None:
    _assert_installed_exactly(seven, OURS, backend_wheels)


@pytest.fixture(scope="module")
def seven_listing(seven: Installed) -> Listing:
    """``core plugins list --json`` with all our packages installed."""
    return seven.scenario.listing(env=NO_SLURM)


def test_seven_are_listed_with_their_honest_state(
    seven: Installed, seven_listing: Listing, backend_wheels: dict[str, Wheel]
) -> None:
    listing = seven_listing
    assert listing.states() == dict.fromkeys(OURS, "ok")
    for package in PACKAGES[1:]:
        record = listing.plugin(package.distribution)
        assert package.entry_point is not None
        assert (record["name"], record["module"], record["version"], record["reason"]) == (
            *package.entry_point,
            backend_wheels[package.distribution].version,
            None,
        )

    _assert_cuda_honest(listing, backend_wheels, _torch_has_cuda(seven.scenario))
    _assert_slurm_not_detected(listing, backend_wheels)
    for vendor in VENDORS:
        accelerator = listing.entry(vendor.accelerator)
        assert accelerator["provider"]["distribution"] == vendor.distribution
        entries = [e for e in listing.data["entries"] if e["provider"]["distribution"] == vendor.distribution]
        assert {e["kind"] for e in entries} >= {"accelerator", "strategy", "precision"}
        for entry in entries:  # every plugin of the backend says it cannot run, and why
            assert entry["status"] == "unavailable", entry
            assert f"{vendor.library} is not installed" in entry["reason"], entry
            assert vendor.install_hint in entry["reason"], entry

    for strategy_vendor in STRATEGY_VENDORS:  # every plugin of the package says it cannot run, and why
        entries = [e for e in listing.data["entries"] if e["provider"]["distribution"] == strategy_vendor.distribution]
        assert {e["kind"] for e in entries} >= {"strategy"}
        for entry in entries:
            assert entry["status"] == "unavailable", entry
            for text in strategy_vendor.says:
                assert text in entry["reason"], entry

    for logger_vendor in LOGGER_VENDORS:  # the logger names the library to install
        entries = [e for e in listing.data["entries"] if e["provider"]["distribution"] == logger_vendor.distribution]
        assert [(e["kind"], e["name"], e["status"]) for e in entries] == [
            ("logger", logger_vendor.library, "unavailable")
        ]
        for text in logger_vendor.says:
            assert text in entries[0]["reason"], entries[0]
    for builtin in ("csv", "tensorboard"):  # the core's loggers; tensorboard is an optional extra of the core
        assert listing.entry(builtin, "logger")["provider"]["distribution"] == "core"

    mps = listing.entry("mps")  # accel-mps: its probe answers from the operating system, without torch
    assert (mps["provider"]["distribution"], mps["status"]) == ("accel-mps", "unavailable")
    assert "MPS is Apple's Metal GPU backend, only on macOS (this is Linux)" in mps["reason"], mps
    generic = listing.entry("torch")  # the core's generic accelerator: probed on use (--check)
    assert (generic["provider"]["distribution"], generic["status"]) == ("core", "ok")

    xla_io = listing.entry("xla", "checkpoint_io")
    # io-xla needs no torch_xla: without it, every tensor is moved with Tensor.cpu() (its README)
    assert (xla_io["provider"]["distribution"], xla_io["status"], xla_io["reason"]) == ("io-xla", "ok", None)
    assert xla_io["target"] == "torchplug_xla_io.checkpoint_io:XLACheckpointIO"


def test_seven_table_names_every_backend(
    seven: Installed, seven_listing: Listing, backend_wheels: dict[str, Wheel]
) -> None:
    result = seven.scenario.core("plugins", "list", env=NO_SLURM)
    assert result.returncode == 0, str(result)
    rows = {(r["kind"], r["name"]): r for r in result.table()}
    entries = {(e["kind"], e["name"]): e for e in seven_listing.data["entries"]}
    assert rows.keys() == entries.keys()
    for key, entry in entries.items():
        provider = entry["provider"]
        assert rows[key]["provider"] == f"{provider['distribution']}=={provider['version']}"
        assert rows[key]["status"] == entry["status"]
    labels = {r["provider"] for r in rows.values()}
    assert labels == {w.label for w in backend_wheels.values()}
    for vendor in VENDORS:
        assert rows["accelerator", vendor.accelerator]["status"] == "unavailable"
        assert f"-> {vendor.library} is not installed" in result.stdout
    assert "Plugins not loaded" not in result.stdout


def test_every_backend_class_imports_without_its_vendor_library(seven: Installed) -> None:
    listing = seven.scenario.listing("--check", env=NO_SLURM)
    failed = [
        (e["kind"], e["name"], e["check"]["error"])
        for e in listing.data["entries"]
        if not e["check"]["imported"] or e["check"]["error"]
    ]
    assert failed == []
    for vendor in VENDORS:
        check = listing.entry(vendor.accelerator)["check"]
        assert (check["available"], check["device_count"]) == (False, None)
    assert listing.entry("mps")["check"]["available"] is False
    generic = listing.entry("torch")  # --check asks torch: no accelerator, or CUDA (claimed by accel-cuda)
    assert (generic["status"], generic["check"]["available"]) == ("unavailable", False)
    expected = "torch's accelerator 'cuda' is served by" if _torch_has_cuda(seven.scenario) else "torch reports no"
    assert generic["reason"].startswith(expected), generic


@pytest.fixture(scope="module")
def vendor_trainers(seven: Installed) -> dict[str, Any]:
    """What ``Trainer(accelerator=...)`` raised for tpu, ipu and hpu in the venv with all seven."""
    result: dict[str, Any] = seven.scenario.python_json(VENDOR_TRAINERS, env=NO_SLURM)
    return result


@pytest.mark.parametrize("vendor", VENDORS, ids=lambda v: v.accelerator)
def test_trainer_without_the_vendor_library_says_what_to_install(
    vendor: Vendor, vendor_trainers: dict[str, Any], backend_wheels: dict[str, Wheel]
) -> None:
    error = vendor_trainers["errors"][vendor.accelerator]
    assert error is not None, f"Trainer(accelerator={vendor.accelerator!r}) did not raise"
    assert "PluginUnavailableError" in error["types"]
    message = error["message"]
    assert f"{vendor.library} is not installed" in message
    assert vendor.install_hint in message
    assert f"{vendor.distribution} {backend_wheels[vendor.distribution].version}" in message
    assert vendor_trainers["vendor"] == []
