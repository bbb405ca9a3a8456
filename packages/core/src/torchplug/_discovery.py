"""Finding plugins: one scan of the ``torchplug.plugins`` entry-point group, nothing imported.

The scan reads each installed distribution's entry points first and its metadata only when it
declares a torchplug plugin. Copies of one distribution found twice on ``sys.path`` are
deduplicated (the first wins, as for imports; the other is recorded as shadowed). The result is
sorted by distribution and entry-point name, so the load order never depends on the file system.
"""

from __future__ import annotations

import importlib.metadata as metadata
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from typing_extensions import override

if TYPE_CHECKING:
    from packaging.specifiers import SpecifierSet

__all__ = [
    "CORE_DISTRIBUTION",
    "ENTRY_POINT_GROUP",
    "FAILED_STATES",
    "STATES",
    "PluginRecord",
    "Provider",
    "canonicalize_name",
    "core_version",
    "scan",
]

#: The entry-point group every torchplug plugin is declared in.
ENTRY_POINT_GROUP: Final = "torchplug.plugins"

#: The core's distribution name, the one plugins declare a requirement on.
CORE_DISTRIBUTION: Final = "core"

#: Every state a plugin can end in, with what it means (the listing's legend).
STATES: Final[dict[str, str]] = {
    "ok": "loaded; its names are registered",
    "broken": "its import or one of its hooks raised, or did not finish within TORCHPLUG_PLUGIN_TIMEOUT; "
    "its names raise that error",
    "incompatible": "its requirement on core excludes the installed core; not imported",
    "blocked": "named in TORCHPLUG_BLOCK_PLUGINS; not imported",
    "disabled": "autoload is off and it is not named in TORCHPLUG_PLUGINS; not imported",
    "shadowed": "another copy of the same distribution comes first on sys.path; not imported",
}

#: The states that make ``core plugins list`` exit 1 (and ``TORCHPLUG_STRICT_PLUGINS=1`` raise).
FAILED_STATES: Final = frozenset({"broken", "incompatible"})

_SEPARATORS: Final = re.compile(r"[-_.]+")


def canonicalize_name(name: str) -> str:
    """A distribution name in its normalised form (PEP 503): ``Vendor_A`` and ``vendor-a`` are one name."""
    return _SEPARATORS.sub("-", name).lower()


@dataclass(frozen=True, slots=True)
class Provider:
    """Who registered an entry: a plugin (entry point) of a distribution, the core, or user code.

    Attributes:
        plugin: The entry-point name, ``"builtin"`` for the core, or ``"runtime"`` for user code.
        distribution: The distribution's name as published (None for user code).
        version: The distribution's version (None for user code).
        builtin: True for the core's own plugins.
    """

    plugin: str
    distribution: str | None = None
    version: str | None = None
    builtin: bool = False

    @override
    def __str__(self) -> str:
        if self.distribution is None:
            return "user code (registered at run time)" if self.plugin == "runtime" else f"module {self.plugin}"
        suffix = ", built-in" if self.builtin else ""
        return f"{self.distribution} {self.version}{suffix}"

    @property
    def label(self) -> str:
        """``distribution==version``, or ``runtime`` for user code."""
        return f"{self.distribution}=={self.version}" if self.distribution else self.plugin

    def matches(self, token: str) -> bool:
        """Whether ``token`` names this provider (distribution name in any spelling, or plugin name)."""
        if token == self.plugin:
            return True
        return self.distribution is not None and canonicalize_name(token) == canonicalize_name(self.distribution)

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready form, used by ``core plugins list --json``."""
        return {
            "plugin": self.plugin,
            "distribution": self.distribution,
            "version": self.version,
            "builtin": self.builtin,
        }


@dataclass(eq=False, slots=True)
class PluginRecord:
    """One plugin found by discovery (an entry point, the core's built-ins, or a named module).

    Attributes:
        name: The entry-point name (``"builtin"`` for the core's own plugins).
        value: What the entry point names: ``"module"`` or ``"module:attribute"``.
        distribution: The providing distribution's name, as published.
        version: The providing distribution's version.
        state: One of :data:`STATES`, or ``"pending"`` before loading.
        reason: Why it is in that state, in words (empty when ok).
        error: The exception that made it broken.
        traceback: The formatted traceback of ``error``.
        requires_core: The distribution's requirement on ``core`` (for example ``">=0.1,<0.2"``).
        location: Where the distribution is installed.
        load_seconds: Time spent importing it and running its registration hooks.
        imports_torch: Loading it imported torch (which a plugin module must not do: the listing
            flags it with the time it cost).
        builtin: True for the core's own plugins.
        entry_point: The entry point itself (None for built-ins and named modules).
    """

    name: str
    value: str
    distribution: str | None = None
    version: str | None = None
    state: str = "pending"
    reason: str = ""
    error: BaseException | None = None
    traceback: str | None = None
    requires_core: str | None = None
    location: str | None = None
    load_seconds: float = 0.0
    imports_torch: bool = False
    builtin: bool = False
    entry_point: metadata.EntryPoint | None = field(default=None, repr=False)
    _provider: Provider | None = field(default=None, repr=False)

    @property
    def provider(self) -> Provider:
        """The :class:`Provider` stamped on every entry this plugin registers."""
        if self._provider is None:
            self._provider = Provider(self.name, self.distribution, self.version, self.builtin)
        return self._provider

    @property
    def provider_label(self) -> str:
        """``distribution version``, or the module name for a plugin outside any distribution."""
        return f"{self.distribution} {self.version}" if self.distribution else self.value

    @property
    def key(self) -> str:
        """The unique name the plugin is registered under in pluggy."""
        return f"{self.distribution or 'module'}:{self.name}"

    def as_dict(self, verbose: bool = False) -> dict[str, Any]:
        """JSON-ready form, used by ``core plugins list --json``."""
        data: dict[str, Any] = {
            "name": self.name,
            "module": self.value,
            "distribution": self.distribution,
            "version": self.version,
            "state": self.state,
            "reason": self.reason or None,
            "requires_core": self.requires_core,
            "builtin": self.builtin,
            "load_ms": round(self.load_seconds * 1000, 3),
            "imports_torch": self.imports_torch,
        }
        if verbose:
            data["location"] = self.location
            data["traceback"] = self.traceback
        return data


def core_version() -> str:
    """The installed core's version (``0+unknown`` when running from an uninstalled source tree)."""
    try:
        return metadata.version(CORE_DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return "0+unknown"


def scan(core: str) -> list[PluginRecord]:
    """Find every plugin entry point, deduplicated by distribution, sorted, and checked against ``core``.

    Returns records in state ``pending`` (to be loaded), ``incompatible`` or ``shadowed``.
    """
    records: list[PluginRecord] = []
    first_copy: dict[str, tuple[str, str | None]] = {}
    for dist in metadata.distributions():
        try:
            eps = [ep for ep in dist.entry_points if ep.group == ENTRY_POINT_GROUP]
        except Exception:  # a damaged entry_points.txt must not stop discovery of the others
            continue
        if not eps:
            continue
        records.extend(_records_for(dist, eps, core, first_copy))
    records.sort(key=lambda r: (canonicalize_name(r.distribution or ""), r.name))
    return records


def _records_for(
    dist: metadata.Distribution,
    eps: list[metadata.EntryPoint],
    core: str,
    first_copy: dict[str, tuple[str, str | None]],
) -> list[PluginRecord]:
    name, version, requires = _read_metadata(dist)
    location = _location(dist)
    canonical = canonicalize_name(name)
    requirement = _core_requirement(requires)
    records = [
        PluginRecord(
            name=ep.name,
            value=ep.value,
            distribution=name,
            version=version,
            location=location,
            requires_core=str(requirement) or None if requirement is not None else None,
            entry_point=ep,
        )
        for ep in eps
    ]
    if canonical in first_copy:
        kept_version, kept_location = first_copy[canonical]
        for record in records:
            record.state = "shadowed"
            record.reason = (
                f"{name} {kept_version} at {kept_location} comes first on sys.path; "
                f"this copy ({version} at {location}) is ignored"
            )
        return records
    first_copy[canonical] = (version, location)
    problem = _incompatibility(name, version, requirement, core)
    if problem:
        for record in records:
            record.state = "incompatible"
            record.reason = problem
    return records


def _read_metadata(dist: metadata.Distribution) -> tuple[str, str, list[str]]:
    """Name, version and Requires-Dist lines, read from the metadata headers only.

    Reading the header lines by hand is several times faster than ``dist.metadata`` (an email
    parser over the whole file, description included); the fallback covers other layouts.
    """
    text = dist.read_text("METADATA") or dist.read_text("PKG-INFO")
    if text is None:
        meta = dist.metadata
        return meta["Name"] or "<unnamed>", meta["Version"] or "0", meta.get_all("Requires-Dist") or []
    name, version, requires = "<unnamed>", "0", []
    for line in text.splitlines():
        if not line.strip():
            break  # the headers end at the first blank line; the description follows
        key, _, value = line.partition(":")
        if key == "Name":
            name = value.strip()
        elif key == "Version":
            version = value.strip()
        elif key == "Requires-Dist":
            requires.append(value.strip())
    return name, version, requires


def _location(dist: metadata.Distribution) -> str | None:
    try:
        return str(dist.locate_file(""))
    except Exception:
        return None


_REQUIREMENT_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")

#: One clause of a plain release range (``>=0.1``, ``<0.2``, ``==1.0``...), which is what plugins
#: declare on core; any other form (``~=``, ``==1.*``, pre-releases, local versions) goes to packaging.
_RELEASE_CLAUSE: Final = re.compile(r"\s*(>=|<=|==|!=|<|>)\s*(\d+(?:\.\d+)*)\s*")
_RELEASE: Final = re.compile(r"\d+(?:\.\d+)*")


@dataclass(frozen=True, slots=True)
class _ReleaseRange:
    """A specifier made only of comparisons with plain release versions, checked without packaging.

    Importing ``packaging.specifiers`` compiles its large regular expressions, which cost the
    listing and every process's first ``Trainer()`` more than the rest of discovery put together;
    the requirements plugins declare on core (``core>=0.1,<0.2``) never need it. For these clauses
    and a plain release installed, PEP 440's answer is the comparison of the zero-padded release
    numbers, which is what :meth:`contains` does. ``str()`` is packaging's: the clauses sorted.
    """

    clauses: tuple[tuple[str, tuple[int, ...]], ...]
    text: str

    @classmethod
    def parse(cls, text: str) -> _ReleaseRange | None:
        """The range, or ``None`` when ``text`` is not a comma-separated list of plain release clauses."""
        clauses, shown = [], []
        for part in text.split(","):
            match = _RELEASE_CLAUSE.fullmatch(part)
            if match is None:
                return None
            clauses.append((match.group(1), _release(match.group(2))))
            shown.append(match.group(1) + match.group(2))
        return cls(tuple(clauses), ",".join(sorted(shown)))

    def contains(self, version: str) -> bool | None:
        """Whether ``version`` satisfies every clause; ``None`` when it is not a plain release."""
        if _RELEASE.fullmatch(version) is None:
            return None
        installed = _release(version)
        return all(_compare(installed, op, bound) for op, bound in self.clauses)

    @override
    def __str__(self) -> str:
        return self.text


def _release(version: str) -> tuple[int, ...]:
    numbers = [int(n) for n in version.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()  # 0.1.0 == 0.1, as PEP 440 pads with zeros
    return tuple(numbers)


def _compare(installed: tuple[int, ...], op: str, bound: tuple[int, ...]) -> bool:
    if op == ">=":
        return installed >= bound
    if op == "<=":
        return installed <= bound
    if op == "<":
        return installed < bound
    if op == ">":
        return installed > bound
    if op == "==":
        return installed == bound
    return installed != bound


def _core_requirement(requires: list[str]) -> SpecifierSet | _ReleaseRange | None:
    """The specifier of the requirement on ``core`` (packaging is imported only for unusual forms)."""
    for line in requires:
        match = _REQUIREMENT_NAME.match(line)
        if match is None or canonicalize_name(match.group(1)) != CORE_DISTRIBUTION:
            continue  # cheap pre-filter: most requirements are not on core
        rest = line[match.end() :].strip()
        if not any(c in rest for c in ";[@("):  # the usual "core>=0.1,<0.2": no marker, extra or URL
            plain = _ReleaseRange.parse(rest) if rest else None
            if plain is not None:
                return plain
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

            try:
                return SpecifierSet(rest)
            except InvalidSpecifier:
                continue
        from packaging.requirements import InvalidRequirement, Requirement

        try:
            req = Requirement(line)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        return req.specifier
    return None


def _incompatibility(name: str, version: str, requirement: SpecifierSet | _ReleaseRange | None, core: str) -> str:
    if requirement is None or not str(requirement):
        return ""
    satisfied = requirement.contains(core) if isinstance(requirement, _ReleaseRange) else None
    if satisfied is None:  # an unusual specifier, or a development or pre-release core: packaging's PEP 440 rules
        from packaging.specifiers import SpecifierSet
        from packaging.version import InvalidVersion, Version

        try:
            installed = Version(core)
        except InvalidVersion:
            return ""
        specifier = SpecifierSet(str(requirement)) if isinstance(requirement, _ReleaseRange) else requirement
        satisfied = specifier.contains(installed, prereleases=True)
    if satisfied:
        return ""
    return (
        f"{name} {version} requires core{requirement}, but core {core} is installed. "
        f"Hint: install a release of {name} that supports core {core}, or a core that matches core{requirement}"
    )
