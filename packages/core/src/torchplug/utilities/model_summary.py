"""A model's summary: its layers, their parameter counts, sizes and modes, and the shapes an example input takes.

``summarize(module)`` builds it; ``str()`` of the result is the table the Trainer prints at fit
start (``enable_model_summary``)::

      | Name | Type       | Params | Mode  | FLOPs | In sizes | Out sizes
    ------------------------------------------------------------------------
    0 | net  | Sequential | 676    | train | 1.3 K | [2, 16]  | [2, 4]
    ------------------------------------------------------------------------
    676       Trainable params
    0         Non-trainable params
    676       Total params
    0.003     Total estimated model params size (MB)
    ...

The sizes and FLOPs columns appear when the module sets ``example_input_array``: one forward pass
runs on it, in eval mode and without gradients, with hooks that record each layer's input and
output shapes.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

__all__ = ["LayerSummary", "ModelSummary", "human_readable_count", "summarize"]

_UNKNOWN = "?"


def human_readable_count(number: float) -> str:
    """``1234`` as ``"1.2 K"``, ``2_000_000`` as ``"2.0 M"`` (K, M, B, T; below 1000 the number itself)."""
    if number < 1000:
        return str(int(number))
    exponent = min(int(math.log10(number) // 3), 4)
    return f"{number / 1000**exponent:,.1f} {' KMBT'[exponent]}"


def _shape(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return list(value.shape)
    if isinstance(value, (list, tuple)):
        shapes = [_shape(v) for v in value]
        return shapes[0] if len(shapes) == 1 else shapes
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items()}
    return _UNKNOWN


@dataclass
class LayerSummary:
    """One row of the summary: a submodule, its parameters, and (after an example forward) its shapes."""

    name: str
    module: torch.nn.Module = field(repr=False)
    in_size: Any = _UNKNOWN
    out_size: Any = _UNKNOWN
    flops: int = 0

    @property
    def layer_type(self) -> str:
        """The submodule's class name."""
        return type(self.module).__name__

    @property
    def num_parameters(self) -> int:
        """Its parameter count (lazy parameters, not yet shaped, count 0)."""
        return sum(_numel(p) for p in self.module.parameters())

    @property
    def training(self) -> bool:
        """Whether it is in train mode."""
        return self.module.training


def _numel(param: torch.Tensor) -> int:
    return 0 if isinstance(param, torch.nn.parameter.UninitializedParameter) else param.numel()


@dataclass
class ModelSummary:
    """The summary of a module, down to ``max_depth`` levels of submodules (see :func:`summarize`)."""

    model_name: str
    layers: list[LayerSummary]
    trainable_parameters: int
    total_parameters: int
    parameter_bytes: int
    modules_in_train_mode: int
    modules_in_eval_mode: int
    total_flops: int | None

    @property
    def model_size_mb(self) -> float:
        """The parameters' size in megabytes (10**6 bytes)."""
        return self.parameter_bytes / 1e6

    def rows(self) -> list[list[str]]:
        """The table's rows as strings: index, name, type, params, mode, then FLOPs and sizes when measured."""
        measured = self.total_flops is not None
        rows = []
        for index, layer in enumerate(self.layers):
            row = [str(index), layer.name, layer.layer_type, human_readable_count(layer.num_parameters)]
            row.append("train" if layer.training else "eval")
            if measured:
                row += [human_readable_count(layer.flops), str(layer.in_size), str(layer.out_size)]
            rows.append(row)
        return rows

    def __str__(self) -> str:
        header = ["", "Name", "Type", "Params", "Mode"]
        if self.total_flops is not None:
            header += ["FLOPs", "In sizes", "Out sizes"]
        rows = self.rows()
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        line = lambda r: " | ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
        rule = "-" * max(len(line(header)), 20)
        totals = [
            (human_readable_count(self.trainable_parameters), "Trainable params"),
            (human_readable_count(self.total_parameters - self.trainable_parameters), "Non-trainable params"),
            (human_readable_count(self.total_parameters), "Total params"),
            (f"{self.model_size_mb:,.3f}", "Total estimated model params size (MB)"),
            (str(self.modules_in_train_mode), "Modules in train mode"),
            (str(self.modules_in_eval_mode), "Modules in eval mode"),
        ]
        if self.total_flops is not None:
            totals.append((human_readable_count(self.total_flops), "Total Flops"))
        lines = [line(header), rule, *(line(r) for r in rows), rule]
        lines += [f"{value:<10}{what}" for value, what in totals]
        return "\n".join(lines)


def _layers(module: torch.nn.Module, max_depth: int) -> list[LayerSummary]:
    if max_depth == 0:
        return []
    named = module.named_modules()
    next(named)  # the module itself
    return [LayerSummary(name, sub) for name, sub in named if max_depth < 0 or name.count(".") < max_depth]


@contextlib.contextmanager
def _recording(layers: list[LayerSummary]) -> Iterator[None]:
    handles = []
    for layer in layers:

        def record(_: torch.nn.Module, args: Any, output: Any, layer: LayerSummary = layer) -> None:
            layer.in_size, layer.out_size = _shape(args), _shape(output)

        handles.append(layer.module.register_forward_hook(record))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _forward_example(module: torch.nn.Module, example: Any, layers: list[LayerSummary]) -> int:
    """Run one forward pass on ``example`` (eval mode, no gradients); record the shapes, return the total FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    modes = {m: m.training for m in module.modules()}
    module.eval()
    counter = FlopCounterMode(display=False)
    try:
        with torch.no_grad(), _recording(layers), counter:
            if isinstance(example, (list, tuple)):
                module(*example)
            elif isinstance(example, dict):
                module(**example)
            else:
                module(example)
    finally:
        for submodule, training in modes.items():
            submodule.training = training
    per_module = counter.get_flop_counts()
    prefix = type(module).__name__
    for layer in layers:
        counts = per_module.get(f"{prefix}.{layer.name}", {})
        layer.flops = int(sum(counts.values()))
    return int(counter.get_total_flops())


def summarize(module: torch.nn.Module, max_depth: int = 1, example_input: Any = None) -> ModelSummary:
    """The summary of ``module``, its submodules listed down to ``max_depth`` levels (-1: all).

    Args:
        module: The model.
        max_depth: How deep to list submodules: 1 lists the direct children, -1 every submodule.
        example_input: An input of ``forward`` already on the module's device (default: the module's
            ``example_input_array``, when it has one); with it, the sizes and FLOPs columns are measured.
    """
    if not isinstance(max_depth, int) or max_depth < -1:
        raise ValueError(f"max_depth={max_depth!r}: give an int >= -1 (-1 lists every submodule).")
    layers = _layers(module, max_depth)
    if example_input is None:
        example_input = getattr(module, "example_input_array", None)
    flops = None if example_input is None else _forward_example(module, example_input, layers)
    params = list(module.parameters())
    modules = list(module.modules())
    return ModelSummary(
        model_name=type(module).__name__,
        layers=layers,
        trainable_parameters=sum(_numel(p) for p in params if p.requires_grad),
        total_parameters=sum(_numel(p) for p in params),
        parameter_bytes=sum(_numel(p) * p.element_size() for p in params),
        modules_in_train_mode=sum(1 for m in modules if m.training),
        modules_in_eval_mode=sum(1 for m in modules if not m.training),
        total_flops=flops,
    )
