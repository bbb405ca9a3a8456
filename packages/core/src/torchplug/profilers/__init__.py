"""Profilers: where the time of a run goes, action by action, reported when the run ends (``Trainer(profiler=...)``)."""

from torchplug.utilities.imports import lazy_attributes

__all__ = ["AdvancedProfiler", "PassThroughProfiler", "Profiler", "PyTorchProfiler", "SimpleProfiler", "build_profiler"]

__getattr__, __dir__ = lazy_attributes(
    __name__,
    {
        "Profiler": "torchplug.profilers.profiler",
        "PassThroughProfiler": "torchplug.profilers.profiler",
        "SimpleProfiler": "torchplug.profilers.profiler",
        "AdvancedProfiler": "torchplug.profilers.profiler",
        "build_profiler": "torchplug.profilers.profiler",
        "PyTorchProfiler": "torchplug.profilers.pytorch",
    },
    globals(),
)
