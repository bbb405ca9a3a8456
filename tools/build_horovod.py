#!/usr/bin/env python3
"""Build and install Horovod 0.28.1 for the torch of this interpreter: PyTorch ops, the Gloo controller, no MPI.

Horovod's last release (0.28.1, June 2023) does not install from PyPI against torch 2.1 and later:
its CMake files ask for C++14, and torch's headers need C++17 (``#error C++17 or later compatible
compiler is required to use PyTorch``). This script does what a user has to do:

1. download the sdist (``pip download --no-binary :all: horovod==0.28.1``);
2. set ``CMAKE_CXX_STANDARD`` to 17 in ``CMakeLists.txt`` and ``horovod/torch/CMakeLists.txt``;
3. build a wheel with ``--no-build-isolation`` (Horovod's build imports the installed torch) and
   ``HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1
   HOROVOD_WITHOUT_MXNET=1``;
4. install it.

The wheel is kept in ``$TORCHPLUG_WHEEL_CACHE`` (default ``~/.cache/torchplug/wheels``), named by
the torch version, so the build (several minutes on 2 cores: gcc, cmake, and Python.h needed) runs
once per machine. Usage: ``python tools/build_horovod.py`` (with the interpreter of the target
environment; every pip call goes through ``constraints.txt``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "0.28.1"
ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
PATCHED = ("CMakeLists.txt", "horovod/torch/CMakeLists.txt")
BUILD_DEPS = ("setuptools", "wheel", "cffi", "cloudpickle", "psutil", "pyyaml", "packaging")
FLAGS = {
    "HOROVOD_WITH_PYTORCH": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_WITHOUT_TENSORFLOW": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
}


def pip(*args: str, env: dict[str, str] | None = None) -> None:
    command = [sys.executable, "-m", "pip", *args]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True, env=env)


def installed() -> bool:
    probe = "import horovod, horovod.torch; print(horovod.__version__)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    return result.returncode == 0 and result.stdout.strip() == VERSION


def torch_version() -> str:
    result = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True, check=True
    )
    return result.stdout.strip().replace("+", "_")


def patch(source: Path) -> None:
    for name in PATCHED:
        path = source / name
        text = path.read_text()
        if "set(CMAKE_CXX_STANDARD 14)" not in text:
            raise SystemExit(f"build_horovod: {path} no longer sets CMAKE_CXX_STANDARD 14; update this script")
        path.write_text(text.replace("set(CMAKE_CXX_STANDARD 14)", "set(CMAKE_CXX_STANDARD 17)"))


def build(cache: Path) -> Path:
    pip("install", "-q", "-c", str(CONSTRAINTS), *BUILD_DEPS)
    with tempfile.TemporaryDirectory(prefix="horovod-build-") as tmp:
        work = Path(tmp)
        pip("download", "-q", "--no-deps", "--no-binary", ":all:", "-d", str(work), f"horovod=={VERSION}")
        (sdist,) = work.glob(f"horovod-{VERSION}.tar.gz")
        with tarfile.open(sdist) as archive:
            archive.extractall(work, filter="data")
        source = work / f"horovod-{VERSION}"
        patch(source)
        env = {**os.environ, **FLAGS, "MAKEFLAGS": f"-j{os.cpu_count() or 1}"}
        out = work / "wheel"
        pip("wheel", "--no-deps", "--no-build-isolation", "-c", str(CONSTRAINTS), "-w", str(out), str(source), env=env)
        (wheel,) = out.glob("horovod-*.whl")
        cache.mkdir(parents=True, exist_ok=True)
        target = cache / wheel.name
        wheel.replace(target)
        return target


def main() -> int:
    if installed():
        print(f"build_horovod: horovod {VERSION} with PyTorch support is installed already")
        return 0
    root = Path(os.environ.get("TORCHPLUG_WHEEL_CACHE", Path.home() / ".cache" / "torchplug" / "wheels"))
    cache = root / f"horovod-{VERSION}-torch-{torch_version()}"
    wheels = sorted(cache.glob("horovod-*.whl"))
    wheel = wheels[-1] if wheels else build(cache)
    pip("install", "-q", "-c", str(CONSTRAINTS), str(wheel))
    if not installed():
        print("build_horovod: horovod was installed but `import horovod.torch` fails", file=sys.stderr)
        return 1
    print(f"build_horovod: installed {wheel.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
