"""Lightning 2.6 code that passes arguments by position means the same in torchplug.

For every class and function that both export under the same name, Lightning's positional
parameters must be the first of ours, in the same order (ours may add parameters after them).
The exceptions are listed with the reason they are safe.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import pytest

pytest.importorskip("lightning.pytorch", reason="the lightning tox env installs lightning==2.6.*")

MODULES = [
    ("lightning.pytorch", "torchplug"),
    ("lightning.pytorch.callbacks", "torchplug.callbacks"),
    ("lightning.pytorch.loggers", "torchplug.loggers"),
    ("lightning.pytorch.profilers", "torchplug.profilers"),
    ("lightning.pytorch.strategies", "torchplug.strategies"),
    ("lightning.pytorch.plugins.environments", "torchplug.environments"),
    ("lightning.pytorch.plugins.precision", "torchplug.precision"),
    ("lightning.pytorch.plugins.io", "torchplug.io"),
    ("lightning.pytorch.accelerators", "torchplug.accelerators"),
    ("lightning.pytorch.tuner", "torchplug.tuner"),
    ("lightning.pytorch.utilities", "torchplug.utilities"),
    ("lightning.pytorch.core", "torchplug.core"),
]

#: Where the positional parameters differ on purpose, and why a Lightning call cannot go wrong silently.
DIFFERENT = {
    # Strategies are built from keywords (DDPStrategy(find_unused_parameters=True)); their first
    # positional parameter is Lightning's accelerator object, which torchplug's connector attaches.
    "torchplug.strategies.Strategy": "keywords in practice",
    "torchplug.strategies.ParallelStrategy": "keywords in practice",
    "torchplug.strategies.SingleDeviceStrategy": "keywords in practice",
    "torchplug.strategies.DDPStrategy": "keywords in practice",
    "torchplug.strategies.FSDPStrategy": "keywords in practice",
    # Lightning's (precision, device, scaler): ours is (precision, device_type, scaler), the same
    # meaning by position, and device= is accepted as a keyword.
    "torchplug.precision.MixedPrecision": "same meaning, other name",
}


def positional(function: Any) -> list[str]:
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    names = [p.name for p in inspect.signature(function).parameters.values() if p.kind in kinds]
    return names[1:] if names[:1] == ["self"] else names


def pairs() -> list[tuple[str, Any, Any]]:
    found = []
    for theirs_name, ours_name in MODULES:
        theirs, ours = importlib.import_module(theirs_name), importlib.import_module(ours_name)
        for name in sorted(set(dir(theirs)) & set(dir(ours))):
            a, b = getattr(theirs, name), getattr(ours, name)
            if name.startswith("_") or not callable(a) or not callable(b):
                continue
            if inspect.isclass(a) != inspect.isclass(b):
                continue
            found.append(
                (
                    f"{ours_name}.{name}",
                    a.__init__ if inspect.isclass(a) else a,
                    b.__init__ if inspect.isclass(b) else b,
                )
            )
    return found


def test_the_comparison_covers_the_classes_users_construct() -> None:
    names = {name for name, _, _ in pairs()}
    assert {"torchplug.Trainer", "torchplug.callbacks.ModelCheckpoint", "torchplug.callbacks.EarlyStopping",
            "torchplug.loggers.CSVLogger", "torchplug.profilers.PyTorchProfiler"} <= names  # fmt: skip


@pytest.mark.parametrize(("name", "theirs", "ours"), pairs(), ids=lambda value: value if isinstance(value, str) else "")
def test_lightnings_positional_parameters_come_first_in_the_same_order(name: str, theirs: Any, ours: Any) -> None:
    try:
        expected, got = positional(theirs), positional(ours)
    except (TypeError, ValueError):
        pytest.skip("no signature to compare (a builtin)")
    if name in DIFFERENT:
        pytest.skip(DIFFERENT[name])
    if not got:
        return  # keyword-only here: a positional call is refused with a TypeError, never misread
    assert got[: len(expected)] == expected, f"{name}: Lightning {expected}, torchplug {got}"


#: Lightning keywords that torchplug does not take: a call with one fails with a TypeError naming it.
NOT_TAKEN = {
    "torchplug.strategies.Strategy": {"precision_plugin"},  # torchplug's name: precision=
    "torchplug.strategies.ParallelStrategy": {"precision_plugin"},
    "torchplug.strategies.SingleDeviceStrategy": {"precision_plugin"},
    "torchplug.utilities.rank_zero_info": {"stacklevel"},  # a log record, not a warning: no stack level
}


@pytest.mark.parametrize(("name", "theirs", "ours"), pairs(), ids=lambda value: value if isinstance(value, str) else "")
def test_lightnings_keywords_are_taken(name: str, theirs: Any, ours: Any) -> None:
    try:
        expected, got = inspect.signature(theirs).parameters, inspect.signature(ours).parameters
    except (TypeError, ValueError):
        pytest.skip("no signature to compare (a builtin)")
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in got.values()):
        return  # ours takes any keyword, and checks them (tests/core names the refusals)
    plain = (inspect.Parameter.VAR_KEYWORD, inspect.Parameter.VAR_POSITIONAL)
    missing = {n for n, p in expected.items() if n != "self" and p.kind not in plain and n not in got}
    assert missing <= NOT_TAKEN.get(name, set()), f"{name} does not take Lightning's {sorted(missing)}"
