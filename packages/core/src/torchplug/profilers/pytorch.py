"""``PyTorchProfiler``: torch's own profiler over the stage, each timed action marked as a ``record_function``."""

from __future__ import annotations

import inspect
import os
from typing import Any

from torchplug.profilers.profiler import Profiler
from torchplug.utilities.rank_zero import rank_zero_warn

__all__ = ["PyTorchProfiler"]


class PyTorchProfiler(Profiler):
    """``torch.profiler.profile`` from the first timed action to the stage's end; the report is its operator table.

    The parameters are in Lightning 2.6's order, so that its positional calls mean the same here.

    Args:
        dirpath: See :class:`~torchplug.profilers.Profiler`.
        filename: See :class:`~torchplug.profilers.Profiler`.
        group_by_input_shapes: Record the operators' input shapes (``record_shapes=True``) and give
            each shape its own row of the table.
        emit_nvtx: Not supported: NVTX ranges for ``nsys`` need a CUDA build; refused by name.
            Hint: wrap ``fit`` in ``torch.autograd.profiler.emit_nvtx()`` yourself under ``nsys``.
        export_to_chrome: Also write the trace for ``chrome://tracing`` or Perfetto:
            ``{dirpath}/{stage}-{filename}.pt.trace.json`` (``{stage}-pytorch`` without ``filename``;
            the run's log directory without ``dirpath``), one file per process.
        row_limit: Rows of the table (-1: all).
        sort_by_key: The column the table is sorted by (None: ``"cpu_time_total"``).
        record_module_names: Only False: naming each module's ranges (Lightning's default, True) is
            not implemented, and True is refused rather than ignored.
        table_kwargs: Passed to the table (``key_averages().table(**table_kwargs)``), e.g. ``max_name_column_width``.
        **profiler_kwargs: Passed to ``torch.profiler.profile`` (``activities``, ``record_shapes``,
            ``with_stack``...); a name it does not take is refused here, not when profiling starts.

    Raises:
        ValueError: ``emit_nvtx=True``, ``record_module_names=True``, a switch that is not a bool, or
            a keyword that ``torch.profiler.profile`` does not take.

    Attributes:
        trace_path: Where the last Chrome trace was written, or ``""``.
    """

    def __init__(
        self,
        dirpath: str | os.PathLike[str] | None = None,
        filename: str | None = None,
        group_by_input_shapes: bool = False,
        emit_nvtx: bool = False,
        export_to_chrome: bool = True,
        row_limit: int = 20,
        sort_by_key: str | None = None,
        record_module_names: bool = False,
        table_kwargs: dict[str, Any] | None = None,
        **profiler_kwargs: Any,
    ) -> None:
        super().__init__(dirpath, filename)
        switches = {
            "group_by_input_shapes": group_by_input_shapes,
            "emit_nvtx": emit_nvtx,
            "export_to_chrome": export_to_chrome,
            "record_module_names": record_module_names,
        }
        for name, value in switches.items():
            if not isinstance(value, bool):
                raise ValueError(f"PyTorchProfiler({name}={value!r}): give True or False.")
        if emit_nvtx:
            raise ValueError(
                "PyTorchProfiler(emit_nvtx=True) is not supported: NVTX ranges need a CUDA build and nsys. Hint: "
                "run fit() inside torch.autograd.profiler.emit_nvtx() under nsys, without a Trainer profiler."
            )
        if record_module_names:
            raise ValueError(
                "PyTorchProfiler(record_module_names=True) is not supported: the table names operators and the "
                "Trainer's actions, not modules. Hint: pass record_module_names=False (the default here), or "
                "profiler_kwargs with_stack=True to see the Python frames (and so the modules) of each operator."
            )
        import torch

        accepted = set(inspect.signature(torch.profiler.profile).parameters)
        unknown = sorted(set(profiler_kwargs) - accepted)
        if unknown:
            raise ValueError(
                f"PyTorchProfiler: torch.profiler.profile takes no {', '.join(unknown)}. "
                f"It takes: {', '.join(sorted(accepted))}."
            )
        if group_by_input_shapes:
            if profiler_kwargs.get("record_shapes") is False:
                raise ValueError(
                    "PyTorchProfiler(group_by_input_shapes=True, record_shapes=False): grouping by input shapes "
                    "needs them recorded. Hint: drop record_shapes=False."
                )
            profiler_kwargs["record_shapes"] = True
        self.group_by_input_shapes = group_by_input_shapes
        self.export_to_chrome = export_to_chrome
        self.sort_by_key = sort_by_key or "cpu_time_total"
        self.row_limit = row_limit
        self.table_kwargs = dict(table_kwargs or {})
        self.profiler_kwargs = profiler_kwargs
        self._profiler: Any = None
        self._records: dict[str, Any] = {}
        self._table = ""
        self.trace_path = ""

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
        """Stop torch's profiler, write the Chrome trace (``export_to_chrome``), return the table."""
        if self._profiler is None:
            return ""
        for name in list(self._records):
            self.stop(name)
        self._profiler.__exit__(None, None, None)
        if self.export_to_chrome:
            try:
                self._export_trace()
            except Exception as exc:  # the table is still worth having; say why there is no trace
                rank_zero_warn(f"PyTorchProfiler: the Chrome trace could not be written: {type(exc).__name__}: {exc}")
        averages = self._profiler.key_averages(group_by_input_shape=self.group_by_input_shapes)
        self._table = averages.table(sort_by=self.sort_by_key, row_limit=self.row_limit, **self.table_kwargs)
        return str(self._table)

    def _export_trace(self) -> None:
        directory = self.dirpath or self._log_dir
        if not directory:
            return  # no run directory (a profiler used alone): the table is the report
        import fsspec
        from fsspec.implementations.local import LocalFileSystem

        rank = f"-{self._local_rank}" if self._local_rank else ""
        path = f"{directory.rstrip('/')}/{self._stage}-{self.filename or 'pytorch'}{rank}.pt.trace.json"
        fs, local = fsspec.url_to_fs(path)
        if isinstance(fs, LocalFileSystem):
            os.makedirs(os.path.dirname(local), exist_ok=True)
            self._profiler.export_chrome_trace(local)
        else:  # torch writes local files only: write a temporary one, then copy it
            import tempfile

            with tempfile.TemporaryDirectory() as scratch:
                staged = os.path.join(scratch, "trace.json")
                self._profiler.export_chrome_trace(staged)
                fs.makedirs(fs._parent(local), exist_ok=True)
                fs.put_file(staged, local)
        self.trace_path = path

    def teardown(self, stage: str | None) -> None:
        """Drop the finished profiler (the next stage starts a new one)."""
        self._profiler = None
        self._records.clear()
