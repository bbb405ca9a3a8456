"""Test plugin modules of this repository installed as distributions, as pip would lay them out.

``TORCHPLUG_PLUGINS`` selects installed plugins only (a module is never imported by name alone),
so a test that needs one of the repository's plugin modules gets a directory holding one
``.dist-info`` whose entry point names that module; the module itself stays in the repository.
Each module gets a directory of its own, so that putting one on ``sys.path`` (or ``PYTHONPATH``)
never autoloads the others.
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

__all__ = ["plugin_site"]


@functools.cache
def plugin_site(distribution: str, module: str) -> Path:
    """A directory in which ``distribution`` 1.0 is installed, its one entry point naming ``module``.

    Args:
        distribution: The distribution's name (``torchplug-test-broken``).
        module: The dotted plugin module, importable from the repository root.
    """
    site = Path(tempfile.mkdtemp(prefix=f"{distribution}-"))
    info = site / f"{distribution.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 1.0\nRequires-Dist: core\n")
    (info / "entry_points.txt").write_text(f"[torchplug.plugins]\n{module} = {module}\n")
    return site
