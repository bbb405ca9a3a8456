"""What the accelerator packages' plugin tests share: ``core plugins list --json`` run in a fresh interpreter.

Used by ``tests/accel_tpu``, ``tests/accel_ipu`` and ``tests/accel_hpu``, each with its own fake
vendor library on the child's path (or not) and its own set of modules that listing must not import.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Collection, Mapping
from typing import Any


def plugins_listing(env: Mapping[str, str], heavy: Collection[str], *args: str) -> dict[str, Any]:
    """``core plugins list --json ARGS`` in a child with ``env``; ``"imported"`` adds which of ``heavy`` it imported.

    ``heavy`` holds top-level module names (``torch``, a vendor library); the result lists them sorted.
    """
    code = (
        "import json, runpy, sys\nsys.argv = ['core', 'plugins', 'list', '--json', *sys.argv[1:]]\n"
        "try:\n    runpy.run_module('torchplug', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        f"heavy = sorted({{m.split('.')[0] for m in sys.modules}} & {set(heavy)!r})\n"
        "print(json.dumps(heavy), file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, env=dict(env), check=False
    )
    assert result.stdout, result.stderr
    data = json.loads(result.stdout)
    data["imported"] = json.loads(result.stderr.strip().splitlines()[-1])
    return data  # type: ignore[no-any-return]


def entries_of(data: dict[str, Any], distribution: str) -> dict[tuple[str, str], dict[str, Any]]:
    """The listing's entries that ``distribution`` provides, by ``(kind, name)``."""
    return {(e["kind"], e["name"]): e for e in data["entries"] if e["provider"]["distribution"] == distribution}
