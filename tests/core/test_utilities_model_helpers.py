"""``is_overridden(method_name, instance=None, parent=None)``: does an object replace a base class's method?"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from torchplug.callbacks.callback import Callback
from torchplug.core.datamodule import DataModule
from torchplug.core.module import Module
from torchplug.utilities.model_helpers import is_overridden


class Steps(Module):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.zeros(())


class Data(DataModule):
    def train_dataloader(self) -> Any:
        return []


class EpochPrinter(Callback):
    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        pass


@pytest.mark.parametrize(
    ("instance", "method", "expected"),
    [
        (Steps(), "training_step", True),
        (Steps(), "validation_step", False),
        (Data(), "train_dataloader", True),
        (Data(), "val_dataloader", False),
        (EpochPrinter(), "on_train_epoch_end", True),
        (EpochPrinter(), "on_train_epoch_start", False),
    ],
    ids=["module override", "module default", "datamodule override", "datamodule default", "callback override",
         "callback default"],
)  # fmt: skip
def test_the_parent_is_inferred_for_modules_datamodules_and_callbacks(instance: Any, method: str, expected: bool):
    assert is_overridden(method, instance) is expected


def test_no_instance_is_not_an_override():
    # trainer.lightning_module is None before a run: asking about it is not an error.
    assert is_overridden("training_step", None) is False


def test_a_method_neither_has_is_not_an_override():
    assert is_overridden("no_such_method", Steps()) is False
    assert is_overridden("no_such_method", Steps(), parent=DataModule) is False


def test_an_object_of_another_kind_needs_a_parent():
    with pytest.raises(ValueError, match=r"is_overridden\('step', object object\) needs a parent"):
        is_overridden("step", object())


def test_a_method_the_parent_lacks_cannot_be_overridden():
    class Extra(Steps):
        def helper(self) -> int:
            return 1

    with pytest.raises(ValueError, match="Steps defines no 'helper'"):
        is_overridden("helper", Extra(), parent=Steps)


def test_an_explicit_parent_compares_with_that_class():
    class Again(Steps):
        pass

    assert is_overridden("training_step", Again(), parent=Module)
    assert not is_overridden("training_step", Again(), parent=Steps)


def test_a_class_can_be_asked_about_as_well_as_an_instance():
    assert is_overridden("training_step", Steps)
    assert not is_overridden("validation_step", Steps)


def test_a_decorated_override_is_still_an_override():
    def logged(fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return fn(*args, **kwargs)

        return wrapper

    class Decorated(Module):
        @logged
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            return None

    assert is_overridden("training_step", Decorated())


def test_a_function_set_on_the_instance_is_an_override():
    model = Module()
    model.on_train_start = lambda: None  # type: ignore[method-assign]
    assert is_overridden("on_train_start", model)


@pytest.mark.parametrize(
    "wrap",
    [functools.partial, lambda fn: functools.wraps(fn)(lambda *a, **k: fn(*a, **k))],
    ids=["partial", "functools.wraps"],
)
def test_a_wrapper_set_on_the_instance_is_what_it_wraps(wrap: Any):
    # Wrapping the default (to count or time calls) does not make it an override; wrapping an override keeps one.
    default, own = Module(), Steps()
    default.on_train_start = wrap(default.on_train_start)  # type: ignore[method-assign]
    own.training_step = wrap(own.training_step)  # type: ignore[method-assign]
    assert not is_overridden("on_train_start", default)
    assert is_overridden("training_step", own)
