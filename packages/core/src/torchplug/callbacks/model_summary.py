"""``ModelSummary``: print a table of the model's layers, parameter counts and sizes when ``fit`` starts."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typing_extensions import override

from torchplug.callbacks.callback import Callback

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer
    from torchplug.utilities.model_summary import ModelSummary as Summary

__all__ = ["ModelSummary"]


class ModelSummary(Callback):
    """Print the model's summary on global rank 0 when ``fit`` starts (after the model is on its device).

    ``Trainer(enable_model_summary=True)`` (the default) adds one with ``max_depth=1`` unless one
    is given. The table lists the layers down to ``max_depth`` with their type, parameter count,
    mode (train or eval) and FLOPs, and, when the module sets ``example_input_array``, the input
    and output shapes of each layer in one forward of that example (in eval mode, without
    gradients, in the precision's context as the steps run); then the trainable, frozen and total
    parameters, their size in MB, the modules in train and eval mode, and the total FLOPs. See
    :func:`torchplug.utilities.model_summary.summarize` to get the same object in code.

    Example:
        >>> Trainer(callbacks=[ModelSummary(max_depth=2)])

    Args:
        max_depth: How deep nested layers are listed: 1 the direct children, -1 all; 0 prints
            nothing.
        **summarize_kwargs: Passed to :meth:`summarize` (a subclass may use them).
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        if isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < -1:
            raise ValueError(f"ModelSummary(max_depth={max_depth!r}): give -1 (all layers), 0 (off) or a depth >= 1.")
        self.max_depth = max_depth
        self._summarize_kwargs = summarize_kwargs
        #: The summary printed at the last fit's start (None before).
        self.summary: Summary | None = None

    @override
    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Build the summary and print it (global rank 0)."""
        if not self.max_depth or not trainer.is_global_zero:
            return
        # Imported here: torch's FLOP counter, which the summary uses, is not part of Trainer()'s start-up.
        from torchplug.utilities.model_summary import summarize

        example = module.example_input_array
        if example is None:
            summary = summarize(module, self.max_depth)
        else:  # one forward pass measures the sizes: on the device, in the precision's context, as the steps run
            from torchplug.core._export import example_inputs

            with trainer.precision_plugin.forward_context():
                summary = summarize(module, self.max_depth, example_inputs(module, example, "summary"))
        self.summarize(
            summary.summary_data(),
            summary.total_parameters,
            summary.trainable_parameters,
            summary.model_size,
            summary.total_training_modes,
            total_flops=summary.total_flops,
            **self._summarize_kwargs,
        )
        self.summary = summary

    @staticmethod
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        """Print the summary (override to show it another way; :class:`RichModelSummary` does)."""
        from torchplug.utilities.model_summary import format_summary_table

        print(
            format_summary_table(
                total_parameters=total_parameters,
                trainable_parameters=trainable_parameters,
                model_size=model_size,
                total_training_modes=total_training_modes,
                total_flops=total_flops,
                columns=summary_data,
            )
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(max_depth={self.max_depth})"
