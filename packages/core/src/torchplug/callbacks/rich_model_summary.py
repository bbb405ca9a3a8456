"""``RichModelSummary``: the model summary as a rich table (an optional extra: ``pip install 'core[rich]'``)."""

from __future__ import annotations

from typing import Any

from typing_extensions import override

from torchplug.callbacks._rich import require_rich
from torchplug.callbacks.model_summary import ModelSummary
from torchplug.utilities.model_summary import get_human_readable_count

__all__ = ["RichModelSummary"]


class RichModelSummary(ModelSummary):
    """:class:`ModelSummary`, drawn as a rich table on rich's console.

    Example:
        >>> Trainer(callbacks=[RichModelSummary(max_depth=2, header_style="bold cyan")])

    Args:
        max_depth: How deep nested layers are listed: 1 the direct children, -1 all; 0 prints nothing.
        **summarize_kwargs: ``header_style`` (a rich style, default ``"bold magenta"``) and
            ``console`` (a ``rich.console.Console``; default: rich's global console).

    Raises:
        ModuleNotFoundError: rich is not installed (``pip install 'core[rich]'``).
    """

    def __init__(self, max_depth: int = 1, **summarize_kwargs: Any) -> None:
        require_rich("RichModelSummary")
        super().__init__(max_depth, **summarize_kwargs)

    @staticmethod
    @override
    def summarize(
        summary_data: list[tuple[str, list[str]]],
        total_parameters: int,
        trainable_parameters: int,
        model_size: float,
        total_training_modes: dict[str, int],
        total_flops: int,
        **summarize_kwargs: Any,
    ) -> None:
        """Print the layers as a rich table, then the totals."""
        from rich import get_console
        from rich.table import Table

        console = summarize_kwargs.get("console") or get_console()
        table = Table(header_style=summarize_kwargs.get("header_style", "bold magenta"))
        right = {"Params", "FLOPs", "In sizes", "Out sizes"}
        for header, _ in summary_data:
            table.add_column(
                header, justify="right" if header in right else "left", style="dim" if header == " " else None
            )
        for row in zip(*(cells for _, cells in summary_data)):
            table.add_row(*row)
        console.print(table)
        grid = Table.grid(expand=True)
        grid.add_column()
        for label, value in (
            ("Trainable params", get_human_readable_count(trainable_parameters)),
            ("Non-trainable params", get_human_readable_count(total_parameters - trainable_parameters)),
            ("Total params", get_human_readable_count(total_parameters)),
            ("Total estimated model params size (MB)", f"{model_size:,.3f}"),
            ("Modules in train mode", str(total_training_modes["train"])),
            ("Modules in eval mode", str(total_training_modes["eval"])),
            ("Total FLOPs", get_human_readable_count(total_flops)),
        ):
            grid.add_row(f"[bold]{label}[/]: {value}")
        console.print(grid)
