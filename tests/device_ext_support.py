"""torchplug-testdevice for the tests: build its wheel once, cache it, install it, run Python that sees ``tpdev``.

``tests/fixtures/device-ext`` is a real out-of-tree torch device (PrivateUse1 renamed ``tpdev``,
loaded at ``import torch`` through the ``torch.backends`` entry point). Its wheel holds C++ compiled
against the installed torch, so it is built here, not by the hatchling ``wheel_builder`` of the
integration tests:

- :func:`build_testdevice` builds it with ``pip wheel --no-build-isolation`` in a scratch copy of the
  sources (the build python needs torch and ``setuptools>=70.1``) and caches it under
  :func:`cache_root`, keyed by the torch version, the interpreter and a digest of the sources; a
  later run, in any env with the same torch and Python, reuses it. A file lock keeps concurrent
  test sessions from building it twice.
- :func:`install_testdevice` installs it into a folder (``pip install --no-deps --target``); a
  process with that folder on ``PYTHONPATH`` has the device, as a user who ran ``pip install`` does.
  :func:`install_testdevice_into_env` installs it into a virtual env instead (the integration
  tests' ``torchplug_venv``, for example), for good.
- :class:`DeviceSite` runs commands with that folder on the path; :class:`DeviceWorker` keeps one such
  interpreter alive to run many snippets without paying for ``import torch`` each time.

The device is process-global and cannot be unloaded (PrivateUse1 is renamed once per process), so
tests never load it into the pytest process itself: they run it in children.

Pytest fixtures (import them into a ``conftest.py``): :func:`testdevice_wheel_path`,
:func:`testdevice_site`, :func:`tpdev`.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import pytest

REPO_ROOT: Final = Path(__file__).resolve().parents[1]
DEVICE_EXT_DIR: Final = REPO_ROOT / "tests" / "fixtures" / "device-ext"

#: The device type the extension registers, and its distribution and import names.
DEVICE_TYPE: Final = "tpdev"
DISTRIBUTION: Final = "torchplug-testdevice"
IMPORT_NAME: Final = "torchplug_testdevice"

#: Where the wheels are cached: this variable, else ``$XDG_CACHE_HOME/torchplug-testdevice``, else ``~/.cache/...``.
CACHE_VARIABLE: Final = "TORCHPLUG_TESTDEVICE_CACHE"

#: Seconds a build may take (a cold build takes one to two minutes on 2 cores), and one command.
BUILD_TIMEOUT: Final = 1200
RUN_TIMEOUT: Final = 300

#: Variables of the test process that must not reach a child unless a test sets them.
_SCRUBBED: Final = frozenset({"PYTHONPATH", "TORCH_DEVICE_BACKEND_AUTOLOAD"})
_SCRUBBED_PREFIXES: Final = ("TPDEV_",)

# What the digest covers: everything the build reads.
_SOURCE_PATTERNS: Final = ("pyproject.toml", "setup.py", "README.md", "csrc/*", "src/**/*.py", "src/**/py.typed")


# -- building and caching ---------------------------------------------------------------------


def source_digest(root: Path = DEVICE_EXT_DIR) -> str:
    """A SHA-256 over the names and bytes of every file the build reads."""
    files = sorted({p for pattern in _SOURCE_PATTERNS for p in root.glob(pattern) if p.is_file()})
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


def cache_root() -> Path:
    """The folder that holds one sub-folder per cached build."""
    if configured := os.environ.get(CACHE_VARIABLE):
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / DISTRIBUTION


@dataclass(frozen=True, slots=True)
class BuildPython:
    """An interpreter that can build the wheel: its torch, its cache tag (``cpython-311``) and setuptools."""

    python: Path
    torch_version: str
    cache_tag: str
    setuptools_version: str

    @classmethod
    def probe(cls, python: Path) -> BuildPython:
        """Ask ``python`` for its torch and setuptools; fail with a hint when either is missing or too old."""
        code = (
            "import json, sys\nfrom importlib.metadata import version\nimport torch\n"
            "print(json.dumps([torch.__version__, sys.implementation.cache_tag, version('setuptools')]))"
        )
        env = child_env({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"})
        result = subprocess.run(
            [str(python), "-c", code], capture_output=True, text=True, env=env, timeout=RUN_TIMEOUT, check=False
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{python} cannot build {DISTRIBUTION}: it needs torch and setuptools.\n{result.stderr}\n"
                f"Hint: {python} -m pip install -c constraints.txt torch==<pinned> 'setuptools>=70.1'"
            )
        torch_version, cache_tag, setuptools_version = json.loads(result.stdout.strip().splitlines()[-1])
        found = cls(python, torch_version, cache_tag, setuptools_version)
        if found.setuptools_tuple < (70, 1):
            raise RuntimeError(
                f"{python} has setuptools {setuptools_version}; building {DISTRIBUTION} needs setuptools>=70.1 "
                f"(its own bdist_wheel). Hint: {python} -m pip install -c constraints.txt 'setuptools>=70.1'"
            )
        return found

    @property
    def setuptools_tuple(self) -> tuple[int, ...]:
        """The setuptools version as numbers (the leading numeric parts)."""
        parts = []
        for part in self.setuptools_version.split("."):
            if not part.isdigit():
                break
            parts.append(int(part))
        return tuple(parts)

    def cache_key(self, digest: str) -> str:
        """The cache folder name: torch version, interpreter and source digest."""
        return f"torch-{self.torch_version}-{self.cache_tag}-{digest[:16]}"


@dataclass(frozen=True, slots=True)
class BuiltWheel:
    """A cached wheel and how it came to be: ``built`` is False when it was found in the cache."""

    path: Path
    built: bool
    seconds: float


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if missing): one build per cache entry at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _cached(entry: Path) -> Path | None:
    wheels = sorted(entry.glob("*.whl"))
    return wheels[0] if len(wheels) == 1 else None


def build_testdevice(python: Path | None = None, cache: Path | None = None) -> BuiltWheel:
    """The wheel of torchplug-testdevice for ``python`` (default: this interpreter), built on a cache miss.

    ``cache`` defaults to :func:`cache_root`. ``build.json`` beside a built wheel records how long
    the build took.
    """
    build_python = BuildPython.probe(python or Path(sys.executable))
    entry = (cache or cache_root()) / build_python.cache_key(source_digest())
    if wheel := _cached(entry):
        return BuiltWheel(wheel, built=False, seconds=0.0)
    with _locked(entry.with_name(entry.name + ".lock")):
        if wheel := _cached(entry):  # built by another session while this one waited
            return BuiltWheel(wheel, built=False, seconds=0.0)
        seconds = _build_into(entry, build_python)
    wheel = _cached(entry)
    assert wheel is not None, f"no wheel in {entry} after building"
    return BuiltWheel(wheel, built=True, seconds=seconds)


def _build_into(entry: Path, build_python: BuildPython) -> float:
    """Build the wheel into the cache folder ``entry``; returns the seconds it took.

    The build runs in a scratch copy of the sources (no ``build/`` folder left in the repository,
    no stale objects reused), with ``MAX_JOBS=2`` unless set and torch's backend autoloading off.
    """
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tpdev-build-") as scratch:
        sources, out = Path(scratch) / "src", Path(scratch) / "out"
        shutil.copytree(DEVICE_EXT_DIR, sources, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        env = child_env({"TORCH_DEVICE_BACKEND_AUTOLOAD": "0", "MAX_JOBS": os.environ.get("MAX_JOBS", "2")})
        command = [str(build_python.python), "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "--no-index"]
        command += ["--disable-pip-version-check", "--wheel-dir", str(out), str(sources)]
        result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=BUILD_TIMEOUT, check=False)
        if result.returncode != 0:
            output = f"{result.stdout}\n{result.stderr}"
            raise RuntimeError(f"building {DISTRIBUTION} failed:\n$ {' '.join(command)}\n{output}")
        (built,) = out.glob("*.whl")
        seconds = time.monotonic() - started
        staging = Path(tempfile.mkdtemp(prefix=entry.name + ".", dir=entry.parent))
        staging.chmod(0o755)
        shutil.copy2(built, staging / built.name)
        record = {"seconds": round(seconds, 1), "torch": build_python.torch_version, "python": str(build_python.python)}
        (staging / "build.json").write_text(json.dumps(record, indent=2) + "\n")
    if entry.exists():  # an incomplete entry left by a build that was killed
        shutil.rmtree(entry)
    staging.replace(entry)  # atomic: readers see a complete entry or none
    return seconds


def install_testdevice(target: Path, wheel: Path | None = None, python: Path | None = None) -> Path:
    """Install the wheel into the folder ``target`` with ``pip install --no-deps --target``; returns ``target``.

    ``python`` runs pip (default: this interpreter); the folder works for any interpreter with the
    same torch and Python version once it is on ``PYTHONPATH``.
    """
    wheel = wheel or build_testdevice(python).path
    command = [str(python or sys.executable), "-m", "pip", "install", "--no-deps", "--no-index"]
    command += ["--disable-pip-version-check", "--target", str(target), str(wheel)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"installing {wheel.name} failed:\n{result.stdout}\n{result.stderr}")
    return target


def install_testdevice_into_env(python: Path, wheel: Path | None = None) -> None:
    """Install the wheel into the environment of the interpreter ``python`` (a venv's ``bin/python``).

    The env must hold the torch the wheel was built against (see :class:`BuildPython`): the wheel
    pins it, and nothing is fetched (``--no-deps --no-index``).
    """
    wheel = wheel or build_testdevice().path
    command = [str(python), "-m", "pip", "install", "--no-deps", "--no-index", "--disable-pip-version-check"]
    result = subprocess.run([*command, str(wheel)], capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"installing {wheel.name} into {python} failed:\n{result.stdout}\n{result.stderr}")


# -- running children that see the device ---------------------------------------------------------


def child_env(overrides: Mapping[str, str | None] | None = None, pythonpath: tuple[Path, ...] = ()) -> dict[str, str]:
    """This process's environment without ``PYTHONPATH``, ``TPDEV_*`` and the autoload switch, then ``overrides``.

    An override of None removes the variable; ``pythonpath`` becomes ``PYTHONPATH``.
    """
    env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED and not k.startswith(_SCRUBBED_PREFIXES)}
    env["PYTHONNOUSERSITE"] = "1"
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@dataclass(frozen=True, slots=True)
class DeviceSite:
    """A folder where torchplug-testdevice is installed, and an interpreter to run with it on the path."""

    path: Path
    python: Path = field(default_factory=lambda: Path(sys.executable))

    def env(self, overrides: Mapping[str, str | None] | None = None) -> dict[str, str]:
        """The environment of a child that has the device (the repository root is importable too)."""
        return child_env(overrides, (self.path, REPO_ROOT))

    def run(
        self, *args: str, env: Mapping[str, str | None] | None = None, timeout: float = RUN_TIMEOUT
    ) -> subprocess.CompletedProcess[str]:
        """Run ``python ARGS`` to completion (never raises on a non-zero exit code)."""
        return subprocess.run(
            [str(self.python), *args], capture_output=True, text=True, env=self.env(env), timeout=timeout, check=False
        )

    def python_json(self, code: str, env: Mapping[str, str | None] | None = None) -> Any:
        """Run ``python -c code`` in a fresh interpreter; it must succeed and print JSON as its last line."""
        result = self.run("-c", textwrap.dedent(code), env=env)
        assert result.returncode == 0, f"exit code {result.returncode}\n{result.stdout}\n{result.stderr}"
        return json.loads(result.stdout.strip().splitlines()[-1])


# A child that executes snippets sent as JSON lines, each in a fresh namespace, and answers with
# the snippet's `result` (JSON) or its traceback. Its own output goes to stderr so that stdout
# carries only the answers.
_WORKER: Final = """
import json, sys, traceback
answers = sys.stdout
sys.stdout = sys.stderr
import torch
for line in sys.stdin:
    namespace = {"__name__": "__tpdev_snippet__"}
    try:
        exec(compile(json.loads(line), "<snippet>", "exec"), namespace)
        answer = {"ok": True, "result": namespace.get("result")}
    except BaseException:
        answer = {"ok": False, "error": traceback.format_exc()}
    answers.write(json.dumps(answer) + "\\n")
    answers.flush()
"""


class SnippetError(AssertionError):
    """A snippet raised in the worker; the message is its traceback."""


class DeviceWorker:
    """One long-lived interpreter with the device loaded, running snippets for many tests.

    ``worker.run(code)`` executes ``code`` in a fresh namespace and returns the value it left in
    ``result`` (anything JSON can carry). A snippet that raises fails the calling test with the
    child's traceback; a crashed child is restarted for the next snippet.
    """

    def __init__(self, site: DeviceSite, env: Mapping[str, str | None] | None = None) -> None:
        self._site = site
        self._env = dict(env or {})
        self._process: subprocess.Popen[str] | None = None
        self._stderr: IO[str] | None = None

    def _start(self) -> subprocess.Popen[str]:
        self._stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115  (closed in close())
        return subprocess.Popen(
            [str(self._site.python), "-u", "-c", _WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=self._site.env(self._env),
        )

    def run(self, code: str, timeout: float = RUN_TIMEOUT) -> Any:
        """Execute ``code`` in the worker and return its ``result``; a snippet may run ``timeout`` seconds."""
        if self._process is None or self._process.poll() is not None:
            self.close()
            self._process = self._start()
        assert self._process.stdin is not None and self._process.stdout is not None
        self._process.stdin.write(json.dumps(textwrap.dedent(code)) + "\n")
        self._process.stdin.flush()
        # One answer line per snippet, so nothing waits in the pipe's buffer and select() sees it.
        ready, _, _ = select.select([self._process.stdout], [], [], timeout)
        if not ready:
            self._process.kill()
            raise SnippetError(
                f"the snippet ran longer than {timeout} s; the worker was killed:\n{self._child_stderr()}"
            )
        line = self._process.stdout.readline()
        if not line:
            raise SnippetError(f"the worker died (exit code {self._process.wait()}):\n{self._child_stderr()}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise SnippetError(answer["error"])
        return answer["result"]

    def _child_stderr(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read()[-8000:]

    def close(self) -> None:
        """Stop the child (if running) and drop its captured output."""
        if self._process is not None:
            if self._process.poll() is None:
                assert self._process.stdin is not None
                self._process.stdin.close()
                try:
                    self._process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            for stream in (self._process.stdout,):
                if stream is not None:
                    stream.close()
            self._process = None
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None


# -- pytest fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def testdevice_wheel_path() -> Path:
    """The torchplug-testdevice wheel for this interpreter (built once, then cached across runs)."""
    return build_testdevice().path


@pytest.fixture(scope="session")
def testdevice_site(testdevice_wheel_path: Path, tmp_path_factory: pytest.TempPathFactory) -> DeviceSite:
    """A folder with torchplug-testdevice installed; children with it on ``PYTHONPATH`` have ``tpdev``."""
    target = tmp_path_factory.mktemp("tpdev-site")
    return DeviceSite(install_testdevice(target, testdevice_wheel_path))


@pytest.fixture(scope="session")
def tpdev(testdevice_site: DeviceSite) -> Iterator[DeviceWorker]:
    """A :class:`DeviceWorker` with 2 ``tpdev`` devices, shared by the session."""
    worker = DeviceWorker(testdevice_site, {"TPDEV_DEVICE_COUNT": "2"})
    yield worker
    worker.close()
