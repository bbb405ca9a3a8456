"""The profiler base class, the pass-through default, and the simple (wall time) and advanced (cProfile) profilers.

A profiler times named actions (``start(name)``/``stop(name)``, or ``with profiler.profile(name)``).
The Trainer times its hooks (``[Callback]ModelCheckpoint.on_train_batch_end``,
``[Module]Classifier.training_step``...), each training batch (``run_training_batch``), the batch's
move to the device (``batch_to_device``) and each training epoch (``run_training_epoch``), and
reports when each stage ends. Which actions are timed is decided once per run: without a
profiler, nothing is wrapped and nothing costs a call.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import time
from collections import defaultdict
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from torchplug._errors import MisconfigurationError
from torchplug.utilities.annotations import RealSignature
from torchplug.utilities.rank_zero import log

if TYPE_CHECKING:
    import cProfile  # imported when an AdvancedProfiler starts: cProfile and pstats are not start-up's

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "SimpleProfiler", "build_profiler"]


class Profiler:
    """Times named actions and reports them at the end of each stage (a base class: override start/stop/summary).

    Args:
        dirpath: Where to write the report (default: the run's log directory, when ``filename`` is given).
        filename: Write the report to ``{dirpath}/{stage}-{filename}.txt`` instead of logging it (info level).
    """

    #: Whether the Trainer wraps its actions for this profiler (the pass-through profiler wraps nothing).
    active: bool = True

    #: ``inspect.signature`` of torchplug's subclasses shows real types (utilities/annotations.py).
    __signature__ = RealSignature()

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None) -> None:
        self.dirpath = None if dirpath is None else os.fspath(dirpath)
        self.filename = filename
        self._stage: str | None = None
        self._local_rank: int | None = None
        self._log_dir: str | None = None
        #: The last report written or logged (empty before).
        self.report = ""

    def start(self, action_name: str) -> None:
        """Start timing ``action_name``."""

    def stop(self, action_name: str) -> None:
        """Stop timing ``action_name``."""

    def summary(self) -> str:
        """The report of what was timed."""
        return ""

    @contextlib.contextmanager
    def profile(self, action_name: str) -> Generator[None, None, None]:
        """Time the block as ``action_name``."""
        self.start(action_name)
        try:
            yield
        finally:
            self.stop(action_name)

    def wrap(self, action_name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn``, timed as ``action_name`` on each call."""
        start, stop = self.start, self.stop

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            start(action_name)
            try:
                return fn(*args, **kwargs)
            finally:
                stop(action_name)

        return timed

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """Called by the Trainer when a stage (``"fit"``, ``"validate"``...) starts."""
        self._stage, self._local_rank, self._log_dir = stage, local_rank, log_dir

    def describe(self) -> None:
        """Report: write the summary to the file, or log it (local rank 0 logs it), then :meth:`teardown`."""
        report = self.report = self.summary()
        if report:
            directory = self.dirpath or self._log_dir
            if self.filename and directory:
                import fsspec

                rank = f"-{self._local_rank}" if self._local_rank else ""
                path = f"{directory.rstrip('/')}/{self._stage}-{self.filename}{rank}.txt"
                fs, local = fsspec.url_to_fs(path)
                fs.makedirs(fs._parent(local), exist_ok=True)
                with fs.open(local, "w") as out:
                    out.write(report)
            elif not self._local_rank:
                log.info(f"{type(self).__name__} report ({self._stage}):\n{report}")
        self.teardown(self._stage)

    def teardown(self, stage: str | None) -> None:
        """Forget what was timed (after each report)."""


class PassThroughProfiler(Profiler):
    """The default: times nothing, reports nothing (the Trainer wraps none of its actions)."""

    active = False


class SimpleProfiler(Profiler):
    """Wall time of each action: calls, mean, total and share of the stage, slowest total first.

    Args:
        dirpath: See :class:`Profiler`.
        filename: See :class:`Profiler`.
        extended: Also give each action's share of the whole stage's time.
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 extended: bool = True) -> None:  # fmt: skip
        super().__init__(dirpath, filename)
        self.extended = extended
        self.durations: dict[str, list[float]] = defaultdict(list)
        self._open: dict[str, float] = {}
        self._stage_start = time.perf_counter()

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """Start the stage's clock."""
        super().setup(stage, local_rank, log_dir)
        self._stage_start = time.perf_counter()

    def start(self, action_name: str) -> None:
        """Start timing ``action_name`` (an action already running is an error)."""
        if action_name in self._open:
            raise ValueError(f"SimpleProfiler: {action_name!r} was started twice without a stop().")
        self._open[action_name] = time.perf_counter()

    def stop(self, action_name: str) -> None:
        """Record the time since ``start(action_name)``."""
        end = time.perf_counter()
        begun = self._open.pop(action_name, None)
        if begun is None:
            raise ValueError(f"SimpleProfiler: stop({action_name!r}) without a start().")
        self.durations[action_name].append(end - begun)

    def summary(self) -> str:
        """A table of the actions, slowest total first."""
        if not self.durations:
            return ""
        stage_total = max(time.perf_counter() - self._stage_start, 1e-12)
        rows = sorted(((name, len(d), sum(d)) for name, d in self.durations.items()), key=lambda r: -r[2])
        width = max(len("Action"), *(len(r[0]) for r in rows))
        head = f"{'Action':<{width}} | Mean duration (s) | Num calls | Total time (s)"
        head += " | Percentage %" if self.extended else ""
        lines = [head, "-" * len(head)]
        if self.extended:
            lines.append(f"{'Total':<{width}} | {'-':>17} | {'-':>9} | {stage_total:>14.5f} | {100.0:>12.1f}")
        for name, calls, total in rows:
            line = f"{name:<{width}} | {total / calls:>17.5f} | {calls:>9} | {total:>14.5f}"
            line += f" | {100 * total / stage_total:>12.1f}" if self.extended else ""
            lines.append(line)
        return "\n".join(lines)

    def teardown(self, stage: str | None) -> None:
        """Forget the durations."""
        self.durations.clear()
        self._open.clear()


class AdvancedProfiler(Profiler):
    """cProfile of each action: the functions that took the time, by cumulative time.

    Args:
        dirpath: See :class:`Profiler`.
        filename: See :class:`Profiler`.
        line_count_restriction: How many lines of each action's statistics to show (an int, or a fraction).
        dump_stats: Also write each action's raw cProfile statistics, for ``snakeviz`` or
            ``pstats``: ``{dirpath}/{stage}-{filename}-{action}.prof`` (``{stage}-{action}.prof``
            without ``filename``; the run's log directory without ``dirpath``), one file per process.
    """

    def __init__(self, dirpath: str | os.PathLike[str] | None = None, filename: str | None = None,
                 line_count_restriction: float = 1.0, dump_stats: bool = False) -> None:  # fmt: skip
        super().__init__(dirpath, filename)
        if not isinstance(dump_stats, bool):
            raise ValueError(f"AdvancedProfiler(dump_stats={dump_stats!r}): give True or False.")
        self.line_count_restriction = line_count_restriction
        self.dump_stats = dump_stats
        self.profiled_actions: dict[str, cProfile.Profile] = {}

    def start(self, action_name: str) -> None:
        """Start the action's cProfile."""
        import cProfile

        self.profiled_actions.setdefault(action_name, cProfile.Profile()).enable()

    def stop(self, action_name: str) -> None:
        """Pause the action's cProfile."""
        profile = self.profiled_actions.get(action_name)
        if profile is None:
            raise ValueError(f"AdvancedProfiler: stop({action_name!r}) without a start().")
        profile.disable()

    def summary(self) -> str:
        """Each action's statistics, by cumulative time."""
        import pstats

        parts = []
        for name, profile in self.profiled_actions.items():
            out = io.StringIO()
            pstats.Stats(profile, stream=out).strip_dirs().sort_stats("cumulative").print_stats(
                self.line_count_restriction
            )
            parts.append(f"Profile stats for: {name}\n{out.getvalue()}")
        if self.dump_stats:
            self._dump()
        return "\n".join(parts)

    def setup(self, stage: str, local_rank: int | None = None, log_dir: str | None = None) -> None:
        """Start a stage; with ``dump_stats``, refuse now when there is no directory to write the files to."""
        super().setup(stage, local_rank, log_dir)
        if self.dump_stats and not (self.dirpath or log_dir):
            raise ValueError(
                "AdvancedProfiler(dump_stats=True) has nowhere to write its .prof files: no dirpath, and the "
                "run has no log directory. Hint: pass AdvancedProfiler(dirpath=...)."
            )

    def _dump(self) -> None:
        directory = self.dirpath or self._log_dir
        assert directory is not None, "setup() refused a profiler with nowhere to write"
        import marshal

        import fsspec

        rank = f"-{self._local_rank}" if self._local_rank else ""
        stem = f"{self._stage}-{self.filename}" if self.filename else str(self._stage)
        for name, profile in self.profiled_actions.items():
            safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in name)
            fs, local = fsspec.url_to_fs(f"{directory.rstrip('/')}/{stem}-{safe}{rank}.prof")
            fs.makedirs(fs._parent(local), exist_ok=True)
            profile.create_stats()
            with fs.open(local, "wb") as out:
                marshal.dump(profile.stats, out)  # what Profile.dump_stats writes, through fsspec

    def teardown(self, stage: str | None) -> None:
        """Forget the statistics."""
        self.profiled_actions.clear()


_NAMES: dict[str, type[Profiler]] = {
    "simple": SimpleProfiler,
    "advanced": AdvancedProfiler,
    "passthrough": PassThroughProfiler,
}


def build_profiler(profiler: Any) -> Profiler:
    """``Trainer(profiler=...)``: None, ``"simple"``, ``"advanced"``, ``"pytorch"``, or a Profiler instance."""
    if profiler is None:
        return PassThroughProfiler()
    if isinstance(profiler, Profiler):
        return profiler
    if isinstance(profiler, str):
        name = profiler.lower()
        if name == "pytorch":
            from torchplug.profilers.pytorch import PyTorchProfiler

            return PyTorchProfiler()
        if name in _NAMES:
            return _NAMES[name]()
    raise MisconfigurationError(
        f"profiler={profiler!r}: choose 'simple', 'advanced', 'pytorch', or give a torchplug.profilers.Profiler."
    )
