"""Fixtures for tests that cross packages: real wheels, installed in a fresh virtual env, run as users run them.

Session fixtures, from the bottom up (each is built once per test session, on first use):

- :func:`wheel_builder` builds a wheel from a package folder (``packages/core``, a folder of
  ``tests/fixtures``...) with hatchling from a small build env: never torch, never the dev tree.
- :func:`core_wheel` is the core's wheel.
- :func:`torchplug_venv` is a fresh virtual env with torch (pinned by ``constraints.txt``) and the
  core installed from :func:`core_wheel`, its dependencies from the package index.
- :func:`plugin_set` installs the wheels of some plugin folders into a folder of their own
  (``pip install --no-deps --target``) and returns a :class:`Scenario`: the venv with that folder
  on ``PYTHONPATH``, so each scenario sees exactly the plugins it asks for and no other.

A :class:`Scenario` runs commands in the venv (``core``, ``torchplug``, ``python -m torchplug``,
``python -c``) with a clean environment: no ``TORCHPLUG_*`` variable leaks in from the test process
(whose ``tests/conftest.py`` sets ``TORCHPLUG_STRICT_PLUGINS=1``); each run passes the ones it means.

Example::

    def test_xpu_is_listed(plugin_set):
        scenario = plugin_set("vendor-xpu")
        listing = scenario.listing()
        assert listing.entry("xpu")["status"] == "ok"
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
from packaging.utils import canonicalize_name, parse_wheel_filename

REPO_ROOT: Final = Path(__file__).resolve().parents[2]
FIXTURES_DIR: Final = REPO_ROOT / "tests" / "fixtures"
CONSTRAINTS: Final = REPO_ROOT / "constraints.txt"

#: The torch every fresh venv gets, always installed with ``-c constraints.txt`` (never unpinned).
TORCH_REQUIREMENT: Final = "torch==2.13.0"

#: Seconds one pip step may take (installing torch takes most of it), and one command of a scenario.
PIP_TIMEOUT: Final = 900
RUN_TIMEOUT: Final = 180

#: Environment variables never passed from the test process to a scenario's commands.
_SCRUBBED_PREFIXES: Final = ("TORCHPLUG_", "VENDOR_")
_SCRUBBED: Final = frozenset({"PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH"})

EnvOverrides = Mapping[str, "str | None"]


# -- running commands -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Result:
    """The outcome of one command: its arguments, exit code and output (text)."""

    args: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        """Stdout parsed as one JSON document."""
        try:
            return json.loads(self.stdout)
        except json.JSONDecodeError as exc:
            raise AssertionError(f"stdout is not JSON ({exc}):\n{self}") from exc

    def table(self) -> list[dict[str, str]]:
        """The rows of the table ``core plugins list`` prints (up to its first blank line), keyed by header."""
        lines = self.stdout.split("\n\n", 1)[0].splitlines()
        headers = [h.lower() for h in lines[0].split()]
        rows = [line.split(maxsplit=len(headers) - 1) for line in lines[1:] if not line.startswith(" ")]
        return [dict(zip(headers, row)) for row in rows]

    def __str__(self) -> str:
        return (
            f"$ {' '.join(self.args)}\nexit code {self.returncode}\n"
            f"--- stdout ---\n{self.stdout}\n--- stderr ---\n{self.stderr}"
        )


def run(
    args: Iterable[str | Path],
    env: Mapping[str, str] | None = None,
    timeout: float = RUN_TIMEOUT,
    cwd: Path | None = None,
) -> Result:
    """Run a command to completion and capture its output (never raises on a non-zero exit code)."""
    argv = tuple(str(a) for a in args)
    proc = subprocess.run(
        argv,
        env=dict(env) if env is not None else None,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Result(argv, proc.returncode, proc.stdout, proc.stderr)


def run_ok(args: Iterable[str | Path], env: Mapping[str, str] | None = None, timeout: float = RUN_TIMEOUT) -> Result:
    """Run a command that must succeed (a set-up step); fail with its whole output if it does not."""
    result = run(args, env, timeout)
    if result.returncode != 0:
        raise RuntimeError(f"set-up command failed:\n{result}")
    return result


def clean_env(overrides: EnvOverrides | None = None, pythonpath: Iterable[Path] = ()) -> dict[str, str]:
    """The test process's environment without ``TORCHPLUG_*``/``VENDOR_*``/Python-path variables, then ``overrides``.

    An override of None removes that variable. ``pythonpath`` becomes ``PYTHONPATH``.
    """
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)}
    env.update(PYTHONNOUSERSITE="1", PYTHONUTF8="1")
    paths = [str(p) for p in pythonpath]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


# -- wheels -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Wheel:
    """A built wheel: its file, canonical distribution name and version."""

    path: Path
    name: str
    version: str

    @classmethod
    def from_path(cls, path: Path) -> Wheel:
        """Read name and version from the wheel's file name."""
        name, version, _, _ = parse_wheel_filename(path.name)
        return cls(path, str(name), str(version))

    @property
    def label(self) -> str:
        """``name==version``, as ``core plugins list`` shows a provider."""
        return f"{self.name}=={self.version}"


def resolve_folder(folder: str | Path) -> Path:
    """A package folder: a fixture name (``"vendor-xpu"``), a path relative to the repository root, or absolute."""
    path = Path(folder)
    if not path.is_absolute():
        path = FIXTURES_DIR / path if len(path.parts) == 1 else REPO_ROOT / path
    if not (path / "pyproject.toml").is_file():
        raise FileNotFoundError(f"{folder!r} is not a package folder: {path / 'pyproject.toml'} does not exist")
    return path


class WheelBuilder:
    """Builds wheels from package folders with ``pip wheel --no-deps``, each folder once per session.

    The build backend (hatchling) comes from a build env of its own, so building never installs
    the package's dependencies (torch) and never depends on the dev venv.
    """

    def __init__(self, build_python: Path, out_dir: Path) -> None:
        self._python = build_python
        self._out_dir = out_dir
        self._built: dict[Path, Wheel] = {}

    def __call__(self, folder: str | Path) -> Wheel:
        """The wheel of ``folder`` (see :func:`resolve_folder`), built on first request."""
        path = resolve_folder(folder)
        if path not in self._built:
            self._built[path] = self._build(path)
        return self._built[path]

    def _build(self, folder: Path) -> Wheel:
        out = self._out_dir / folder.name
        out.mkdir(parents=True)
        run_ok(
            [
                self._python,
                "-m",
                "pip",
                "wheel",
                "--no-deps",
                "--no-build-isolation",
                "--no-index",
                "--wheel-dir",
                out,
                folder,
            ],
            clean_env(),
        )
        wheels = list(out.glob("*.whl"))
        assert len(wheels) == 1, f"expected one wheel from {folder}, got {wheels}"
        return Wheel.from_path(wheels[0])


# -- virtual envs -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Venv:
    """A virtual env made with ``python -m venv``."""

    root: Path

    @classmethod
    def create(cls, root: Path) -> Venv:
        """Create a fresh venv (with pip) at ``root``."""
        run_ok([sys.executable, "-m", "venv", root], clean_env())
        return cls(root)

    def script(self, name: str) -> Path:
        """The path of an installed console script (``python``, ``pip``, ``core``...)."""
        folder = self.root / ("Scripts" if os.name == "nt" else "bin")
        return folder / (f"{name}.exe" if os.name == "nt" else name)

    @property
    def python(self) -> Path:
        """The venv's interpreter."""
        return self.script("python")

    def pip_install(self, *args: str | Path) -> Result:
        """``pip install`` into the venv, always under ``-c constraints.txt`` (torch stays pinned).

        ``--no-compile``: compiling every installed module (most of torch's install time) is left to
        the first import of each module, which is all a test needs.
        """
        return run_ok(
            [
                self.python,
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-compile",
                "-c",
                CONSTRAINTS,
                *args,
            ],
            clean_env(),
            timeout=PIP_TIMEOUT,
        )


# -- scenarios --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Listing:
    """The parsed ``core plugins list --json`` document, with look-ups by name."""

    data: dict[str, Any]

    @property
    def plugins(self) -> list[dict[str, Any]]:
        """Every plugin record (the built-ins first)."""
        return list(self.data["plugins"])

    def plugin(self, distribution: str) -> dict[str, Any]:
        """The one plugin record of ``distribution`` (any spelling)."""
        found = [
            p for p in self.plugins if canonicalize_name(p["distribution"] or "") == canonicalize_name(distribution)
        ]
        assert len(found) == 1, f"expected one plugin of {distribution!r}, got {found}"
        return found[0]

    def states(self) -> dict[str, str]:
        """Plugin state by distribution name (``core`` for the built-ins)."""
        return {p["distribution"] or p["name"]: p["state"] for p in self.plugins}

    def entries(self, name: str, kind: str = "accelerator") -> list[dict[str, Any]]:
        """Every listed entry registered under ``name``, in listing order."""
        return [e for e in self.data["entries"] if e["name"] == name and e["kind"] == kind]

    def entry(self, name: str, kind: str = "accelerator", distribution: str | None = None) -> dict[str, Any]:
        """The one listed entry of ``name`` (of ``distribution``, when several claim it)."""
        found = [
            e for e in self.entries(name, kind) if distribution is None or e["provider"]["distribution"] == distribution
        ]
        assert len(found) == 1, f"expected one {kind} entry {name!r} from {distribution or 'anyone'}, got {found}"
        return found[0]


@dataclass(frozen=True)
class Scenario:
    """A venv plus a folder of plugin distributions on ``PYTHONPATH``: exactly the plugins a test sees.

    Every command runs with :func:`clean_env`, so only the ``TORCHPLUG_*`` variables passed in
    ``env`` are set (pass ``TORCHPLUG_STRICT_PLUGINS="1"`` explicitly for strict runs).
    """

    venv: Venv
    site: Path | None
    wheels: tuple[Wheel, ...] = field(default=())

    def env(self, overrides: EnvOverrides | None = None) -> dict[str, str]:
        """The environment of this scenario's commands."""
        return clean_env(overrides, [self.site] if self.site else [])

    def run(self, *args: str | Path, env: EnvOverrides | None = None) -> Result:
        """Run any command (``args[0]`` may be a script name of the venv, such as ``"core"``)."""
        first, *rest = args
        program = self.venv.script(first) if isinstance(first, str) and os.sep not in first else first
        return run([program, *rest], self.env(env), cwd=self.venv.root)

    def core(self, *args: str, env: EnvOverrides | None = None) -> Result:
        """Run the ``core`` command."""
        return self.run("core", *args, env=env)

    def python(self, *args: str, env: EnvOverrides | None = None) -> Result:
        """Run the venv's ``python`` with ``args``."""
        return self.run("python", *args, env=env)

    def python_json(self, code: str, env: EnvOverrides | None = None) -> Any:
        """Run ``python -c code``, which must succeed and print one JSON document as its last line."""
        result = self.python("-c", code, env=env)
        assert result.returncode == 0, str(result)
        lines = result.stdout.strip().splitlines()
        assert lines, f"no output:\n{result}"
        return json.loads(lines[-1])

    def listing(self, *args: str, env: EnvOverrides | None = None, expect_exit: int = 0) -> Listing:
        """Run ``core plugins list --json ARGS``, check its exit code, and parse the document."""
        result = self.core("plugins", "list", "--json", *args, env=env)
        assert result.returncode == expect_exit, str(result)
        return Listing(result.json())


PluginSet = Callable[..., Scenario]


@pytest.fixture(scope="session")
def build_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The interpreter of a small build env holding hatchling (the build backend of every package)."""
    venv = Venv.create(tmp_path_factory.mktemp("build-env") / "venv")
    venv.pip_install("hatchling")
    return venv.python


@pytest.fixture(scope="session")
def wheel_builder(build_python: Path, tmp_path_factory: pytest.TempPathFactory) -> WheelBuilder:
    """Build (once per session) the wheel of a package folder: ``wheel_builder("packages/core")``,
    ``wheel_builder("vendor-xpu")`` for a folder of ``tests/fixtures``."""
    return WheelBuilder(build_python, tmp_path_factory.mktemp("wheels"))


@pytest.fixture(scope="session")
def core_wheel(wheel_builder: WheelBuilder) -> Wheel:
    """The core's wheel, built from ``packages/core``."""
    return wheel_builder("packages/core")


@pytest.fixture(scope="session")
def torchplug_venv(core_wheel: Wheel, tmp_path_factory: pytest.TempPathFactory) -> Venv:
    """A fresh venv with torch (pinned) and the core installed from its wheel (not editable, not the dev tree)."""
    venv = Venv.create(tmp_path_factory.mktemp("torchplug-env") / "venv")
    venv.pip_install(TORCH_REQUIREMENT, core_wheel.path)
    return venv


@pytest.fixture(scope="session")
def plugin_set(
    torchplug_venv: Venv, wheel_builder: WheelBuilder, tmp_path_factory: pytest.TempPathFactory
) -> PluginSet:
    """``plugin_set("vendor-xpu", ...)``: a :class:`Scenario` where exactly these plugin folders are installed.

    Each folder (see :func:`resolve_folder`) is built to a wheel and installed with
    ``pip install --no-deps --target`` into a folder for this set, cached per set. Dependencies
    are not installed: whatever they need must already be in :func:`torchplug_venv`.
    ``plugin_set()`` with no folder is the core alone.
    """
    cache: dict[tuple[str, ...], Scenario] = {}
    root = tmp_path_factory.mktemp("plugin-sets")

    def make(*folders: str | Path) -> Scenario:
        key = tuple(sorted(str(resolve_folder(f)) for f in folders))
        if key not in cache:
            wheels = tuple(wheel_builder(f) for f in key)
            site = None
            if wheels:
                site = root / f"set{len(cache)}"
                run_ok(
                    [
                        torchplug_venv.python,
                        "-m",
                        "pip",
                        "install",
                        "--disable-pip-version-check",
                        "--no-deps",
                        "--no-index",
                        "--target",
                        site,
                        *(w.path for w in wheels),
                    ],
                    clean_env(),
                )
            cache[key] = Scenario(torchplug_venv, site, wheels)
        return cache[key]

    return make


# -- the scenarios most tests share ---------------------------------------------------------------

#: The fixture folders that fail to load, each in its own way (see tests/fixtures/README.md).
FAILING_FIXTURES: Final = ("vendor-importerror", "vendor-hookerror", "vendor-oldcore", "vendor-typo")


@pytest.fixture(scope="session")
def xpu(plugin_set: PluginSet) -> Scenario:
    """The core and vendor-xpu, a working third-party accelerator."""
    return plugin_set("vendor-xpu")


@pytest.fixture(scope="session")
def zoo(plugin_set: PluginSet) -> Scenario:
    """vendor-xpu beside every failing fixture: what works, and every way of failing."""
    return plugin_set("vendor-xpu", *FAILING_FIXTURES)
