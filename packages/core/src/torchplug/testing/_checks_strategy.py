"""Strategy and precision checks that need no training: construction, ``attach``, contexts and state."""

from __future__ import annotations

import io
from typing import Any

from torchplug.testing._check import CheckFailed, check
from torchplug.testing._checks_accelerator import unpickling_error
from torchplug.testing._context import Context


def _partner(context: Context) -> Any:
    """An instance of the accelerator the plugin trains on (the check is skipped when it cannot run here)."""
    subject = context.subject
    name = subject.require_partner_available()
    return subject.host.registry("accelerator").get(name)


@check(
    "strategy",
    "strategy_contract",
    summary="the strategy is built from its init params, attach() makes it ready, and its ranks make sense",
    fix="take every constructor argument with a default, let attach() (through set_world_ranks and "
    "configure_launcher) prepare it, and answer root_device, is_global_zero, global_rank and world_size",
)
def strategy_contract(context: Context) -> str:
    import torch

    from torchplug.environments.local import LocalEnvironment

    subject = context.subject
    accelerator = _partner(context)
    cls = subject.load()
    for attribute in ("is_distributed", "restore_checkpoint_after_setup", "handles_gradient_accumulation"):
        if not isinstance(getattr(cls, attribute), bool):
            raise CheckFailed(f"{cls.__name__}.{attribute} is {getattr(cls, attribute)!r}, not a bool")
    strategy = subject.create()
    mapped = strategy.precision_for("32-true")
    if not isinstance(mapped, str):
        raise CheckFailed(f"precision_for('32-true') returned {mapped!r}, not a registry name")
    devices = accelerator.get_parallel_devices(accelerator.parse_devices(1))
    strategy.attach(accelerator=accelerator, cluster_environment=LocalEnvironment(), parallel_devices=devices)
    facts = (strategy.is_global_zero, strategy.global_rank, strategy.world_size)
    if facts != (True, 0, 1):
        raise CheckFailed(
            f"attached with one device in one process, is_global_zero, global_rank, world_size are {facts}, "
            "expected (True, 0, 1)"
        )
    if strategy.launcher is not None:
        # attach() promises the ranks; the device is known only in the processes the launcher starts.
        return f"attached to {type(accelerator).__name__}: {type(strategy.launcher).__name__} starts the processes"
    root = strategy.root_device
    if not isinstance(root, torch.device):
        raise CheckFailed(f"root_device is {root!r}, not a torch.device")
    return f"attached to {type(accelerator).__name__} on {root}, in this process"


@check(
    "precision",
    "precision_contract",
    summary="without a Trainer (no connect_accelerator) it converts a module and inputs, and its contexts work",
    fix="take what the precision needs as constructor arguments with defaults, so that it works before (or "
    "without) connect_accelerator(); forward_context() must be reusable, step after step",
)
def precision_contract(context: Context) -> str:
    import torch

    subject = context.subject
    subject.require_available()
    precision = subject.create()
    with precision.module_init_context():
        module = torch.nn.Linear(3, 2)
    module = precision.convert_module(module)
    if not isinstance(module, torch.nn.Module):
        raise CheckFailed(f"convert_module() returned {module!r}, not a torch.nn.Module")
    with precision.tensor_init_context():
        tensor = torch.ones(2, 3)
    dtype = next(module.parameters()).dtype
    data = precision.convert_input(tensor.to(dtype))
    for _ in range(2):  # the Trainer enters the same context object every step
        with precision.forward_context():
            output = module(data)
    output = precision.convert_output(output)
    if not isinstance(output, torch.Tensor):
        raise CheckFailed(f"convert_output() returned {output!r}, not a tensor")
    return f"module in {dtype}, output in {output.dtype}"


@check(
    "precision",
    "state_dict",
    summary="state_dict() is a dict that survives torch.load(weights_only=True) and load_state_dict() accepts",
    fix="return only tensors, numbers, strings, lists and dicts from state_dict(); restore them in load_state_dict()",
)
def state_dict(context: Context) -> str:
    import torch

    subject = context.subject
    subject.require_available()
    precision = subject.create()
    state = precision.state_dict()
    if not isinstance(state, dict):
        raise CheckFailed(f"state_dict() returned {state!r}, not a dict")
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    try:
        loaded = torch.load(buffer, weights_only=True)
    except Exception as exc:
        raise CheckFailed(
            f"state_dict() holds data that torch.load(weights_only=True) refuses: {unpickling_error(exc)}"
        ) from exc
    subject.create().load_state_dict(loaded)
    return f"{len(state)} key(s) round-tripped" if state else "empty (no state to keep)"
