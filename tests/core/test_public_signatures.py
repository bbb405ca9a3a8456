"""The constructor signatures users inspect carry real types, not the strings of postponed annotations.

Config systems and command-line parsers read ``inspect.signature(ModelCheckpoint).parameters``; so
do users' tests. torchplug's modules postpone their annotations (``from __future__ import
annotations``), and ``utilities/annotations.py`` evaluates those of the public constructors when
each class is made.
"""

from __future__ import annotations

import inspect
import os
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest

import torchplug.callbacks
import torchplug.loggers
import torchplug.profilers
from torchplug.callbacks.callback import Callback
from torchplug.trainer.trainer import Trainer

if TYPE_CHECKING:
    from collections.abc import Sequence  # only for type checkers, like many users' imports


def _public_classes() -> list[type]:
    classes: list[type] = [Trainer]
    for package in (torchplug.callbacks, torchplug.loggers, torchplug.profilers):
        classes += [value for name in package.__all__ if inspect.isclass(value := getattr(package, name))]
    return classes


@pytest.mark.parametrize("cls", _public_classes(), ids=lambda cls: cls.__name__)
def test_no_constructor_annotation_is_a_string(cls: type):
    strings = {
        name: parameter.annotation
        for name, parameter in inspect.signature(cls).parameters.items()
        if isinstance(parameter.annotation, str)
    }
    assert not strings, (
        f"inspect.signature({cls.__name__}) shows annotations as strings: {strings}. Hint: import the names they "
        f"use at run time in {cls.__module__} (not only under TYPE_CHECKING), so that they can be evaluated."
    )


@pytest.mark.parametrize(
    ("cls", "parameter", "expected"),
    [
        (torchplug.callbacks.ModelCheckpoint, "dirpath", str | os.PathLike[str] | None),
        (torchplug.callbacks.EarlyStopping, "patience", int),
        (torchplug.callbacks.Timer, "duration", str | timedelta | dict[str, int] | None),
        (torchplug.loggers.CSVLogger, "version", int | str | None),
        (Trainer, "max_epochs", int | None),
    ],
    ids=["ModelCheckpoint.dirpath", "EarlyStopping.patience", "Timer.duration", "CSVLogger.version",
         "Trainer.max_epochs"],
)  # fmt: skip
def test_annotations_are_the_types_written(cls: type, parameter: str, expected: Any):
    assert inspect.signature(cls).parameters[parameter].annotation == expected


def test_a_users_own_callback_keeps_its_annotations_as_written():
    # Names imported only for type checkers cannot be evaluated; a user's class is never touched.
    class Mine(Callback):
        def __init__(self, items: Sequence[int], every: int = 1) -> None:
            self.items, self.every = items, every

    parameters = inspect.signature(Mine).parameters
    assert parameters["items"].annotation == "Sequence[int]"
    assert parameters["every"].annotation == "int"


def test_a_users_subclass_that_keeps_torchplugs_constructor_shows_its_types():
    class Kept(torchplug.callbacks.EarlyStopping):
        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            pass

    assert inspect.signature(Kept).parameters["min_delta"].annotation is float
