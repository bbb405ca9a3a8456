"""Model and optimizer states in the form sharded checkpoints use: ``torch.distributed.checkpoint.state_dict``'s.

That form keys optimizer state by parameter name (not by position), and under FSDP holds each
process's shards as ``DTensor``s, so one checkpoint loads into any layout: FSDP on another number of
processes, DDP, or one process. Used by the strategies when their checkpoint IO is collective
(``dcp``), and by FSDP's full state dicts.

One difference from calling DCP's functions directly: DCP creates missing optimizer state by
taking an optimizer step with zero gradients and learning rate 0. Adam's step counter then reads
1, which changes every later update. Here an optimizer that has not stepped yet is described as
it is (no state), and a checkpoint written before the first step restores an optimizer with no
state, as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.tensor import DTensor

__all__ = [
    "holds_dtensors",
    "is_named_optimizer_state",
    "load_model_state",
    "load_optimizer_state",
    "model_state",
    "optimizer_state",
]


def model_state(model: torch.nn.Module, full: bool = False) -> dict[str, Any]:
    """The model's state dict: its own tensors (``DTensor`` shards under FSDP), or with ``full``, whole on the CPU."""
    options = StateDictOptions(full_state_dict=True, cpu_offload=True) if full else None
    return get_model_state_dict(model, options=options)


def optimizer_state(
    model: torch.nn.Module, module: torch.nn.Module, optimizer: torch.optim.Optimizer, full: bool = False
) -> dict[str, Any]:
    """The optimizer's state keyed by parameter name (``model`` may be a DDP wrapper of ``module``)."""
    if not optimizer.state:  # not stepped yet: describe it as it is, with no zero step (see the module doc)
        return _named(optimizer.state_dict(), module, optimizer)
    options = StateDictOptions(full_state_dict=True, cpu_offload=True) if full else None
    return get_optimizer_state_dict(model, optimizer, options=options)


def load_model_state(model: torch.nn.Module, state: Mapping[str, Any], strict: bool = True) -> None:
    """Load a model state dict: sharded (``DTensor`` values) or whole tensors, into any layout."""
    options = StateDictOptions(full_state_dict=not holds_dtensors(state), strict=strict)
    set_model_state_dict(model, dict(state), options=options)


def load_optimizer_state(
    model: torch.nn.Module, module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: Mapping[str, Any]
) -> None:
    """Load an optimizer state keyed by parameter name (sharded or whole) or numbered (``optimizer.state_dict()``)."""
    if not is_named_optimizer_state(state):
        if not holds_dtensors(list(module.parameters())):
            optimizer.load_state_dict(dict(state))
            return
        state = _named_from_positional(dict(state), module, optimizer)  # whole tensors into a sharded model
    if not state.get("state"):  # written before the first step: no state, as it was (see the module doc)
        optimizer.state.clear()
        optimizer.load_state_dict(_positional(dict(state), module, optimizer))
        return
    options = StateDictOptions(full_state_dict=not holds_dtensors(state.get("state", {})))
    set_optimizer_state_dict(model, optimizer, dict(state), options=options)


def is_named_optimizer_state(state: Mapping[str, Any]) -> bool:
    """Whether an optimizer state dict names its parameters (DCP's form) rather than numbering them."""
    groups = state.get("param_groups") or []
    return any(isinstance(p, str) for group in groups for p in group.get("params", ()))


def holds_dtensors(tree: Any) -> bool:
    """Whether any tensor in nested dicts and lists is a ``DTensor`` (a shard that knows its place)."""
    if isinstance(tree, DTensor):
        return True
    if isinstance(tree, Mapping):
        return any(holds_dtensors(v) for v in tree.values())
    if isinstance(tree, (list, tuple)):
        return any(holds_dtensors(v) for v in tree)
    return False


def _names(module: torch.nn.Module) -> dict[int, str]:
    return {id(p): name for name, p in module.named_parameters(remove_duplicate=False)}


def _named(state: dict[str, Any], module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """``optimizer.state_dict()`` with parameter names instead of positions (its state is empty)."""
    names = _names(module)
    groups = [
        {**saved, "params": [names[id(p)] for p in live["params"]]}
        for saved, live in zip(state["param_groups"], optimizer.param_groups)
    ]
    return {"state": {}, "param_groups": groups}


def _named_from_positional(
    state: dict[str, Any], module: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """``optimizer.state_dict()`` (numbered, whole tensors) keyed by parameter name instead."""
    names = _names(module)
    ordered = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    saved_ids = [i for group in state["param_groups"] for i in group["params"]]
    name_of = dict(zip(saved_ids, ordered))
    return {
        "state": {name_of[i]: value for i, value in state["state"].items()},
        "param_groups": [{**g, "params": [name_of[i] for i in g["params"]]} for g in state["param_groups"]],
    }


def _positional(state: dict[str, Any], module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The inverse of :func:`_named` for a state without entries: numbered as ``optimizer.state_dict()`` does."""
    names = _names(module)
    position = {names[id(p)]: i for i, p in enumerate(p for g in optimizer.param_groups for p in g["params"])}
    groups = [{**group, "params": [position[name] for name in group["params"]]} for group in state["param_groups"]]
    return {"state": {}, "param_groups": groups}
