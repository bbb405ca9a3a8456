"""The ``xla`` checkpoint IO: XLA tensors moved to the CPU, then written atomically by the core's torch IO."""

from __future__ import annotations

from typing import Any

from typing_extensions import override

from torchplug import CheckpointIO
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug.utilities.apply import apply_to_tensors
from torchplug_xla_io import _vendor

__all__ = ["XLACheckpointIO", "to_cpu"]


class XLACheckpointIO(CheckpointIO):
    """Checkpoints of models trained on XLA devices (TPUs), readable anywhere.

    Saving moves every tensor to the CPU first, XLA tensors in one batched transfer through
    torch_xla, so the file loads without torch_xla and with ``weights_only=True``. The file is
    then written by the core's :class:`~torchplug.io.TorchCheckpointIO`: a hidden temporary file
    beside the target, renamed over it once complete, on any fsspec filesystem. A crash or a
    kill in the middle of a save leaves the previous checkpoint intact.

    Every call writes: which process saves is the strategy's decision (torchplug's strategies
    save from global rank 0 only), so this IO does not consult ``xm.is_master_ordinal``.

    Loading with ``map_location=None`` puts the tensors on this process's XLA device when
    torch_xla is installed (this starts the XLA runtime), and on the CPU otherwise. The Trainer
    loads with ``map_location="cpu"`` and lets ``load_state_dict`` copy onto the device.

    Works without torch_xla: then it is the core's torch IO with every tensor moved to the CPU.

    Args:
        fsync: Also flush the file and its directory to the disk before the rename (survives a
            power loss, not only a crash), as for the core's torch IO.
    """

    def __init__(self, fsync: bool = False) -> None:
        self._writer = TorchCheckpointIO(fsync=fsync)

    @property
    def fsync(self) -> bool:
        """Whether saves are flushed to the disk before the rename."""
        return self._writer.fsync

    @override
    def save_checkpoint(self, checkpoint: dict[str, Any], path: str, storage_options: Any | None = None) -> None:
        """Move ``checkpoint``'s tensors to the CPU and write it to ``path`` atomically."""
        if storage_options is not None:
            raise TypeError(
                f"storage_options={storage_options!r} is not supported by XLACheckpointIO. "
                "Hint: pass filesystem options in the URL, or implement a CheckpointIO that takes them."
            )
        self._writer.save_checkpoint(to_cpu(checkpoint), path)

    @override
    def load_checkpoint(self, path: str, map_location: Any | None = None, weights_only: bool = True) -> dict[str, Any]:
        """Read the checkpoint at ``path``: onto ``map_location``, else the XLA device when torch_xla is installed."""
        checkpoint = self._writer.load_checkpoint(
            path, map_location="cpu" if map_location is None else map_location, weights_only=weights_only
        )
        if map_location is None:
            device = _vendor.device()
            if device is not None:
                checkpoint = apply_to_tensors(checkpoint, lambda t: t.to(device))
        return checkpoint

    @override
    def remove_checkpoint(self, path: str) -> None:
        """Delete the checkpoint at ``path``; nothing happens if it is already gone."""
        self._writer.remove_checkpoint(path)

    @override
    def exists(self, path: str) -> bool:
        """Whether a checkpoint exists at ``path``."""
        return self._writer.exists(path)

    @override
    def __repr__(self) -> str:
        return f"XLACheckpointIO(fsync={self.fsync})"


def to_cpu(data: Any) -> Any:
    """``data`` with every tensor on the CPU (containers rebuilt; tensors already there kept as they are).

    XLA tensors go through torch_xla's batched transfer (``xm._maybe_convert_to_cpu``), which
    runs their pending computations once for all of them. It is used only where torch_xla is
    already imported: without it, this process holds no XLA tensor.
    """
    convert = _vendor.batched_to_cpu()
    if convert is not None:
        data = convert(data)
    return apply_to_tensors(data, lambda t: t if t.device.type == "cpu" else t.cpu())
