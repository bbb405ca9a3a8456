"""``python -m torchplug``: the same command as ``core``.

``python -m`` puts the current directory first on ``sys.path``. It is taken off again here,
before anything else is imported and before any plugin is discovered, so that ``python -m
torchplug`` never imports plugin or library code from the current directory, like ``core``. The
training commands add the directory back, last and after discovery, for the user's own class paths.

The modules that ``import torchplug`` itself needs are imported by Python before this module runs,
as for any ``python -m``; ``python -P -m torchplug`` (Python 3.11+) or the ``core`` command keep
the current directory out from the start.
"""

import os
import sys


def _drop_current_directory() -> None:
    """Remove the entry ``python -m`` put first on ``sys.path`` for the current directory."""
    if not sys.path:
        return
    first = sys.path[0]
    if first == "" or os.path.realpath(first) == os.path.realpath(os.getcwd()):
        del sys.path[0]


if __name__ == "__main__":
    _drop_current_directory()
    from torchplug.cli import main

    raise SystemExit(main())
