"""``Trainer(logger=...)``: the loggers a run writes to, from instances, registry names, True, False or None.

A name (``"csv"``, ``"tensorboard"``, ``"mlflow"`` from logger-mlflow...) is looked up in the logger
registry, like any plugin name, and created with :meth:`Logger.for_trainer` under the Trainer's
``default_root_dir``. True and None give the default logger: TensorBoard when ``tensorboard`` is
installed, else CSV (announced once per process, with the reason).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final

from torchplug._errors import MisconfigurationError, PluginUnavailableError
from torchplug.loggers.logger import DummyLogger, Logger
from torchplug.utilities.rank_zero import rank_zero_warn

if TYPE_CHECKING:
    from torchplug._host import PluginHost

__all__ = ["LoggerArg", "build_loggers", "default_logger_name"]

#: What ``Trainer(logger=...)`` accepts.
LoggerArg = bool | Logger | str | Iterable[Logger | str] | None

_FORMS: Final = (
    "Give True (the default logger), False (none), a registry name ('csv', 'tensorboard', or an installed "
    "logger plugin's: core plugins list --kind logger), a Logger instance, or a list of names and instances."
)

_announced_fallback = False


def default_logger_name() -> str:
    """The registry name of the default logger: ``"tensorboard"`` when tensorboard is installed, else ``"csv"``."""
    from torchplug.loggers._availability import tensorboard_available

    return "tensorboard" if tensorboard_available() else "csv"


def build_loggers(
    logger: Any, default_root_dir: str, host: PluginHost | None = None, fast_dev_run: bool = False
) -> list[Logger]:
    """The loggers of ``Trainer(logger=...)``, each created once, in the order given.

    Args:
        logger: True or None (the default logger), False (none), a registry name, a Logger, or an
            iterable of names and Loggers.
        default_root_dir: Where loggers created from a name write (see :meth:`Logger.for_trainer`).
        host: The plugins to look names up in (default: this process's).
        fast_dev_run: A development run, which writes nothing: one :class:`DummyLogger` stands in for
            the loggers asked for (none when none is), and none is created.

    Raises:
        MisconfigurationError: A value of another type, or one name or Logger object given twice.
        UnknownPluginError: A name no installed plugin registers (with the package to install).
        PluginUnavailableError: A registered logger whose library is missing (with the install hint).
        BrokenPluginError, PluginConflictError: As for any plugin name.
    """
    if fast_dev_run:
        return _dev_run_loggers(logger)
    if logger is None or logger is True:
        return [_default_logger(default_root_dir, host)]
    if logger is False:
        return []
    items = [logger] if isinstance(logger, (str, Logger)) else _as_list(logger)
    names = [item.lower() for item in items if isinstance(item, str)]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise MisconfigurationError(
            f"logger= names {', '.join(map(repr, twice))} more than once: both would write the same run. "
            "Hint: give Logger instances with different save_dir, name or version instead."
        )
    instances = [item for item in items if isinstance(item, Logger)]
    if len({id(item) for item in instances}) < len(instances):
        again = next(item for item in instances if sum(other is item for other in instances) > 1)
        raise MisconfigurationError(
            f"logger= holds the same {type(again).__name__} object twice: every row would be written twice. "
            "Hint: list it once."
        )
    return [item if isinstance(item, Logger) else create_logger(item, default_root_dir, host) for item in items]


def _dev_run_loggers(logger: Any) -> list[Logger]:
    if logger is False:
        return []
    if logger is None or logger is True or isinstance(logger, (str, Logger)):
        return [DummyLogger()]
    return [DummyLogger()] if _as_list(logger) else []


def _as_list(logger: Any) -> list[Any]:
    if isinstance(logger, (Mapping, bytes)) or not isinstance(logger, Iterable):
        raise MisconfigurationError(f"logger={logger!r} is not a logger. {_FORMS}")
    items = list(logger)
    for item in items:
        if not isinstance(item, (str, Logger)):
            raise MisconfigurationError(f"logger= holds {item!r}, which is not a torchplug Logger. {_FORMS}")
    return items


def create_logger(name: str, default_root_dir: str, host: PluginHost | None = None) -> Logger:
    """Create the logger registered as ``name`` (or ``name@provider``) under ``default_root_dir``.

    Raises:
        UnknownPluginError, PluginConflictError, BrokenPluginError: See :meth:`Registry.resolve`.
        PluginUnavailableError: Its probe says it cannot run here (a missing library), with the reason.
    """
    from torchplug._boundary import check_availability
    from torchplug._host import plugin_host

    entry = (host or plugin_host()).registry("logger").resolve(name)
    reason = check_availability(entry)
    if reason is not None:
        raise PluginUnavailableError(f"logger={name!r} ({entry.provider}) cannot run here: {reason}")
    cls = entry.load()
    try:
        return cls.for_trainer(default_root_dir, **entry.init_params)
    except TypeError as exc:
        raise TypeError(
            f"Could not create logger {entry.name!r} ({entry.target_path}) from {entry.provider} "
            f"with {entry.init_params}: {exc}"
        ) from exc


def _default_logger(default_root_dir: str, host: PluginHost | None) -> Logger:
    global _announced_fallback
    name = default_logger_name()
    if name == "csv" and not _announced_fallback:
        _announced_fallback = True
        rank_zero_warn(
            "The default logger is CSVLogger because tensorboard is not installed (metrics go to "
            f"{default_root_dir.rstrip('/')}/torchplug_logs/version_<n>/metrics.csv). Hint: pip install "
            "tensorboard for the TensorBoard logger, or choose one with Trainer(logger='csv') to silence this.",
            stacklevel=4,
        )
    return create_logger(name, default_root_dir, host)
