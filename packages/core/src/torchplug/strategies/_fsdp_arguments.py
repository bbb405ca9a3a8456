"""``FSDPStrategy``'s arguments, checked when the strategy is made: a value that cannot work is refused there.

Besides its own arguments, the strategy takes Lightning's ``FSDPStrategy`` ones (which were torch's
FSDP1 options): each is either honoured through its FSDP2 equivalent (``sharding_strategy``,
``mixed_precision``, ``cpu_offload=CPUOffload(...)``, ``use_orig_params=True``, FSDP1 auto-wrap
policies) or refused with what to do instead. Nothing is accepted and then ignored.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable
from typing import Any, Final

import torch
from torch.distributed.fsdp import CPUOffload, CPUOffloadPolicy, FSDPModule, OffloadPolicy

from torchplug._errors import MisconfigurationError

__all__ = ["WrapPolicy", "check_bool", "check_dtype", "lightning_options", "offload_policy", "wrap_decider"]

#: What ``auto_wrap_policy`` accepts: module classes to shard on their own, or a ``module -> bool`` function.
WrapPolicy = Iterable[type[torch.nn.Module]] | Callable[..., bool]

#: Lightning's (FSDP1's) ``sharding_strategy`` names, and FSDP2's ``reshard_after_forward`` for each.
_SHARDING: Final = {"FULL_SHARD": True, "SHARD_GRAD_OP": False}

#: Lightning ``FSDPStrategy`` arguments without an FSDP2 counterpart here, and what to do instead.
_REFUSED: Final = {
    "activation_checkpointing": "wrap the layers yourself in configure_model, with "
    "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.checkpoint_wrapper (or torch.utils.checkpoint)",
    "activation_checkpointing_policy": "wrap the layers yourself in configure_model, with "
    "torch.distributed.algorithms._checkpoint.checkpoint_wrapper.checkpoint_wrapper (or torch.utils.checkpoint)",
    "device_mesh": "this strategy shards over one dimension of every process; hybrid sharding is not supported",
    "sync_module_states": "FSDP2 shards each process's own weights: call torchplug.seed_everything(...) before "
    "building the model so that every process starts from the same weights",
    "limit_all_gathers": "FSDP2 always limits its all-gathers in flight; remove it",
    "forward_prefetch": "FSDP2 prefetches by itself; remove it",
    "backward_prefetch": "FSDP2 prefetches by itself; remove it",
}

#: This strategy's own keyword arguments, for "did you mean" (kept in step with ``FSDPStrategy.__init__``).
_OWN: Final = (
    "auto_wrap_policy",
    "cpu_offload",
    "reshard_after_forward",
    "param_dtype",
    "reduce_dtype",
    "state_dict_type",
    "start_method",
    "accelerator",
    "precision",
    "checkpoint_io",
    "cluster_environment",
    "parallel_devices",
    "process_group_backend",
    "timeout",
)


def check_bool(name: str, value: object) -> bool:
    """``value`` when it is a bool; otherwise an error naming ``name`` (a string such as ``"false"`` is truthy)."""
    if not isinstance(value, bool):
        raise MisconfigurationError(
            f"FSDPStrategy({name}={value!r}) is not valid: give True or False (a string such as 'false' would "
            f"count as true). Hint: {name}=False."
        )
    return value


def check_dtype(name: str, value: object) -> torch.dtype | None:
    """``value`` when it is None or a floating-point ``torch.dtype``; otherwise an error naming ``name``."""
    if value is None or (isinstance(value, torch.dtype) and value.is_floating_point):
        return value
    raise MisconfigurationError(
        f"FSDPStrategy({name}={value!r}) is not valid: give a floating-point torch.dtype, or None to keep the "
        f"parameters' dtype. Hint: {name}=torch.bfloat16."
    )


def offload_policy(cpu_offload: object) -> OffloadPolicy | None:
    """FSDP2's offload policy for ``cpu_offload``: a bool, an ``OffloadPolicy``, or FSDP1's ``CPUOffload``."""
    if isinstance(cpu_offload, bool):
        return CPUOffloadPolicy() if cpu_offload else None
    if isinstance(cpu_offload, OffloadPolicy):
        return cpu_offload if isinstance(cpu_offload, CPUOffloadPolicy) else None
    if isinstance(cpu_offload, CPUOffload):  # FSDP1's, as Lightning takes it
        return CPUOffloadPolicy() if cpu_offload.offload_params else None
    raise MisconfigurationError(
        f"FSDPStrategy(cpu_offload={cpu_offload!r}) is not valid: give True or False (or a "
        "torch.distributed.fsdp.CPUOffloadPolicy). Hint: cpu_offload=True, or strategy='fsdp_cpu_offload'."
    )


def lightning_options(options: dict[str, Any], reshard_after_forward: bool | int | None) -> dict[str, Any]:
    """Translate Lightning's ``FSDPStrategy`` keyword arguments; refuse the others, naming each.

    Args:
        options: The keyword arguments ``FSDPStrategy`` did not recognise.
        reshard_after_forward: The value given (None when not given), which ``sharding_strategy`` must not contradict.

    Returns:
        The strategy's own arguments they stand for: ``reshard_after_forward``, ``param_dtype``,
        ``reduce_dtype``, ``precision``.

    Raises:
        MisconfigurationError: An argument without an equivalent, a value that has none, or an unknown name.
    """
    translated: dict[str, Any] = {}
    for name, value in options.items():
        if name == "sharding_strategy":
            translated["reshard_after_forward"] = _reshard_for(value, reshard_after_forward)
        elif name == "mixed_precision":
            translated.update(_dtypes_of(value))
        elif name == "precision_plugin":  # Lightning's name for precision=
            translated["precision"] = value
        elif name == "use_orig_params":
            if value is not True:
                raise MisconfigurationError(
                    f"FSDPStrategy(use_orig_params={value!r}) is not valid: FSDP2 always trains the original "
                    "parameters. Hint: remove use_orig_params=."
                )
        elif name in _REFUSED:
            raise MisconfigurationError(f"FSDPStrategy({name}=...) is not supported. Hint: {_REFUSED[name]}.")
        else:
            choices = [*_OWN, "sharding_strategy", "mixed_precision", *_REFUSED]
            close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
            raise MisconfigurationError(
                f"FSDPStrategy({name}=...) is not valid: FSDPStrategy takes {', '.join(_OWN)} (and Lightning's "
                "sharding_strategy, mixed_precision, use_orig_params). Hint: "
                + (f"did you mean {close[0]}=?" if close else "remove it.")
            )
    return translated


def _reshard_for(sharding_strategy: object, reshard_after_forward: bool | int | None) -> bool:
    name = getattr(sharding_strategy, "name", sharding_strategy)  # FSDP1's ShardingStrategy enum, or its name
    key = name.upper() if isinstance(name, str) else None
    if key not in _SHARDING:
        hint = (
            "strategy='ddp' replicates the model without sharding"
            if key == "NO_SHARD"
            else ("hybrid sharding (over a 2-D mesh) is not supported by this strategy")
        )
        raise MisconfigurationError(
            f"FSDPStrategy(sharding_strategy={sharding_strategy!r}) is not valid here: FSDP2 offers 'FULL_SHARD' "
            f"(reshard_after_forward=True) and 'SHARD_GRAD_OP' (reshard_after_forward=False). Hint: {hint}."
        )
    reshard = _SHARDING[key]
    if reshard_after_forward is not None and reshard_after_forward != reshard:
        raise MisconfigurationError(
            f"FSDPStrategy(sharding_strategy={sharding_strategy!r}) means reshard_after_forward={reshard}, but "
            f"reshard_after_forward={reshard_after_forward!r} was given too. Hint: give only one of them."
        )
    return reshard


def _dtypes_of(mixed_precision: object) -> dict[str, Any]:
    """``param_dtype`` and ``reduce_dtype`` of FSDP1's ``MixedPrecision`` (FSDP2's ``MixedPrecisionPolicy`` too)."""
    if mixed_precision is None:
        return {}
    if not hasattr(mixed_precision, "param_dtype") or not hasattr(mixed_precision, "reduce_dtype"):
        raise MisconfigurationError(
            f"FSDPStrategy(mixed_precision={mixed_precision!r}) is not valid: give FSDP's MixedPrecision. Hint: "
            "FSDPStrategy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) says the same directly."
        )
    buffer_dtype = getattr(mixed_precision, "buffer_dtype", None)
    if buffer_dtype is not None:
        raise MisconfigurationError(
            f"FSDPStrategy(mixed_precision=MixedPrecision(buffer_dtype={buffer_dtype!r})) is not "
            "supported: FSDP2 leaves buffers in their dtype. Hint: drop buffer_dtype, or use precision='bf16-true'."
        )
    return {"param_dtype": mixed_precision.param_dtype, "reduce_dtype": mixed_precision.reduce_dtype}


def wrap_decider(policy: WrapPolicy | None) -> Callable[[torch.nn.Module], bool] | None:
    """A ``module -> bool`` function for ``auto_wrap_policy``, checked now rather than when the model is sharded.

    Module classes (a set, list or tuple) select their instances. A function of one module is used
    as it is. FSDP1's policies, which Lightning takes (``ModuleWrapPolicy``, ``functools.partial``
    of ``transformer_auto_wrap_policy`` or ``size_based_auto_wrap_policy``), take
    ``(module, recurse, nonwrapped_numel)``: they are asked about each module on its own
    (``recurse=False``) with the number of its parameters not already in a shard unit.
    """
    if policy is None:
        return None
    if isinstance(policy, (set, frozenset, list, tuple)):
        classes = tuple(policy)
        if not classes or not all(isinstance(c, type) and issubclass(c, torch.nn.Module) for c in classes):
            raise MisconfigurationError(
                f"FSDPStrategy(auto_wrap_policy={policy!r}) is not valid: a collection must hold torch.nn.Module "
                "classes. Hint: auto_wrap_policy={MyTransformerBlock}."
            )
        return lambda module: isinstance(module, classes)
    if not callable(policy):
        raise MisconfigurationError(
            f"FSDPStrategy(auto_wrap_policy={policy!r}) is not valid: give a set of module classes or a function "
            "module -> bool. Hint: auto_wrap_policy={MyTransformerBlock}."
        )
    try:
        parameters = inspect.signature(policy).parameters
    except (TypeError, ValueError):  # a builtin without a signature: called as module -> bool
        return policy
    if "recurse" not in parameters:
        return policy
    return lambda module: bool(policy(module=module, recurse=False, nonwrapped_numel=_unwrapped_numel(module)))


def _unwrapped_numel(module: torch.nn.Module) -> int:
    """How many parameter elements ``module`` holds outside its submodules that are already shard units."""
    inside = {
        id(p)
        for child in module.modules()
        if child is not module and isinstance(child, FSDPModule)
        for p in child.parameters()
    }
    return sum(p.numel() for p in module.parameters() if id(p) not in inside)
