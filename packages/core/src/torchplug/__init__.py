"""torchplug: a PyTorch training framework built as a plugin ecosystem.

``import torchplug`` imports neither torch nor any plugin: the plugin base classes and the
registries are torch-free, and the training API (``Trainer``, ``Module``...) loads on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from torchplug._discovery import Provider
from torchplug._errors import (
    BrokenPluginError,
    CheckpointLoadError,
    LoggedValueError,
    MisconfigurationError,
    NonFiniteLossError,
    PluginConflictError,
    PluginError,
    PluginLoadError,
    PluginSettingsError,
    PluginTimeoutError,
    PluginUnavailableError,
    SettingsError,
    TorchplugError,
    TrainingInterrupted,
    UnknownPluginError,
)
from torchplug._host import PluginHost, plugin_host
from torchplug._registry import Registry, RegistryEntry
from torchplug.accelerators.accelerator import Accelerator
from torchplug.environments.cluster_environment import ClusterEnvironment
from torchplug.hookspecs import hookimpl
from torchplug.io.checkpoint_io import CheckpointIO
from torchplug.precision.precision import Precision
from torchplug.strategies.launcher import Launcher
from torchplug.strategies.strategy import Strategy
from torchplug.utilities.imports import lazy_attributes

if TYPE_CHECKING:
    from torchplug.callbacks.callback import Callback
    from torchplug.core.datamodule import DataModule
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer
    from torchplug.utilities.seed import seed_everything

    # Lightning's registry names (module attributes made on first use), as type checkers see them.
    AcceleratorRegistry: Registry[Accelerator]
    StrategyRegistry: Registry[Strategy]
    PrecisionRegistry: Registry[Precision]
    CheckpointIORegistry: Registry[CheckpointIO]
    ClusterEnvironmentRegistry: Registry[ClusterEnvironment]

__all__ = [
    "Accelerator",
    "AcceleratorRegistry",
    "BrokenPluginError",
    "Callback",
    "CheckpointIO",
    "CheckpointIORegistry",
    "CheckpointLoadError",
    "ClusterEnvironment",
    "ClusterEnvironmentRegistry",
    "DataModule",
    "Launcher",
    "LoggedValueError",
    "MisconfigurationError",
    "Module",
    "NonFiniteLossError",
    "PluginConflictError",
    "PluginError",
    "PluginHost",
    "PluginLoadError",
    "PluginSettingsError",
    "PluginTimeoutError",
    "PluginUnavailableError",
    "Precision",
    "PrecisionRegistry",
    "Provider",
    "Registry",
    "RegistryEntry",
    "SettingsError",
    "Strategy",
    "StrategyRegistry",
    "TorchplugError",
    "Trainer",
    "TrainingInterrupted",
    "UnknownPluginError",
    "__version__",
    "hookimpl",
    "plugin_host",
    "seed_everything",
]

_LAZY = {
    "Trainer": "torchplug.trainer.trainer",
    "Module": "torchplug.core.module",
    "DataModule": "torchplug.core.datamodule",
    "Callback": "torchplug.callbacks.callback",
    "seed_everything": "torchplug.utilities.seed",
}

# Lightning's registry names, as views of this process's registries.
_REGISTRIES = {
    "AcceleratorRegistry": "accelerator",
    "StrategyRegistry": "strategy",
    "PrecisionRegistry": "precision",
    "CheckpointIORegistry": "checkpoint_io",
    "ClusterEnvironmentRegistry": "cluster_environment",
}

_lazy_getattr, __dir__ = lazy_attributes(__name__, _LAZY, globals())


def __getattr__(name: str) -> Any:
    if name in _REGISTRIES:
        return plugin_host().registry(_REGISTRIES[name])
    if name == "__version__":
        from torchplug._discovery import core_version

        return core_version()
    return _lazy_getattr(name)
