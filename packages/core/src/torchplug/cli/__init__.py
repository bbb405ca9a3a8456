"""The ``core`` command (also ``torchplug`` and ``python -m torchplug``), and ``TrainerCLI`` for your own scripts."""

from torchplug.cli._main import main

__all__ = ["main"]
