"""The Trainer and the machinery behind it (resolution, loops, metrics, checkpoints)."""

from torchplug.trainer.trainer import Trainer

__all__ = ["Trainer"]
