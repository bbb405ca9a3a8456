"""The ``core`` command (also ``torchplug`` and ``python -m torchplug``), and ``TrainerCLI`` for your own scripts.

``import torchplug.cli`` stays light (no torch, no jsonargparse): ``TrainerCLI`` loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from torchplug.cli._main import main
from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug.cli.trainer_cli import TrainerCLI

__all__ = ["TrainerCLI", "main"]

__getattr__, __dir__ = lazy_attributes(__name__, {"TrainerCLI": "torchplug.cli.trainer_cli"}, globals())
