"""The exceptions torchplug raises: each says what was wrong, what was given, and how to fix it."""

from __future__ import annotations

from typing_extensions import override

__all__ = [
    "BrokenPluginError",
    "CheckpointLoadError",
    "LoggedValueError",
    "MisconfigurationError",
    "NonFiniteLossError",
    "PluginConflictError",
    "PluginError",
    "PluginLoadError",
    "PluginSettingsError",
    "PluginTimeoutError",
    "PluginUnavailableError",
    "SettingsError",
    "TorchplugError",
    "TrainingInterrupted",
    "UnknownPluginError",
]


class TorchplugError(Exception):
    """Base class of every error torchplug raises on purpose."""


class MisconfigurationError(TorchplugError, ValueError):
    """The arguments given to the Trainer (or the command line) do not fit together.

    The message names the arguments as the user wrote them and lists the valid choices.
    """


class SettingsError(MisconfigurationError):
    """A ``TORCHPLUG_*`` environment variable holds a value that cannot be understood.

    The message names the variable, quotes its value, and lists the values it accepts. Raised where
    the variable is read, before anything is done with it.
    """


class PluginError(TorchplugError):
    """Base class of the errors about plugins and registry names."""


class UnknownPluginError(PluginError, LookupError):
    """No installed plugin provides the requested name.

    The message suggests close names, lists the installed names of that kind, and says which
    package to install when the name belongs to a known first-party backend.
    """

    @override
    def __str__(self) -> str:
        # LookupError would otherwise show the repr of the message, quotes and all.
        return str(self.args[0]) if self.args else ""


class BrokenPluginError(PluginError, ImportError):
    """The plugin that provides the requested name failed to load, or its code raised; the cause is chained.

    The message names the plugin's distribution and quotes the original error.
    """


class PluginTimeoutError(BrokenPluginError):
    """Plugin code (an import, a hook, ``is_available()``, a probe) did not finish within its deadline.

    The deadline is ``TORCHPLUG_PLUGIN_TIMEOUT`` seconds (30 by default). The plugin is recorded
    as broken and left behind; the others carry on.
    """


class PluginUnavailableError(PluginError, RuntimeError):
    """The plugin loaded, but cannot run on this machine (for example: no device, no vendor library)."""


class PluginConflictError(PluginError, LookupError):
    """Several distributions provide the requested name and none was chosen.

    The message lists the providers and the three ways to pick one.
    """

    @override
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class PluginLoadError(PluginError):
    """Raised by discovery when ``TORCHPLUG_STRICT_PLUGINS=1`` and some plugin failed to load."""


class PluginSettingsError(SettingsError, PluginError):
    """A ``TORCHPLUG_*`` variable that controls plugin discovery holds a value that cannot be understood.

    Raised before discovery starts, so that no registry is left half-built.
    """


class NonFiniteLossError(TorchplugError, FloatingPointError):
    """The training loss became NaN or infinite; the message names the step where it was found.

    Raised by ``fit`` with ``Trainer(nonfinite_loss="raise")`` (the default). The check costs
    nothing per step: the loss is checked every ``log_every_n_steps`` batches and at the end of
    each epoch; the message also names the last step where it was still finite.
    """


class CheckpointLoadError(TorchplugError, ValueError):
    """A checkpoint file could not be read: empty, truncated, or not a checkpoint at all.

    The message names the path and the cause; the original error is chained.
    """


class LoggedValueError(TorchplugError, TypeError, ValueError):
    """``self.log`` was given a value it cannot record: a dict, a string, a list... (the message names it).

    A ValueError, as Lightning raises, and a TypeError, as the kind of value is what is wrong, so
    that code catching either keeps working.
    """


class TrainingInterrupted(KeyboardInterrupt):
    """``fit`` was stopped by SIGINT or SIGTERM; raised on every process at the same step.

    A KeyboardInterrupt, so that ``except Exception`` does not swallow it. ``fit`` turns it into
    ``SystemExit(128 + signal number)`` (exit status 130 for SIGINT, 143 for SIGTERM) once the
    run has been wound down: the interruption checkpoint written, the loggers flushed, the other
    processes stopped.

    Attributes:
        signum: The signal received.
        step: The global step training stopped after.
    """

    def __init__(self, message: str, signum: int, step: int) -> None:
        super().__init__(message)
        self.signum = signum
        self.step = step
        #: Set once the Trainer ran the exception hooks for it on every process.
        self.handled = False

    @override
    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""
