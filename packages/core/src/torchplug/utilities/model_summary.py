"""Summaries of a model: its layers, their parameter counts, modes, FLOPs and input/output sizes.

``summarize(module)`` is what :class:`torchplug.callbacks.ModelSummary` prints at the start of
``fit`` (``Trainer(enable_model_summary=True)``, the default), in Lightning 2.6's layout::

      | Name | Type       | Params | Mode  | FLOPs | In sizes | Out sizes
    ---------------------------------------------------------------------------
    0 | net  | Sequential | 676    | train | 1.3 K | [2, 16]  | [2, 4]
    ---------------------------------------------------------------------------
    676       Trainable params
    0         Non-trainable params
    676       Total params
    0.003     Total estimated model params size (MB)
    4         Modules in train mode
    0         Modules in eval mode
    1.3 K     Total Flops

In and out sizes and FLOPs need an example input: the module's ``example_input_array`` (a
tensor, a tuple of positional arguments or a dict of keyword arguments), or one given, run once
through the module in eval mode under ``torch.no_grad()``.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, Final

import torch
from torch.utils.flop_counter import FlopCounterMode

from torchplug.utilities.apply import move_to_device

__all__ = ["ModelSummary", "format_summary_table", "get_human_readable_count", "summarize"]

UNKNOWN_SIZE: Final = "?"
NOT_APPLICABLE: Final = "n/a"
LEFTOVER_PARAMS_NAME: Final = "other params"
_UNITS: Final = (" ", "K", "M", "B", "T")


def get_human_readable_count(number: float) -> str:
    """``123``, ``1.2 K``, ``2.0 M``, ``3.0 B``, ``400 T``: a count abbreviated in thousands (up to trillions)."""
    if number < 0:
        raise ValueError(f"get_human_readable_count({number!r}): give a count >= 0.")
    digits = int(math.floor(math.log10(number)) + 1) if number > 0 else 1
    group = min(math.ceil(digits / 3), len(_UNITS)) - 1
    scaled = number / 10 ** (3 * group)
    if group == 0 or scaled >= 100:
        return f"{int(scaled):,d} {_UNITS[group]}"
    return f"{scaled:,.1f} {_UNITS[group]}"


def _shape(data: Any) -> Any:
    if hasattr(data, "shape"):
        return list(data.shape)
    if isinstance(data, (list, tuple)):
        return [_shape(item) for item in data]
    return UNKNOWN_SIZE


class _Layer:
    """One summarised layer: records its input and output sizes during the example forward."""

    def __init__(self, module: torch.nn.Module) -> None:
        self.module = module
        self.in_size: Any = UNKNOWN_SIZE
        self.out_size: Any = UNKNOWN_SIZE
        self._handle = module.register_forward_hook(self._record, with_kwargs=True)

    def _record(self, module: torch.nn.Module, args: Any, kwargs: Any, output: Any) -> None:
        inputs = list(args) + list(kwargs.values())
        self.in_size = _shape(inputs[0] if len(inputs) == 1 else inputs)
        self.out_size = _shape(output)
        self.detach()  # the first call is the one that counts (a layer may be reused)

    def detach(self) -> None:
        self._handle.remove()

    @property
    def layer_type(self) -> str:
        return type(self.module).__name__

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.module.parameters() if not _uninitialized(p))


def _uninitialized(param: torch.Tensor) -> bool:
    return isinstance(param, torch.nn.parameter.UninitializedParameter)


class ModelSummary:
    """The layers of ``module`` down to ``max_depth``, with totals; ``str(summary)`` is the table ``fit`` prints.

    Example:
        >>> print(ModelSummary(model, max_depth=2))
          | Name       | Type        | Params | Mode  | FLOPs | In sizes | Out sizes
        ...

    Args:
        module: The model (a :class:`torchplug.Module` or any ``torch.nn.Module``).
        max_depth: How deep nested layers are listed: 1 the direct children, -1 all, 0 none
            (the totals only).
        example_input: An input of ``forward`` on the module's device (default: the module's
            ``example_input_array``, when it has one); with it, sizes and FLOPs are measured.

    Raises:
        ValueError: ``max_depth`` below -1 or not an int.
    """

    def __init__(self, module: torch.nn.Module, max_depth: int = 1, example_input: Any = None) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"ModelSummary(max_depth={max_depth!r}): give -1 (all layers), 0 (none) or a depth >= 1.")
        self._module = module
        self._max_depth = max_depth
        self._example = example_input if example_input is not None else getattr(module, "example_input_array", None)
        self._flops = FlopCounterMode(display=False)
        self._layers = self._summarize()

    # -- the layers -----------------------------------------------------------------------------

    def _named_layers(self) -> Iterator[tuple[str, torch.nn.Module]]:
        if self._max_depth == 0:
            return
        for name, child in self._module.named_modules():
            if name and (self._max_depth == -1 or name.count(".") < self._max_depth):
                yield name, child

    def _summarize(self) -> dict[str, _Layer]:
        layers = {name: _Layer(child) for name, child in self._named_layers()}
        try:
            if self._example is not None:
                self._forward_example_input()
        finally:
            for layer in layers.values():
                layer.detach()
        return layers

    def _forward_example_input(self) -> None:
        module = self._module
        device = next((p.device for p in module.parameters()), torch.device("cpu"))
        example = move_to_device(self._example, device)
        modes = {m: m.training for m in module.modules()}
        module.eval()
        try:
            with torch.no_grad(), self._flops:
                if isinstance(example, (list, tuple)):
                    module(*example)
                elif isinstance(example, dict):
                    module(**example)
                else:
                    module(example)
        finally:
            for m, training in modes.items():
                m.training = training

    @property
    def layer_names(self) -> list[str]:
        """The listed layers' names (``backbone``, ``backbone.0``...)."""
        return list(self._layers)

    @property
    def layer_types(self) -> list[str]:
        """The listed layers' class names."""
        return [layer.layer_type for layer in self._layers.values()]

    @property
    def in_sizes(self) -> list[Any]:
        """Each listed layer's input shape in the example forward (``"?"`` without one)."""
        return [layer.in_size for layer in self._layers.values()]

    @property
    def out_sizes(self) -> list[Any]:
        """Each listed layer's output shape in the example forward (``"?"`` without one)."""
        return [layer.out_size for layer in self._layers.values()]

    @property
    def param_nums(self) -> list[int]:
        """Each listed layer's parameter count (its sub-layers included)."""
        return [layer.num_parameters for layer in self._layers.values()]

    @property
    def training_modes(self) -> list[bool]:
        """Whether each listed layer is in train mode."""
        return [layer.module.training for layer in self._layers.values()]

    @property
    def flop_counts(self) -> dict[str, int]:
        """Each listed layer's FLOPs in the example forward (0 without an example input)."""
        counts = self._flops.get_flop_counts()
        root = type(self._module).__name__
        return {name: sum(counts.get(f"{root}.{name}", {}).values()) for name in self._layers}

    # -- the totals -----------------------------------------------------------------------------

    @property
    def total_parameters(self) -> int:
        """Parameters of the whole model (each shared parameter once)."""
        return sum(p.numel() for p in self._module.parameters() if not _uninitialized(p))

    @property
    def trainable_parameters(self) -> int:
        """Parameters that require gradients."""
        return sum(p.numel() for p in self._module.parameters() if p.requires_grad and not _uninitialized(p))

    @property
    def total_layer_params(self) -> int:
        """The sum over the listed layers."""
        return sum(self.param_nums)

    @property
    def model_size(self) -> float:
        """The parameters' size in megabytes, from each parameter's own dtype."""
        return sum(p.numel() * p.element_size() for p in self._module.parameters() if not _uninitialized(p)) / 1e6

    @property
    def total_training_modes(self) -> dict[str, int]:
        """How many submodules (the model itself excluded) are in train and in eval mode."""
        modes = [m.training for m in self._module.modules()][1:]
        return {"train": modes.count(True), "eval": modes.count(False)}

    @property
    def total_flops(self) -> int:
        """FLOPs of the example forward (0 without an example input)."""
        return int(self._flops.get_total_flops())

    # -- the table ------------------------------------------------------------------------------

    def summary_data(self) -> list[tuple[str, list[str]]]:
        """The table's columns: a header and the cells of each (what :func:`format_summary_table` lays out)."""
        columns: list[tuple[str, list[str]]] = [
            (" ", [str(i) for i in range(len(self._layers))]),
            ("Name", self.layer_names),
            ("Type", self.layer_types),
            ("Params", [get_human_readable_count(n) for n in self.param_nums]),
            ("Mode", ["train" if training else "eval" for training in self.training_modes]),
            ("FLOPs", [get_human_readable_count(n) for n in self.flop_counts.values()]),
        ]
        if self._example is not None:
            columns.append(("In sizes", [str(size) for size in self.in_sizes]))
            columns.append(("Out sizes", [str(size) for size in self.out_sizes]))
        leftover = self.total_parameters - self.total_layer_params
        if leftover > 0 and self._layers:  # parameters of the model itself, outside every listed layer
            extra = {" ": " ", "Name": LEFTOVER_PARAMS_NAME, "Params": get_human_readable_count(leftover)}
            for header, cells in columns:
                cells.append(extra.get(header, NOT_APPLICABLE))
        return columns

    def __str__(self) -> str:
        return format_summary_table(
            total_parameters=self.total_parameters,
            trainable_parameters=self.trainable_parameters,
            model_size=self.model_size,
            total_training_modes=self.total_training_modes,
            total_flops=self.total_flops,
            columns=self.summary_data(),
        )

    def __repr__(self) -> str:
        return str(self)


def format_summary_table(
    total_parameters: int,
    trainable_parameters: int,
    model_size: float,
    total_training_modes: dict[str, int],
    total_flops: int,
    columns: list[tuple[str, list[str]]],
) -> str:
    """The plain-text table of :class:`ModelSummary`: a row per layer, then the totals."""
    lines: list[str] = []
    rows = len(columns[0][1]) if columns else 0
    if rows:
        widths = [max(len(header), *(len(cell) for cell in cells)) for header, cells in columns]
        rule = "-" * (sum(widths) + 3 * (len(columns) + 1))
        lines.append(" | ".join(header.ljust(w) for (header, _), w in zip(columns, widths)))
        lines.append(rule)
        for i in range(rows):
            lines.append(" | ".join(cells[i].ljust(w) for (_, cells), w in zip(columns, widths)))
        lines.append(rule)
    totals = [
        (get_human_readable_count(trainable_parameters), "Trainable params"),
        (get_human_readable_count(total_parameters - trainable_parameters), "Non-trainable params"),
        (get_human_readable_count(total_parameters), "Total params"),
        (f"{model_size:,.3f}", "Total estimated model params size (MB)"),
        (str(total_training_modes["train"]), "Modules in train mode"),
        (str(total_training_modes["eval"]), "Modules in eval mode"),
        (get_human_readable_count(total_flops), "Total Flops"),
    ]
    lines.extend(f"{value:<10}{label}" for value, label in totals)
    return "\n".join(lines)


def summarize(module: torch.nn.Module, max_depth: int = 1, example_input: Any = None) -> ModelSummary:
    """The :class:`ModelSummary` of ``module`` down to ``max_depth`` (1: its direct children; -1: all).

    ``example_input`` (default: the module's ``example_input_array``) measures sizes and FLOPs.
    """
    return ModelSummary(module, max_depth=max_depth, example_input=example_input)
