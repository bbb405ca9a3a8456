"""DeepSpeed's configuration: built from the strategy's arguments, or given as a dict or a JSON file.

The strategy owns a few settings because the Trainer owns what they control: gradient
accumulation (``Trainer(accumulate_grad_batches=N)``), gradient clipping
(``gradient_clip_val``) and the numerics (``precision=``). A config that sets one of them
differently from the Trainer is refused, naming both values, instead of one silently winning.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from torchplug import MisconfigurationError

__all__ = ["DEFAULTS", "build_config", "finalize_config", "load_config", "zero_stage"]

#: The strategy's configuration arguments and their defaults (Lightning's ``DeepSpeedStrategy`` names).
DEFAULTS: Final[dict[str, Any]] = {
    "zero_optimization": True,
    "stage": 2,
    "remote_device": None,
    "offload_optimizer": False,
    "offload_parameters": False,
    "offload_params_device": "cpu",
    "nvme_path": "/local_nvme",
    "params_buffer_count": 5,
    "params_buffer_size": 100_000_000,
    "max_in_cpu": 1_000_000_000,
    "offload_optimizer_device": "cpu",
    "optimizer_buffer_count": 4,
    "block_size": 1_048_576,
    "queue_depth": 8,
    "single_submit": False,
    "overlap_events": True,
    "thread_count": 1,
    "pin_memory": False,
    "sub_group_size": 1_000_000_000_000,
    "contiguous_gradients": True,
    "overlap_comm": None,
    "allgather_partitions": True,
    "reduce_scatter": True,
    "allgather_bucket_size": 200_000_000,
    "reduce_bucket_size": 200_000_000,
    "zero_allow_untested_optimizer": True,
    "zero_force_ds_cpu_optimizer": None,
    "logging_batch_size_per_gpu": "auto",
    "loss_scale": 0.0,
    "initial_scale_power": 16,
    "loss_scale_window": 1000,
    "hysteresis": 2,
    "min_loss_scale": 1,
    "partition_activations": False,
    "cpu_checkpointing": False,
    "contiguous_memory_optimization": False,
    "synchronize_checkpoint_boundary": False,
}

#: Arguments that shape the config only when the strategy builds it (not with ``config=``).
_BUILD_ONLY: Final = frozenset(DEFAULTS) - {"logging_batch_size_per_gpu", "zero_force_ds_cpu_optimizer"}

#: Config keys the Trainer's own arguments decide, with the argument to use instead.
_TRAINER_OWNED: Final = {
    "optimizer": "configure_optimizers() (return the optimizer there)",
    "scheduler": "configure_optimizers() (return the scheduler there)",
}


def load_config(config: str | os.PathLike[str] | Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A deep copy of ``config`` (a dict), or the JSON file it names; None stays None.

    Raises:
        MisconfigurationError: The file does not exist or is not a JSON object.
    """
    if config is None:
        return None
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config))
    path = Path(config)
    if not path.is_file():
        raise MisconfigurationError(f"DeepSpeedStrategy(config={os.fspath(config)!r}): no such file.")
    try:
        loaded = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MisconfigurationError(
            f"DeepSpeedStrategy(config={os.fspath(config)!r}) is not readable JSON: {exc}"
        ) from exc
    if not isinstance(loaded, dict):
        raise MisconfigurationError(
            f"DeepSpeedStrategy(config={os.fspath(config)!r}) holds a {type(loaded).__name__}, not a JSON object."
        )
    return loaded


def build_config(given: dict[str, Any] | None, arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The base config: ``given`` as is, or one built from the strategy's ``arguments``.

    Raises:
        MisconfigurationError: Both a config and arguments that would shape it were given, an
            unknown argument, or a value out of range.
    """
    unknown = set(arguments) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"DeepSpeedStrategy got unexpected arguments: {', '.join(sorted(unknown))}")
    options = {**DEFAULTS, **arguments}
    stage = options["stage"]
    if stage not in (0, 1, 2, 3):
        raise MisconfigurationError(f"DeepSpeedStrategy(stage={stage!r}): choose 0, 1, 2 or 3.")
    if given is not None:
        changed = sorted(k for k in _BUILD_ONLY if options[k] != DEFAULTS[k])
        if changed:
            raise MisconfigurationError(
                f"DeepSpeedStrategy got config= and also {', '.join(f'{k}={options[k]!r}' for k in changed)}, "
                "which config= replaces. Hint: put these settings in the config, or drop config=."
            )
        for key, instead in _TRAINER_OWNED.items():
            if key in given:
                raise MisconfigurationError(
                    f"The DeepSpeed config sets {key!r}; with torchplug it comes from {instead}. "
                    "Remove it from the config."
                )
        return given
    return _from_arguments(options)


def _from_arguments(o: dict[str, Any]) -> dict[str, Any]:
    config: dict[str, Any] = {
        "activation_checkpointing": {
            "partition_activations": o["partition_activations"],
            "cpu_checkpointing": o["cpu_checkpointing"],
            "contiguous_memory_optimization": o["contiguous_memory_optimization"],
            "synchronize_checkpoint_boundary": o["synchronize_checkpoint_boundary"],
        },
        "aio": {k: o[k] for k in ("block_size", "queue_depth", "single_submit", "overlap_events", "thread_count")},
        "fp16_options": {
            k: o[k] for k in ("loss_scale", "initial_scale_power", "loss_scale_window", "hysteresis", "min_loss_scale")
        },
    }
    if not o["zero_optimization"] or o["stage"] == 0:
        config["zero_optimization"] = {"stage": 0}
        return config
    zero: dict[str, Any] = {
        "stage": o["stage"],
        "contiguous_gradients": o["contiguous_gradients"],
        "allgather_partitions": o["allgather_partitions"],
        "reduce_scatter": o["reduce_scatter"],
        "allgather_bucket_size": o["allgather_bucket_size"],
        "reduce_bucket_size": o["reduce_bucket_size"],
        "sub_group_size": o["sub_group_size"],
    }
    if o["overlap_comm"] is not None:
        zero["overlap_comm"] = o["overlap_comm"]
    if o["offload_optimizer"]:
        zero["offload_optimizer"] = {
            "device": o["offload_optimizer_device"],
            "nvme_path": o["nvme_path"],
            "buffer_count": o["optimizer_buffer_count"],
            "pin_memory": o["pin_memory"],
        }
    if o["offload_parameters"]:
        if o["stage"] != 3:
            raise MisconfigurationError(
                f"DeepSpeedStrategy(offload_parameters=True, stage={o['stage']}): parameters are offloaded by "
                "ZeRO stage 3 only. Hint: stage=3, or offload_optimizer=True alone."
            )
        zero["offload_param"] = {
            "device": o["offload_params_device"],
            "nvme_path": o["nvme_path"],
            "buffer_count": o["params_buffer_count"],
            "buffer_size": o["params_buffer_size"],
            "max_in_cpu": o["max_in_cpu"],
            "pin_memory": o["pin_memory"],
        }
    config["zero_optimization"] = zero
    config["zero_allow_untested_optimizer"] = o["zero_allow_untested_optimizer"]
    return config


def zero_stage(config: Mapping[str, Any]) -> int:
    """The ZeRO stage a config selects (0 when ZeRO is off)."""
    zero = config.get("zero_optimization") or {}
    return int(zero.get("stage", 0)) if isinstance(zero, Mapping) else 0


def offloads_optimizer(config: Mapping[str, Any]) -> bool:
    """Whether the config moves the optimizer step to the CPU or NVMe."""
    zero = config.get("zero_optimization") or {}
    offload = zero.get("offload_optimizer") if isinstance(zero, Mapping) else None
    return isinstance(offload, Mapping) and offload.get("device", "none") not in (None, "none")


def finalize_config(
    base: Mapping[str, Any],
    *,
    numerics: Mapping[str, Any],
    precision: str,
    clip_val: float | None,
    clip_algorithm: str,
    micro_batch_size: int,
    optimizer_on_cpu: bool,
) -> dict[str, Any]:
    """The config handed to ``deepspeed.initialize``: ``base`` with the Trainer's settings written in.

    Args:
        base: The config from :func:`build_config`.
        numerics: The precision plugin's ``fp16``/``bf16`` entries (see ``DeepSpeedPrecision.ds_config``).
        precision: The precision's name, for messages.
        clip_val: ``Trainer(gradient_clip_val=...)`` (None: no clipping).
        clip_algorithm: ``Trainer(gradient_clip_algorithm=...)``.
        micro_batch_size: Samples per process and step, when the config does not say.
        optimizer_on_cpu: The optimizer already runs on the CPU (the CPU accelerator), so DeepSpeed's
            guard against a slow offloaded torch optimizer does not apply.

    Raises:
        MisconfigurationError: The config disagrees with the Trainer; the message names both.
    """
    config = copy.deepcopy(dict(base))
    fp16_options = config.pop("fp16_options", {})
    steps = config.get("gradient_accumulation_steps", 1)
    if steps != 1:
        raise MisconfigurationError(
            f"The DeepSpeed config sets gradient_accumulation_steps={steps!r}; torchplug accumulates through "
            f"Trainer(accumulate_grad_batches={steps!r}). Remove it from the config."
        )
    if config.get("managed_gradient_accumulation", False) is not False:
        raise MisconfigurationError(
            "The DeepSpeed config sets managed_gradient_accumulation=true; the Trainer's loop decides when to "
            "step (accumulate_grad_batches), so it must be false or absent."
        )
    # The loop scales the loss and calls step() once per optimizer step; DeepSpeed only reduces and steps then.
    config["gradient_accumulation_steps"] = 1
    config["managed_gradient_accumulation"] = False
    _set_clipping(config, clip_val, clip_algorithm)
    if "train_micro_batch_size_per_gpu" not in config and "train_batch_size" not in config:
        config["train_micro_batch_size_per_gpu"] = micro_batch_size
    _set_numerics(config, numerics, precision, fp16_options)
    if optimizer_on_cpu and offloads_optimizer(config):
        config.setdefault("zero_force_ds_cpu_optimizer", False)
    return config


def _set_clipping(config: dict[str, Any], clip_val: float | None, algorithm: str) -> None:
    if clip_val and algorithm != "norm":
        raise MisconfigurationError(
            f"gradient_clip_algorithm={algorithm!r}: DeepSpeed clips gradients by their norm only. "
            "Hint: gradient_clip_algorithm='norm'."
        )
    wanted = float(clip_val or 0.0)
    given = config.get("gradient_clipping")
    if given is not None and clip_val and float(given) != wanted:
        raise MisconfigurationError(
            f"The DeepSpeed config sets gradient_clipping={given!r}, but gradient_clip_val={clip_val!r}. "
            "Give it in one place."
        )
    # DeepSpeed clips to 1.0 unless told otherwise; the Trainer's default is no clipping.
    config.setdefault("gradient_clipping", wanted)


def _set_numerics(
    config: dict[str, Any], numerics: Mapping[str, Any], precision: str, fp16_options: Mapping[str, Any]
) -> None:
    for key in ("fp16", "bf16"):
        ours = bool(numerics.get(key, {}).get("enabled", False))
        section = config.get(key)
        theirs = bool(section.get("enabled", False)) if isinstance(section, Mapping) else False
        if section is not None and theirs != ours:
            raise MisconfigurationError(
                f"The DeepSpeed config {'enables' if theirs else 'disables'} {key}, but precision={precision!r}. "
                f"Hint: choose the precision with Trainer(precision=...) and remove {key!r} from the config."
            )
        if ours:
            merged = {**numerics[key], **(section or {})}
            if key == "fp16" and section is None:
                merged.update(fp16_options)
            config[key] = merged
