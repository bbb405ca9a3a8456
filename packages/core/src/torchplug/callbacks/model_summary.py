"""``ModelSummary``: the model's layers, parameter counts and sizes, printed when fitting starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typing_extensions import override

from torchplug.callbacks.callback import Callback

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["ModelSummary"]


class ModelSummary(Callback):
    """Print the model summary (:func:`torchplug.utilities.model_summary.summarize`) on global rank 0 at fit start.

    ``Trainer(enable_model_summary=True)`` (the default) adds one with ``max_depth=1`` unless one
    is given. With ``example_input_array`` set on the module, each layer's input and output sizes
    and FLOPs are measured by one forward pass on it (in eval mode, without gradients).

    Args:
        max_depth: How deep to list submodules: 1 lists the direct children, -1 every submodule,
            0 prints nothing.
    """

    def __init__(self, max_depth: int = 1) -> None:
        if not isinstance(max_depth, int) or isinstance(max_depth, bool) or max_depth < -1:
            raise ValueError(f"ModelSummary(max_depth={max_depth!r}): give an int >= -1 (-1 lists every submodule).")
        self.max_depth = max_depth
        #: The summary printed by the last fit (None before).
        self.summary: Any = None

    @override
    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Summarize the module and print the table (rank 0 only)."""
        if self.max_depth == 0 or not trainer.is_global_zero:
            return
        from torchplug.core._export import example_inputs
        from torchplug.utilities.model_summary import summarize

        example = module.example_input_array
        if example is None:
            self.summary = summarize(module, self.max_depth, None)
        else:  # one forward pass measures the sizes: in the precision's context, as the steps run
            example = example_inputs(module, example, "summary")
            with trainer.precision_plugin.forward_context():
                self.summary = summarize(module, self.max_depth, example)
        print(self.summary)
