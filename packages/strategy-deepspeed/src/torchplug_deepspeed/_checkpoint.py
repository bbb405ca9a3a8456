"""From a DeepSpeed checkpoint directory to one ordinary torchplug checkpoint file (``consolidate``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

import torch

from torchplug import MisconfigurationError
from torchplug.io.torch_io import TorchCheckpointIO
from torchplug_deepspeed import _vendor

__all__ = ["consolidate", "consolidated_checkpoint"]

#: Entries of a torchplug checkpoint that describe training in progress: they cannot outlive the shards.
_TRAINING_STATE: Final = frozenset(
    {
        "loops",
        "optimizer_states",
        "lr_schedulers",
        "precision",
        "rng",
        "callbacks",
        "datamodule",
        "accumulated_gradients",
    }
)

#: What DeepSpeed itself writes into its model-states file beside the client state.
_DEEPSPEED_ENTRIES: Final = frozenset(
    {
        "module",
        "buffer_names",
        "optimizer",
        "param_shapes",
        "frozen_param_shapes",
        "shared_params",
        "frozen_param_fragments",
        "lr_scheduler",
        "data_sampler",
        "random_ltd",
        "sparse_tensor_module_names",
        "skipped_steps",
        "global_steps",
        "global_samples",
        "dp_world_size",
        "mp_world_size",
        "checkpoint_parallel_dimensions",
        "ds_config",
        "ds_version",
    }
)


def consolidated_checkpoint(checkpoint_dir: str | os.PathLike[str], tag: str | None = None) -> dict[str, Any]:
    """The checkpoint a DeepSpeed strategy wrote to ``checkpoint_dir``, with the weights in one float32 state dict.

    The weights are the float32 master weights, merged from every process's shard with
    DeepSpeed's ``zero_to_fp32``. The result holds what a weights-only torchplug checkpoint holds
    (``state_dict``, ``hyper_parameters``, ``epoch``, ``global_step``...), not the optimizer, loop
    or random state, which lived in the shards.

    Args:
        checkpoint_dir: A directory written by ``Trainer.save_checkpoint`` or ``ModelCheckpoint``
            under a DeepSpeed strategy.
        tag: DeepSpeed's tag (sub-directory); None reads the ``latest`` file.

    Raises:
        MisconfigurationError: ``checkpoint_dir`` is not a DeepSpeed checkpoint directory.
    """
    directory = Path(checkpoint_dir)
    tag = tag or _latest_tag(directory)
    model_states = _model_states_file(directory / tag)
    meta = torch.load(model_states, map_location="cpu", weights_only=False)  # DeepSpeed's own file
    zero = (meta.get("ds_config") or {}).get("zero_optimization") or {}
    if int(zero.get("stage", 0)) == 0:
        weights = dict(meta["module"])
    else:
        zero_to_fp32 = _vendor.import_deepspeed("deepspeed.utils.zero_to_fp32")
        weights = zero_to_fp32.get_fp32_state_dict_from_zero_checkpoint(str(directory), tag=tag)
    checkpoint = {k: v for k, v in meta.items() if k not in _DEEPSPEED_ENTRIES and k not in _TRAINING_STATE}
    # Each tensor in its own storage: a view of DeepSpeed's flat buffer would drag the whole buffer along.
    checkpoint["state_dict"] = {k: v.detach().clone() for k, v in weights.items()}
    return checkpoint


def consolidate(
    checkpoint_dir: str | os.PathLike[str], output_file: str | os.PathLike[str], tag: str | None = None
) -> str:
    """Write a DeepSpeed checkpoint directory as one ordinary torchplug checkpoint file.

    The file loads with ``Module.load_from_checkpoint(output_file)``, on any device and without
    DeepSpeed. Also on the command line: ``python -m torchplug_deepspeed consolidate DIR FILE``.

    Args:
        checkpoint_dir: See :func:`consolidated_checkpoint`.
        output_file: Where to write (a local path or an fsspec URL); written atomically.
        tag: See :func:`consolidated_checkpoint`.

    Returns:
        ``output_file``, as a string.
    """
    checkpoint = consolidated_checkpoint(checkpoint_dir, tag)
    target = os.fspath(output_file)
    TorchCheckpointIO().save_checkpoint(checkpoint, target)
    return target


def _latest_tag(directory: Path) -> str:
    latest = directory / "latest"
    if latest.is_file():
        return latest.read_text().strip()
    if (directory / "checkpoint").is_dir():
        return "checkpoint"
    raise MisconfigurationError(
        f"{os.fspath(directory)!r} is not a DeepSpeed checkpoint directory (no 'latest' file and no 'checkpoint' "
        "folder). Hint: give the directory that Trainer.save_checkpoint or ModelCheckpoint wrote."
    )


def _model_states_file(tag_dir: Path) -> Path:
    for name in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt"):
        if (tag_dir / name).is_file():
            return tag_dir / name
    raise MisconfigurationError(f"{os.fspath(tag_dir)!r} holds no DeepSpeed model states (mp_rank_00_*.pt).")
