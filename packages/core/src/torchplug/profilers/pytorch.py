"""``PyTorchProfiler``: torch's own profiler over the stage, each timed action marked as a ``record_function``."""

from __future__ import annotations

import os
from typing import Any

from torchplug.profilers.profiler import Profiler

__all__ = ["PyTorchProfiler"]


class PyTorchProfiler(Profiler):
    """``torch.profiler.profile`` from the first timed action to the stage's end; the report is its operator table.

    Args:
        dirpath: See :class:`~torchplug.profilers.Profiler`.
        filename: See :class:`~torchplug.profilers.Profiler`.
        sort_by_key: The column the table is sorted by (``"cpu_time_total"``...).
        row_limit: Rows of the table (-1: all).
        **profiler_kwargs: Passed to ``torch.profiler.profile`` (``activities``, ``record_shapes``, ``schedule``...).
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 sort_by_key: str = "cpu_time_total", row_limit: int = 20, **profiler_kwargs: Any) -> None:  # fmt: skip
        super().__init__(dirpath, filename)
        self.sort_by_key = sort_by_key
        self.row_limit = row_limit
        self.profiler_kwargs = profiler_kwargs
        self._profiler: Any = None
        self._records: dict[str, Any] = {}
        self._table = ""

    def start(self, action_name: str) -> None:
        """Start torch's profiler if needed, and open a ``record_function`` named ``action_name``."""
        import torch

        if self._profiler is None:
            self._profiler = torch.profiler.profile(**self.profiler_kwargs)
            self._profiler.__enter__()
        record = torch.profiler.record_function(action_name)
        record.__enter__()
        self._records[action_name] = record

    def stop(self, action_name: str) -> None:
        """Close the ``record_function`` of ``action_name``."""
        record = self._records.pop(action_name, None)
        if record is not None:
            record.__exit__(None, None, None)

    def summary(self) -> str:
        """Stop torch's profiler and return its table of operators and timed actions."""
        if self._profiler is None:
            return ""
        for name in list(self._records):
            self.stop(name)
        self._profiler.__exit__(None, None, None)
        self._table = self._profiler.key_averages().table(sort_by=self.sort_by_key, row_limit=self.row_limit)
        return str(self._table)

    def teardown(self, stage: str | None) -> None:
        """Drop the finished profiler (the next stage starts a new one)."""
        self._profiler = None
        self._records.clear()
