"""The environment variables that control plugin discovery, read and checked once per discovery.

They are read before discovery starts: a bad value raises :class:`~torchplug.PluginSettingsError`
(naming the variable, its value and what is allowed) while every registry is still untouched.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from torchplug._errors import PluginSettingsError
from torchplug.utilities.env_vars import env_bool, env_float, env_list

__all__ = ["DEFAULT_PLUGIN_TIMEOUT", "ENV_VARS", "PluginSettings", "parse_bool", "plugin_timeout"]

DISABLE_AUTOLOAD: Final = "TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD"
PLUGINS: Final = "TORCHPLUG_PLUGINS"
BLOCK: Final = "TORCHPLUG_BLOCK_PLUGINS"
STRICT: Final = "TORCHPLUG_STRICT_PLUGINS"
PREFER: Final = "TORCHPLUG_PREFER"
TIMEOUT: Final = "TORCHPLUG_PLUGIN_TIMEOUT"

#: Seconds a third-party plugin's import, hook or availability check may take before it is left
#: behind as broken: generous enough for a plugin that imports torch on a busy machine.
DEFAULT_PLUGIN_TIMEOUT: Final = 30.0

#: Every variable read here, with what it does (shown by ``core plugins list --help`` and ``core env``).
ENV_VARS: Final[dict[str, str]] = {
    DISABLE_AUTOLOAD: "1 = load only the built-ins and the plugins named in TORCHPLUG_PLUGINS",
    PLUGINS: "comma-separated names of installed plugins (entry point, distribution, or the module an entry point "
    "names) to load even when autoload is off; nothing is imported from sys.path by name",
    BLOCK: "comma-separated entry-point or distribution names never to load",
    STRICT: "1 = raise on any plugin failure instead of recording it (on in torchplug's own tests)",
    PREFER: "comma-separated NAME=PROVIDER pairs that settle a name claimed by several distributions",
    TIMEOUT: "seconds a plugin's import, hooks or availability check may take before it is recorded as broken "
    f"(default {DEFAULT_PLUGIN_TIMEOUT:g}; 0 = no deadline)",
}


def parse_bool(name: str, value: str | None) -> bool:
    """Read a boolean environment variable; an unknown spelling is an error, not a silent False."""
    return env_bool(name, False, environ={} if value is None else {name: value}, error=PluginSettingsError)


def plugin_timeout(environ: Mapping[str, str] | None = None) -> float:
    """The plugin deadline in seconds from ``TORCHPLUG_PLUGIN_TIMEOUT`` (0: no deadline).

    Raises:
        PluginSettingsError: The value is not a number >= 0.
    """
    return env_float(TIMEOUT, DEFAULT_PLUGIN_TIMEOUT, minimum=0.0, environ=environ, error=PluginSettingsError)


def _parse_prefer(value: str | None) -> dict[str, str]:
    prefer: dict[str, str] = {}
    for item in env_list(PREFER, pattern=None, environ={} if value is None else {PREFER: value}):
        name, sep, provider = item.partition("=")
        if not sep or not name.strip() or not provider.strip():
            raise PluginSettingsError(
                f"{PREFER} has the item {item!r}, which is not NAME=PROVIDER. "
                f"Hint: {PREFER}=xpu=vendor-a picks vendor-a's 'xpu'."
            )
        prefer[name.strip().lower()] = provider.strip()
    return prefer


@dataclass(frozen=True, slots=True)
class PluginSettings:
    """What the environment says about plugin discovery.

    Attributes:
        autoload: Load every installed plugin (False when ``TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD=1``).
        requested: Plugins to load even when autoload is off (``TORCHPLUG_PLUGINS``).
        blocked: Entry-point or distribution names never to load (``TORCHPLUG_BLOCK_PLUGINS``).
        strict: Raise on any plugin failure (``TORCHPLUG_STRICT_PLUGINS=1``).
        prefer: Registry name to provider, for names claimed by several distributions (``TORCHPLUG_PREFER``).
        timeout: Seconds a third-party plugin's import and hooks may take (``TORCHPLUG_PLUGIN_TIMEOUT``);
            0 means no deadline (plugins load in the calling thread).
    """

    autoload: bool = True
    requested: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()
    strict: bool = False
    prefer: Mapping[str, str] = field(default_factory=dict)
    timeout: float = DEFAULT_PLUGIN_TIMEOUT

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        """Read and check the settings from ``environ`` (default: ``os.environ``).

        Raises:
            PluginSettingsError: A variable holds a value that cannot be understood.
        """
        env = os.environ if environ is None else environ
        error = PluginSettingsError
        return cls(
            autoload=not env_bool(DISABLE_AUTOLOAD, False, environ=env, error=error),
            requested=env_list(PLUGINS, environ=env, error=error),
            blocked=env_list(BLOCK, environ=env, error=error),
            strict=env_bool(STRICT, False, environ=env, error=error),
            prefer=_parse_prefer(env.get(PREFER)),
            timeout=plugin_timeout(env),
        )

    def as_dict(self) -> dict[str, object]:
        """The settings as plain JSON-ready data."""
        return {
            "autoload": self.autoload,
            "requested": list(self.requested),
            "blocked": list(self.blocked),
            "strict": self.strict,
            "prefer": dict(self.prefer),
            "timeout": self.timeout,
        }
