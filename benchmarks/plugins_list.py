"""Start-up cost of ``core plugins list``, against ``python -c pass``, in fresh throwaway environments.

What is measured:
    The wall time, from spawn to exit, of the ``core`` console script running ``plugins list``
    (table output, sent to /dev/null), and of ``python -c pass`` with the same interpreter, in two
    setups measured in the same run:

    (a) "our packages": every distribution under ``packages/*/`` (today only ``core``; the
        accelerator, environment and IO packages are picked up as they are added);
    (b) the same plus ``--plugins`` (default 200) synthetic plugin distributions, each one a real
        installed distribution (``.dist-info`` with METADATA declaring ``Requires-Dist: core>=0.1,<0.2``,
        ``entry_points.txt`` with one ``torchplug.plugins`` entry point, WHEEL, INSTALLER and a
        RECORD with hashes) and a three-module package whose plugin module registers one accelerator
        by dotted path, exactly as pip would lay out their wheels (pre-compiled ``.pyc`` included).

    Every command runs ``--repeats`` times in fresh processes, interleaved (each round runs all four
    commands, in a rotating order) after two untimed warm-up rounds; the report gives the median and
    the minimum, and the overhead over ``python -c pass`` as the median of the per-round differences.
    The targets (at most 150 ms with our packages, at most 400 ms with 200 plugins, on a 2-core
    machine) are judged on the median wall time.

    The same run also checks, in both setups, that listing imports no torch: ``python -X importtime
    -m torchplug plugins list`` must show no ``torch`` module, and a ``sys.meta_path`` watcher must
    see no *attempt* to import torch, a vendor library or numpy (which catches a guarded ``try:
    import torch`` that the absence of torch would otherwise hide). The ``-X importtime`` output of
    setup (b) is summarised (median run of three) to show where the time goes.

How the environments are made, and why:
    Each setup is a virtual environment created by this script in a temporary directory with the
    running interpreter's base Python (no pip, no system site-packages). Our packages are built into
    wheels (``pip wheel --no-deps``) and installed from them, non-editable, as users get them. They
    are installed with ``--no-deps``, and then their non-optional runtime requirements (read from the
    wheels' METADATA: today pluggy, packaging, fsspec, tqdm, pyyaml) are installed with pip,
    constrained by ``constraints.txt``. torch is left out by default: ``core`` declares it, but
    listing must never import it, and leaving it out keeps the set-up to seconds. ``--with-torch``
    installs it too (pinned by ``constraints.txt``), for figures with torch's own dependencies in the
    environment's distribution count. The synthetic plugins are written straight into the second
    environment's site-packages.

    PyTorch Lightning is not installed. If ``lightning`` is importable by the interpreter running this
    script, ``AcceleratorRegistry.available_accelerators()`` is measured live (at most five repeats,
    it takes seconds); otherwise the figure measured on a machine of this kind (reference-figures.md
    section 1: 4.64 s median, 3.38 s min) is printed as the reference.

How to run it (needs pip >= 22.3 in the running interpreter, for ``pip --python``)::

    python benchmarks/plugins_list.py                  # from the repository root, with the dev venv
    python benchmarks/plugins_list.py --repeats 30 --plugins 500 --json
    python benchmarks/plugins_list.py --keep           # keep the temporary environments to poke at

Exit status: 0 when every target passes and torch is never imported, 1 otherwise, 2 on a set-up
error.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import importlib.util
import json
import os
import platform
import py_compile
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import venv
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from _timing import BenchmarkError, Samples, add_json_option, interleaved, paired_overhead, write_json

ROOT: Final = Path(__file__).resolve().parents[1]
CONSTRAINTS: Final = ROOT / "constraints.txt"

TARGET_OUR_PACKAGES_S: Final = 0.150
TARGET_WITH_PLUGINS_S: Final = 0.400
WARMUP_ROUNDS: Final = 2
LIGHTNING_MAX_REPEATS: Final = 5

#: Modules whose import (or attempted import) by ``core plugins list`` is a failure.
HEAVY_MODULES: Final = ("torch", "torch_xla", "poptorch", "habana_frameworks", "numpy")

#: PyTorch Lightning 2.6.6 on a 2-core machine of this kind (shared/notes/reference-figures.md, section 1).
LIGHTNING_REFERENCE: Final[dict[str, Any]] = {
    "command": "AcceleratorRegistry.available_accelerators()",
    "median_s": 4.64,
    "min_s": 3.38,
    "python_pass_median_s": 0.017,
    "source": "reference-figures.md section 1: Lightning 2.6.6, torch 2.13.0+cpu, Python 3.11.7, 2 cores",
}
LIGHTNING_CODE: Final = (
    "from lightning.pytorch.accelerators import AcceleratorRegistry; AcceleratorRegistry.available_accelerators()"
)

#: Runs ``core plugins list`` while recording every attempt to import a heavy module, found or not.
#: Only lookups made by an ``import`` statement (or ``importlib.import_module``) count: a plugin's
#: availability probe asks ``importlib.util.find_spec("torch_xla")``, which imports nothing, and
#: is how a listing can say "torch_xla is not installed" without importing it.
WATCH_CODE: Final = textwrap.dedent(
    """
    import json, sys
    heavy = {heavy!r}
    seen = []
    class Watch:
        @staticmethod
        def find_spec(name, path=None, target=None):
            if name.partition(".")[0] in heavy:
                frame = sys._getframe(1)
                while frame is not None and frame.f_code.co_name != "_find_and_load_unlocked":
                    frame = frame.f_back
                if frame is not None:  # reached through the import machinery: an import attempt
                    seen.append(name)
            return None
    sys.meta_path.insert(0, Watch)
    from torchplug.cli import main
    code = main(sys.argv[1:])
    sys.stderr.write("HEAVY-IMPORT-ATTEMPTS " + json.dumps(sorted(set(seen))) + "\\n")
    raise SystemExit(code)
    """
).format(heavy=HEAVY_MODULES)


# -- statistics: Samples, paired_overhead and BenchmarkError live in _timing.py ----------------


# -- subprocesses -----------------------------------------------------------------------------


def clean_env() -> dict[str, str]:
    """The environment for measured commands: no Python or torchplug variables from the caller."""
    drop = ("PYTHON", "TORCHPLUG_", "VIRTUAL_ENV", "CONDA_PREFIX")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def run(argv: Sequence[str], *, cwd: Path | None = None, env: dict[str, str] | None = None) -> str:
    """Run a set-up step and return its stdout; raise :class:`BenchmarkError` with its output on failure."""
    proc = subprocess.run(list(argv), cwd=cwd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise BenchmarkError(f"{' '.join(argv)} exited with {proc.returncode}:\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def time_once(argv: Sequence[str], cwd: Path, env: dict[str, str]) -> float:
    """Wall time of one fresh process, spawn to exit, with stdout discarded."""
    start = time.perf_counter()
    proc = subprocess.run(list(argv), cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise BenchmarkError(f"{' '.join(argv)} exited with {proc.returncode}:\n{proc.stderr.decode()}")
    return elapsed


def measure(commands: dict[str, list[str]], repeats: int, cwd: Path) -> dict[str, Samples]:
    """Time every command ``repeats`` times, interleaved, in a rotating order, after warm-up rounds."""
    env = clean_env()
    return interleaved(commands, repeats, WARMUP_ROUNDS, lambda argv: time_once(argv, cwd, env))


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- our packages -----------------------------------------------------------------------------


def our_packages() -> list[Path]:
    """Every package folder of the monorepo (``packages/*/`` with a ``pyproject.toml``), sorted."""
    return sorted(p.parent for p in ROOT.glob("packages/*/pyproject.toml"))


def build_wheels(packages: list[Path], dest: Path) -> list[Path]:
    """Build one wheel per package into ``dest`` (``pip wheel --no-deps``) and return their paths."""
    run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(dest), *map(str, packages)])
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != len(packages):
        raise BenchmarkError(f"built {len(wheels)} wheels for {len(packages)} packages: {wheels}")
    return wheels


def canonical(name: str) -> str:
    """A distribution name in PEP 503 normal form."""
    return re.sub(r"[-_.]+", "-", name).lower()


def wheel_metadata(wheel: Path) -> tuple[str, str, list[str]]:
    """Name, version and ``Requires-Dist`` lines of a built wheel, read from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        path = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(path).decode()
    fields: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, sep, value = line.partition(": ")
        if sep:
            fields.setdefault(key, []).append(value.strip())
    return fields["Name"][0], fields["Version"][0], fields.get("Requires-Dist", [])


def runtime_requirements(wheels: list[Path], with_torch: bool) -> list[str]:
    """The wheels' non-optional requirements on other distributions (not ours; torch only if asked)."""
    metas = [wheel_metadata(w) for w in wheels]
    ours = {canonical(name) for name, _, _ in metas}
    if not with_torch:
        ours.add("torch")
    requirements: list[str] = []
    for _, _, requires in metas:
        for requirement in requires:
            match = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
            optional = re.search(r"\bextra\s*==", requirement)
            if match and not optional and canonical(match[1]) not in ours and requirement not in requirements:
                requirements.append(requirement)
    return requirements


# -- environments -----------------------------------------------------------------------------


@dataclass(slots=True)
class Environment:
    """A throwaway virtual environment with our packages installed from wheels."""

    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"

    @property
    def core(self) -> Path:
        return self.path / "bin" / "core"

    def site_packages(self) -> Path:
        return Path(run([str(self.python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]).strip())

    def distribution_count(self) -> int:
        return len(list(self.site_packages().glob("*.dist-info")))


def create_environment(path: Path, wheels: list[Path], requirements: list[str]) -> Environment:
    """Create a venv at ``path`` and install ``requirements`` (constrained) and ``wheels`` (--no-deps)."""
    venv.EnvBuilder(with_pip=False, symlinks=True, clear=True).create(path)
    env = Environment(path)
    pip = [sys.executable, "-m", "pip", "--python", str(env.python), "install", "--quiet", "--no-input"]
    if requirements:
        run([*pip, "--constraint", str(CONSTRAINTS), *requirements])
    run([*pip, "--no-deps", *map(str, wheels)])
    if not env.core.exists():
        raise BenchmarkError(f"installing {[w.name for w in wheels]} created no {env.core}")
    return env


# -- synthetic plugins ------------------------------------------------------------------------

_PLUGIN_MODULE: Final = '''\
"""Synthetic torchplug plugin {index}: registers one accelerator by dotted path (benchmark fixture)."""

from torchplug import hookimpl


@hookimpl
def torchplug_register_accelerators(registry):
    registry.register("synth{index}", "{module}.accelerator:Synth{index}Accelerator",
                      description="Synthetic accelerator {index} (benchmark fixture, never imported)")
'''

_ACCELERATOR_MODULE: Final = '''\
"""The synthetic accelerator class; ``core plugins list`` must never import this module."""

from torchplug.accelerators.cpu import CPUAccelerator


class Synth{index}Accelerator(CPUAccelerator):
    """A CPU accelerator under another name."""
'''


_WHEEL: Final = "Wheel-Version: 1.0\nGenerator: torchplug-benchmarks\nRoot-Is-Purelib: true\nTag: py3-none-any\n"


def _record_line(site: Path, path: Path) -> str:
    data = path.read_bytes()
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{path.relative_to(site).as_posix()},sha256={digest},{len(data)}"


def write_synthetic_plugin(site: Path, index: int, width: int) -> None:
    """Install one synthetic plugin distribution into ``site`` the way pip installs a pure wheel."""
    number = f"{index:0{width}d}"
    dist, module = f"tp-synth-plugin-{number}", f"tp_synth_plugin_{number}"
    package = site / module
    info = site / f"{module}-0.1.0.dist-info"
    package.mkdir()
    info.mkdir()
    sources = {
        package / "__init__.py": f'"""Synthetic torchplug plugin distribution {dist} (benchmark fixture)."""\n',
        package / "_plugin.py": _PLUGIN_MODULE.format(index=number, module=module),
        package / "accelerator.py": _ACCELERATOR_MODULE.format(index=number),
    }
    files = {
        **sources,
        info / "METADATA": (
            f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n"
            f"Summary: Synthetic torchplug plugin {number}\nRequires-Python: >=3.10\n"
            "Requires-Dist: core>=0.1,<0.2\n"
        ),
        info / "WHEEL": _WHEEL,
        info / "entry_points.txt": f"[torchplug.plugins]\nsynth{number} = {module}._plugin\n",
        info / "INSTALLER": "torchplug-benchmarks\n",
    }
    for path, text in files.items():
        path.write_text(text)
    lines = [_record_line(site, path) for path in files]
    for source in sources:  # pip compiles at install time; it records .pyc files without a hash
        compiled = Path(importlib.util.cache_from_source(str(source)))
        py_compile.compile(str(source), cfile=str(compiled), doraise=True)
        lines.append(f"{compiled.relative_to(site).as_posix()},,")
    lines.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(lines) + "\n")


def write_synthetic_plugins(site: Path, count: int) -> None:
    """Install ``count`` synthetic plugin distributions into ``site``."""
    width = max(3, len(str(count - 1)))
    for index in range(count):
        write_synthetic_plugin(site, index, width)


# -- checks: what the listing finds and imports -----------------------------------------------


@dataclass(slots=True)
class Check:
    """What one setup's listing found and imported."""

    plugins: int
    plugins_ok: int
    accelerators: int
    discovery_ms: float
    plugin_loads_ms: float
    torch_modules: list[str]
    heavy_attempts: list[str]

    @property
    def torch_free(self) -> bool:
        return not self.torch_modules and not self.heavy_attempts


def parse_importtime(stderr: str) -> list[tuple[str, int, int, int]]:
    """``(module, depth, self_us, cumulative_us)`` for each line of ``-X importtime`` output."""
    rows = []
    for line in stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|( *)(\S+)", line)
        if match:
            rows.append((match[4], (len(match[3]) - 1) // 2, int(match[1]), int(match[2])))
    return rows


def check_listing(env: Environment, cwd: Path) -> Check:
    """Run the listing as JSON, under ``-X importtime`` and under the import watcher."""
    clean = clean_env()
    listing = json.loads(run([str(env.core), "plugins", "list", "--json"], cwd=cwd, env=clean))
    accelerators = [e for e in listing["entries"] if e["kind"] == "accelerator"]
    traced = subprocess.run(
        [str(env.python), "-X", "importtime", "-m", "torchplug", "plugins", "list"],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        check=True,
    )
    modules = [name for name, *_ in parse_importtime(traced.stderr)]
    watched = subprocess.run(
        [str(env.python), "-c", WATCH_CODE, "plugins", "list"],
        cwd=cwd,
        env=clean,
        capture_output=True,
        text=True,
        check=True,
    )
    marker = re.search(r"^HEAVY-IMPORT-ATTEMPTS (.*)$", watched.stderr, re.MULTILINE)
    if marker is None:
        raise BenchmarkError(f"the import watcher reported nothing:\n{watched.stderr}")
    return Check(
        plugins=len(listing["plugins"]),
        plugins_ok=sum(p["state"] == "ok" for p in listing["plugins"]),
        accelerators=len(accelerators),
        discovery_ms=listing["discovery_ms"],
        plugin_loads_ms=sum(p["load_ms"] for p in listing["plugins"] if not p["builtin"]),
        torch_modules=[m for m in modules if m.partition(".")[0] == "torch"],
        heavy_attempts=json.loads(marker[1]),
    )


def importtime_breakdown(env: Environment, cwd: Path, runs: int = 3, top: int = 10) -> dict[str, Any]:
    """Where the import time of ``python -m torchplug plugins list`` goes (the median run of ``runs``)."""
    outputs = []
    for _ in range(runs):
        proc = subprocess.run(
            [str(env.python), "-X", "importtime", "-m", "torchplug", "plugins", "list"],
            cwd=cwd,
            env=clean_env(),
            capture_output=True,
            text=True,
            check=True,
        )
        rows = parse_importtime(proc.stderr)
        outputs.append((sum(r[2] for r in rows), rows))
    total, rows = sorted(outputs, key=lambda o: o[0])[len(outputs) // 2]
    by_package: dict[str, int] = {}
    for name, _, self_us, _ in rows:
        top_level = name.partition(".")[0]
        by_package[top_level] = by_package.get(top_level, 0) + self_us
    synthetic = sum(us for pkg, us in by_package.items() if pkg.startswith("tp_synth_plugin_"))
    grouped = {pkg: us for pkg, us in by_package.items() if not pkg.startswith("tp_synth_plugin_")}
    if synthetic:
        grouped["tp_synth_plugin_* (all)"] = synthetic
    return {
        "total_ms": total / 1000,
        "modules": len(rows),
        "top_cumulative_ms": [(n, c / 1000) for n, _, _, c in sorted(rows, key=lambda r: -r[3])[:top]],
        "top_self_ms": [(n, s / 1000) for n, _, s, _ in sorted(rows, key=lambda r: -r[2])[:top]],
        "self_by_package_ms": sorted(((p, us / 1000) for p, us in grouped.items()), key=lambda i: -i[1])[:top],
    }


# -- the reference ----------------------------------------------------------------------------


def lightning_reference(repeats: int, cwd: Path) -> dict[str, Any]:
    """Lightning's accelerator listing: measured live if importable here, else the reference figure."""
    if importlib.util.find_spec("lightning") is None:
        return {**LIGHTNING_REFERENCE, "live": False}
    progress(f"measuring PyTorch Lightning live ({sys.executable}), {min(repeats, LIGHTNING_MAX_REPEATS)} repeats")
    samples = measure(
        {"pass": [sys.executable, "-c", "pass"], "lightning": [sys.executable, "-c", LIGHTNING_CODE]},
        min(repeats, LIGHTNING_MAX_REPEATS),
        cwd,
    )
    return {
        "command": LIGHTNING_REFERENCE["command"],
        "median_s": samples["lightning"].median,
        "min_s": samples["lightning"].min,
        "python_pass_median_s": samples["pass"].median,
        "source": f"with {sys.executable}",
        "live": True,
    }


# -- the run ----------------------------------------------------------------------------------


@dataclass(slots=True)
class Setup:
    """One measured environment and its figures."""

    key: str
    title: str
    env: Environment
    target_s: float
    distributions: int = 0
    python: Samples | None = None
    listing: Samples | None = None
    check: Check | None = None

    @property
    def passed(self) -> bool:
        return self.listing is not None and self.listing.median <= self.target_s

    def as_dict(self) -> dict[str, Any]:
        assert self.python is not None and self.listing is not None and self.check is not None
        return {
            "title": self.title,
            "distributions": self.distributions,
            "target_s": self.target_s,
            "python_c_pass": self.python.as_dict(),
            "core_plugins_list": self.listing.as_dict(),
            "overhead_median_s": paired_overhead(self.listing, self.python),
            "pass": self.passed,
            "plugins": self.check.plugins,
            "plugins_ok": self.check.plugins_ok,
            "accelerators": self.check.accelerators,
            "discovery_ms": self.check.discovery_ms,
            "plugin_loads_ms": self.check.plugin_loads_ms,
            "torch_modules_imported": self.check.torch_modules,
            "heavy_import_attempts": self.check.heavy_attempts,
        }


def prepare(workdir: Path, plugins: int, with_torch: bool) -> tuple[list[Setup], list[str], list[str]]:
    """Build the wheels and the two environments; return the setups, the wheels' names and the requirements."""
    packages = our_packages()
    started = time.perf_counter()
    wheels = build_wheels(packages, workdir / "wheels")
    progress(
        f"built {len(wheels)} wheel(s) from packages/*/ in {time.perf_counter() - started:.1f} s: "
        + ", ".join(w.name for w in wheels)
    )
    requirements = runtime_requirements(wheels, with_torch)
    setups = [
        Setup("a", "(a) our packages", Environment(workdir / "env-ours"), TARGET_OUR_PACKAGES_S),
        Setup("b", f"(b) + {plugins} synthetic plugins", Environment(workdir / "env-plugins"), TARGET_WITH_PLUGINS_S),
    ]
    for setup in setups:
        started = time.perf_counter()
        create_environment(setup.env.path, wheels, requirements)
        progress(f"created {setup.env.path} in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    write_synthetic_plugins(setups[1].env.site_packages(), plugins)
    progress(f"wrote {plugins} synthetic plugin distributions in {time.perf_counter() - started:.2f} s")
    for setup in setups:
        setup.distributions = setup.env.distribution_count()
    return setups, [w.name for w in wheels], requirements


def benchmark(setups: list[Setup], repeats: int, cwd: Path) -> None:
    """Check each setup's listing, then time all four commands interleaved."""
    for setup in setups:
        setup.check = check_listing(setup.env, cwd)
    commands: dict[str, list[str]] = {}
    for setup in setups:
        commands[f"{setup.key}:pass"] = [str(setup.env.python), "-c", "pass"]
        commands[f"{setup.key}:list"] = [str(setup.env.core), "plugins", "list"]
    progress(f"timing {len(commands)} commands x {repeats} interleaved rounds (+{WARMUP_ROUNDS} warm-up)")
    samples = measure(commands, repeats, cwd)
    for setup in setups:
        setup.python, setup.listing = samples[f"{setup.key}:pass"], samples[f"{setup.key}:list"]


# -- the report -------------------------------------------------------------------------------


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:7.1f} ms"


def report_text(doc: dict[str, Any], setups: list[Setup], breakdown: dict[str, Any]) -> str:
    """The human-readable report."""
    lines = [
        f"core plugins list vs python -c pass: {doc['repeats']} interleaved rounds of fresh processes "
        f"(+{WARMUP_ROUNDS} warm-up), spawn to exit",
        f"machine: {doc['machine']['cpus']} CPUs, Python {doc['machine']['python']}, {doc['machine']['platform']}",
        f"installed from wheels: {', '.join(doc['wheels'])}; requirements: {', '.join(doc['requirements']) or '-'}"
        + ("" if doc["with_torch"] else " (torch left out: listing must not need it)"),
        "",
        f"{'setup':<32} {'dists':>5}  {'python -c pass':>21}  {'core plugins list':>21}  {'overhead':>10}",
        f"{'':<32} {'':>5}  {'median':>10} {'min':>10}  {'median':>10} {'min':>10}  {'median':>10}",
    ]
    for s in setups:
        assert s.python is not None and s.listing is not None
        lines.append(
            f"{s.title:<32} {s.distributions:>5}  {_ms(s.python.median):>10} {_ms(s.python.min):>10}  "
            f"{_ms(s.listing.median):>10} {_ms(s.listing.min):>10}  "
            f"{_ms(paired_overhead(s.listing, s.python)):>10}"
        )
    lines.append("")
    for s in setups:
        assert s.check is not None
        c = s.check
        lines.append(
            f"{s.title}: {c.plugins} plugin(s) found ({c.plugins_ok} ok, the core's built-ins included), "
            f"{c.accelerators} accelerator(s) listed"
        )
        lines.append(
            f"  discovery, timed in-process by the core: {c.discovery_ms:.1f} ms, of which loading the "
            f"third-party plugins (import + registration hooks) {c.plugin_loads_ms:.1f} ms"
        )
        verdict = "no" if c.torch_free else "YES"
        lines.append(
            f"  imports torch: {verdict} (-X importtime torch modules: {len(c.torch_modules)}; "
            f"attempted imports of {'/'.join(HEAVY_MODULES)}: {', '.join(c.heavy_attempts) or 'none'})"
        )
    lines += ["", "targets (median wall time, this machine):"]
    for s in setups:
        assert s.listing is not None
        lines.append(
            f"  {s.title:<32} median {_ms(s.listing.median)} <= {_ms(s.target_s)}   {'PASS' if s.passed else 'FAIL'}"
        )
    torch_free = all(s.check is not None and s.check.torch_free for s in setups)
    lines.append(f"  {'no torch imported by the listing':<32} {'':>31}   {'PASS' if torch_free else 'FAIL'}")
    lines += ["", *_reference_lines(doc["lightning"], setups[-1]), "", *_breakdown_lines(breakdown, setups[-1].title)]
    return "\n".join(lines)


def _reference_lines(ref: dict[str, Any], setup: Setup) -> list[str]:
    assert setup.listing is not None and setup.python is not None
    how = "measured live" if ref["live"] else "not measured here, from"
    ours = paired_overhead(setup.listing, setup.python)
    theirs = ref["median_s"] - ref["python_pass_median_s"]
    return [
        f"reference: PyTorch Lightning {ref['command']} (imports torch): median {ref['median_s']:.2f} s, "
        f"min {ref['min_s']:.2f} s ({how} {ref['source']})",
        f"  {setup.title}: {ref['median_s'] / setup.listing.median:.0f}x faster in wall time, "
        f"overhead over python -c pass {theirs / ours:.0f}x smaller ({ours * 1000:.0f} ms vs {theirs * 1000:.0f} ms)",
    ]


def _breakdown_lines(breakdown: dict[str, Any], title: str) -> list[str]:
    lines = [
        f"where the import time goes, {title} (python -X importtime -m torchplug plugins list, median of 3):",
        f"  import statements total {breakdown['total_ms']:.1f} ms over {breakdown['modules']} modules "
        "(not counting the plugin modules: importlib.import_module bypasses -X importtime; "
        "see the in-process plugin load time above)",
        "  self time by top-level package:",
    ]
    lines += [f"    {name:<40} {ms:7.1f} ms" for name, ms in breakdown["self_by_package_ms"]]
    lines.append("  top modules by cumulative time:")
    lines += [f"    {name:<40} {ms:7.1f} ms" for name, ms in breakdown["top_cumulative_ms"]]
    lines.append("  top modules by self time:")
    lines += [f"    {name:<40} {ms:7.1f} ms" for name, ms in breakdown["top_self_ms"]]
    return lines


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog="See the module docstring for what is measured and how."
    )
    parser.add_argument("--repeats", type=int, default=15, help="timed rounds per command (default: 15)")
    parser.add_argument("--plugins", type=int, default=200, help="synthetic plugins in setup (b) (default: 200)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary environments and print where")
    add_json_option(parser)
    parser.add_argument(
        "--with-torch",
        action="store_true",
        help="also install torch (pinned by constraints.txt) into both environments",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1 or args.plugins < 1:
        parser.error("--repeats and --plugins must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="torchplug-bench-"))
    try:
        setups, wheels, requirements = prepare(workdir, args.plugins, args.with_torch)
        benchmark(setups, args.repeats, workdir)
        breakdown = importtime_breakdown(setups[-1].env, workdir)
        doc = {
            "benchmark": "core plugins list",
            "repeats": args.repeats,
            "warmup_rounds": WARMUP_ROUNDS,
            "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
            "wheels": wheels,
            "requirements": requirements,
            "with_torch": args.with_torch,
            "setups": {s.key: s.as_dict() for s in setups},
            "lightning": lightning_reference(args.repeats, workdir),
            "importtime": breakdown,
        }
    except (BenchmarkError, subprocess.CalledProcessError) as exc:
        detail = f"\n{exc.stderr}" if isinstance(exc, subprocess.CalledProcessError) else ""
        print(f"plugins_list.py: error: {exc}{detail}\nTemporary files kept in {workdir}", file=sys.stderr)
        return 2
    finally:
        if args.keep:
            progress(f"kept {workdir}")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    ok = all(s.passed and s.check is not None and s.check.torch_free for s in setups)
    if args.json != "-":
        print(report_text(doc, setups, breakdown))
    if args.json:
        write_json({**doc, "ok": ok}, args.json)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
