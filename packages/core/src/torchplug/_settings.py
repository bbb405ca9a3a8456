"""The environment variables that control plugin discovery, read once per discovery."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from torchplug._errors import PluginSettingsError

__all__ = ["ENV_VARS", "PluginSettings", "parse_bool"]

DISABLE_AUTOLOAD: Final = "TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD"
PLUGINS: Final = "TORCHPLUG_PLUGINS"
BLOCK: Final = "TORCHPLUG_BLOCK_PLUGINS"
STRICT: Final = "TORCHPLUG_STRICT_PLUGINS"
PREFER: Final = "TORCHPLUG_PREFER"

#: Every variable read here, with what it does (shown by ``core plugins list --help`` and ``core env``).
ENV_VARS: Final[dict[str, str]] = {
    DISABLE_AUTOLOAD: "1 = load only the built-ins and the plugins named in TORCHPLUG_PLUGINS",
    PLUGINS: "comma-separated entry-point, distribution or module names to load even when autoload is off",
    BLOCK: "comma-separated entry-point or distribution names never to load",
    STRICT: "1 = raise on any plugin failure instead of recording it (on in torchplug's own tests)",
    PREFER: "comma-separated NAME=PROVIDER pairs that settle a name claimed by several distributions",
}

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"", "0", "false", "no", "off"})


def parse_bool(name: str, value: str | None) -> bool:
    """Read a boolean environment variable; an unknown spelling is an error, not a silent False."""
    if value is None:
        return False
    lowered = value.strip().lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise PluginSettingsError(
        f"{name}={value!r} is not a boolean. Hint: use {name}=1 to turn it on or {name}=0 to turn it off."
    )


def _parse_list(value: str | None) -> tuple[str, ...]:
    if not value:
        return ()
    return tuple(item.strip() for item in value.split(",") if item.strip())


def _parse_prefer(value: str | None) -> dict[str, str]:
    prefer: dict[str, str] = {}
    for item in _parse_list(value):
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
    """

    autoload: bool = True
    requested: tuple[str, ...] = ()
    blocked: tuple[str, ...] = ()
    strict: bool = False
    prefer: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PluginSettings:
        """Read the settings from ``environ`` (default: ``os.environ``)."""
        env = os.environ if environ is None else environ
        return cls(
            autoload=not parse_bool(DISABLE_AUTOLOAD, env.get(DISABLE_AUTOLOAD)),
            requested=_parse_list(env.get(PLUGINS)),
            blocked=_parse_list(env.get(BLOCK)),
            strict=parse_bool(STRICT, env.get(STRICT)),
            prefer=_parse_prefer(env.get(PREFER)),
        )

    def as_dict(self) -> dict[str, object]:
        """The settings as plain JSON-ready data."""
        return {
            "autoload": self.autoload,
            "requested": list(self.requested),
            "blocked": list(self.blocked),
            "strict": self.strict,
            "prefer": dict(self.prefer),
        }
