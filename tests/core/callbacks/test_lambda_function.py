"""LambdaCallback: plain functions as hooks; only the hooks given run."""

from __future__ import annotations

import pytest

from torchplug._errors import MisconfigurationError
from torchplug.callbacks import Callback, LambdaCallback
from torchplug.callbacks.lambda_function import HOOKS
from torchplug.trainer.hooks import is_overridden


def test_each_function_given_runs_with_the_hooks_arguments(make_trainer, tiny_model, data):
    calls: list[tuple[str, object]] = []
    callback = LambdaCallback(
        setup=lambda trainer, module, stage: calls.append(("setup", stage)),
        on_train_epoch_start=lambda trainer, module: calls.append(("epoch", trainer.current_epoch)),
        on_train_batch_end=lambda trainer, module, outputs, batch, batch_idx: calls.append(("batch", batch_idx)),
        on_validation_end=lambda trainer, module: calls.append(("validated", trainer.current_epoch)),
        teardown=lambda trainer, module, stage: calls.append(("teardown", stage)),
    )
    make_trainer(max_epochs=2, limit_train_batches=2, callbacks=[callback]).fit(tiny_model(), data(), data())

    assert calls == [
        ("setup", "fit"),
        ("epoch", 0), ("batch", 0), ("batch", 1), ("validated", 0),
        ("epoch", 1), ("batch", 0), ("batch", 1), ("validated", 1),
        ("teardown", "fit"),
    ]  # fmt: skip


def test_only_the_hooks_given_are_bound():
    callback = LambdaCallback(on_fit_start=lambda trainer, module: None)
    assert is_overridden(callback, "on_fit_start", Callback)  # the Trainer calls it
    assert not is_overridden(callback, "on_train_batch_end", Callback)  # never bound: no per-step cost


def test_every_callback_hook_can_be_given():
    assert {"on_exception", "on_save_checkpoint", "on_before_optimizer_step", "on_predict_epoch_end"} <= set(HOOKS)
    assert "state_dict" not in HOOKS


def test_unknown_hooks_and_non_functions_are_refused():
    with pytest.raises(MisconfigurationError, match=r"LambdaCallback\(on_epoch_end=\.\.\.\): 'on_epoch_end' is not"):
        LambdaCallback(on_epoch_end=lambda trainer, module: None)
    with pytest.raises(MisconfigurationError, match=r"LambdaCallback\(on_fit_start=3\): give a function"):
        LambdaCallback(on_fit_start=3)
