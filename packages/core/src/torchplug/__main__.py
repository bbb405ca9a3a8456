"""``python -m torchplug``: the same command as ``core``."""

from torchplug.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
