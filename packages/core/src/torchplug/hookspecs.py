"""The hooks a torchplug plugin can implement.

A plugin is a module (or any object) named by an entry point in the ``torchplug.plugins`` group::

    [project.entry-points."torchplug.plugins"]
    xpu = "torchplug_xpu._plugin"

It implements some of the functions below, by name. Decorating them with :data:`hookimpl` is
optional; a function whose name starts with ``torchplug_`` but matches no hook here is reported
as an error of that plugin (a misspelt hook is never silently ignored)::

    from torchplug import hookimpl

    @hookimpl
    def torchplug_register_accelerators(registry):
        registry.register("xpu", "torchplug_xpu.accelerator:XPUAccelerator", description="Intel GPUs")

A plugin module must import nothing heavy at module level (not torch, not a vendor library):
``core plugins list`` imports every plugin module. Register dotted ``"module:Class"`` paths; the
class is imported the first time it is used.

Hooks are called with keyword arguments; an implementation may accept only the arguments it
needs. Each plugin's hooks are called inside their own guard: a hook that raises marks that
plugin broken and never stops the others from loading.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import pluggy

if TYPE_CHECKING:
    from torchplug._registry import Registry
    from torchplug.accelerators.accelerator import Accelerator
    from torchplug.environments.cluster_environment import ClusterEnvironment
    from torchplug.io.checkpoint_io import CheckpointIO
    from torchplug.loggers.logger import Logger
    from torchplug.precision.precision import Precision
    from torchplug.strategies.strategy import Strategy

__all__ = [
    "HOOK_NAMES",
    "PROJECT_NAME",
    "REGISTRATION_HOOKS",
    "hookimpl",
    "hookspec",
    "torchplug_environment_report",
    "torchplug_register_accelerators",
    "torchplug_register_checkpoint_io",
    "torchplug_register_cluster_environments",
    "torchplug_register_loggers",
    "torchplug_register_precisions",
    "torchplug_register_strategies",
]

#: The pluggy project name: hooks are marked with ``pluggy.HookimplMarker("torchplug")``.
PROJECT_NAME: Final = "torchplug"

#: Marks a hook specification. Used only by torchplug itself.
hookspec: Final = pluggy.HookspecMarker(PROJECT_NAME)

#: Marks a hook implementation in a plugin: ``@hookimpl`` or ``@hookimpl(tryfirst=True)``.
hookimpl: Final = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def torchplug_register_accelerators(registry: Registry[Accelerator]) -> None:
    """Register this plugin's accelerators (kinds of hardware).

    Args:
        registry: The accelerator registry. Call ``registry.register(name, "module:Class",
            description=..., aliases=(...), probe="module:function", **init_params)`` once per name.
            The class must subclass :class:`torchplug.Accelerator`.

    Return value: ignored; every plugin's implementation is called.

    Called once per process, the first time any registry is used, after the plugin module is
    imported. Called for the core's own built-ins first, then for each plugin in sorted order.
    """


@hookspec
def torchplug_register_strategies(registry: Registry[Strategy]) -> None:
    """Register this plugin's strategies (how the model is spread over devices and processes).

    Args:
        registry: The strategy registry. One class may be registered under several names with
            different init params, as ``ddp_spawn`` is ``ddp`` with ``start_method="spawn"``.
            The class must subclass :class:`torchplug.Strategy`.

    Return value: ignored; every plugin's implementation is called.

    Called once per process, like :func:`torchplug_register_accelerators`.
    """


@hookspec
def torchplug_register_precisions(registry: Registry[Precision]) -> None:
    """Register this plugin's precisions (numerics: dtypes, autocast, loss scaling).

    Args:
        registry: The precision registry. Names follow the ``<bits>-<mode>`` convention of the
            built-ins (``bf16-mixed``, ``16-true``); short aliases go in ``aliases=``.
            The class must subclass :class:`torchplug.Precision`.

    Return value: ignored; every plugin's implementation is called.

    Called once per process, like :func:`torchplug_register_accelerators`.
    """


@hookspec
def torchplug_register_checkpoint_io(registry: Registry[CheckpointIO]) -> None:
    """Register this plugin's checkpoint IO (how checkpoints are written, read and removed).

    Args:
        registry: The checkpoint IO registry. The class must subclass :class:`torchplug.CheckpointIO`.

    Return value: ignored; every plugin's implementation is called.

    Called once per process, like :func:`torchplug_register_accelerators`.
    """


@hookspec
def torchplug_register_cluster_environments(registry: Registry[ClusterEnvironment]) -> None:
    """Register this plugin's cluster environments (where ranks and rendezvous come from).

    Args:
        registry: The cluster environment registry. The class must subclass
            :class:`torchplug.ClusterEnvironment`; its ``detect()`` and ``detect_priority`` decide
            whether and in which order it is chosen automatically.

    Return value: ignored; every plugin's implementation is called.

    Called once per process, like :func:`torchplug_register_accelerators`.
    """


@hookspec
def torchplug_register_loggers(registry: Registry[Logger]) -> None:
    """Register this plugin's loggers (experiment trackers: where metrics and hyperparameters go).

    Args:
        registry: The logger registry. The class must subclass :class:`torchplug.loggers.Logger`;
            ``Trainer(logger="name")`` creates it with :meth:`~torchplug.loggers.Logger.for_trainer`
            (the registered init params plus the Trainer's ``default_root_dir``). Give a ``probe``
            that finds the tracking library without importing it, so that ``core plugins list``
            shows the logger as unavailable (with the install hint) when the library is missing.

    Return value: ignored; every plugin's implementation is called.

    Called once per process, like :func:`torchplug_register_accelerators`.
    """


@hookspec
def torchplug_environment_report() -> dict[str, Any] | None:
    """Contribute a section to ``core env``, the report users paste into bug reports.

    Return value: a JSON-ready mapping (for example driver and runtime versions, device names),
    or None to add nothing. Results are collected from every plugin, keyed by the plugin's
    distribution name. Must not raise for a missing device: report it as a value instead.

    Called by ``core env`` only, never during training; it may import torch or vendor libraries.
    """


#: The registration hooks, one per plugin kind (the five hardware kinds and loggers).
REGISTRATION_HOOKS: Final[dict[str, str]] = {
    "accelerator": "torchplug_register_accelerators",
    "strategy": "torchplug_register_strategies",
    "precision": "torchplug_register_precisions",
    "checkpoint_io": "torchplug_register_checkpoint_io",
    "cluster_environment": "torchplug_register_cluster_environments",
    "logger": "torchplug_register_loggers",
}

#: Every hook name a plugin may implement.
HOOK_NAMES: Final[frozenset[str]] = frozenset([*REGISTRATION_HOOKS.values(), "torchplug_environment_report"])
