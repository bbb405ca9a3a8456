"""Plain-text tables: the results table printed after ``trainer.validate()`` and ``trainer.test()``.

No dependency: the table is drawn with box-drawing characters where the stream can encode them,
else with ASCII.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

__all__ = ["format_results", "format_table", "print_results"]

_LOADER_SUFFIX = re.compile(r"/dataloader_idx_(\d+)$")


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]], rule: str = "─") -> str:
    """Draw ``rows`` under ``headers``: the first column left-aligned, the others right-aligned.

    Args:
        headers: One title per column.
        rows: The cells, as text; a short row is padded with empty cells.
        rule: The character of the horizontal rules (``"-"`` where the output cannot encode ``"─"``).

    Returns:
        The table, without a trailing newline.
    """
    columns = len(headers)
    cells = [list(row) + [""] * (columns - len(row)) for row in rows]
    widths = [max(len(str(line[i])) for line in [list(headers), *cells]) for i in range(columns)]

    def line(values: Sequence[str]) -> str:
        parts = [f"{values[0]:<{widths[0]}}"] + [f"{v:>{w}}" for v, w in zip(values[1:], widths[1:])]
        return "   ".join(parts).rstrip()

    bar = rule * (sum(widths) + 3 * (columns - 1))
    return "\n".join([bar, line(headers), bar, *(line(row) for row in cells), bar])


def _number(value: Any) -> str:
    value = value.item() if hasattr(value, "item") else value
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def format_results(results: Mapping[str, Any] | Sequence[Mapping[str, Any]], stage: str, rule: str = "─") -> str:
    """The results table of an evaluation run: one row per metric, one column per dataloader.

    Metric names ending in ``/dataloader_idx_<n>`` go to column ``n`` under their plain name, so
    ``val_loss/dataloader_idx_0`` and ``val_loss/dataloader_idx_1`` share the row ``val_loss``.

    Args:
        results: The metrics (name to number or one-element tensor), in one mapping or one per dataloader.
        stage: The title of the first column, for example ``"validate"`` or ``"test"``.
        rule: The character of the horizontal rules.

    Returns:
        The table, or ``""`` when there is no metric.
    """
    merged: dict[str, Any] = {}
    for part in [results] if isinstance(results, Mapping) else results:
        merged.update(part)
    table: dict[str, dict[int, str]] = {}
    loaders = 1
    for name, value in merged.items():
        match = _LOADER_SUFFIX.search(name)
        index = int(match.group(1)) if match else 0
        plain = name[: match.start()] if match else name
        loaders = max(loaders, index + 1)
        table.setdefault(plain, {})[index] = _number(value)
    if not table:
        return ""
    headers = [f"{stage.capitalize()} metric"] + [f"DataLoader {i}" for i in range(loaders)]
    rows = [[name] + [table[name].get(i, "") for i in range(loaders)] for name in sorted(table)]
    return format_table(headers, rows, rule)


def print_results(
    results: Mapping[str, Any] | Sequence[Mapping[str, Any]], stage: str, stream: TextIO | None = None
) -> None:
    """Print :func:`format_results` to ``stream`` (default: ``sys.stdout``); nothing when there is no metric."""
    stream = stream if stream is not None else sys.stdout
    rule = "─"
    try:
        rule.encode(getattr(stream, "encoding", None) or "utf-8")
    except (UnicodeEncodeError, LookupError):
        rule = "-"
    text = format_results(results, stage, rule)
    if text:
        print(text, file=stream, flush=True)
