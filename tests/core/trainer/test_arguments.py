"""Every Trainer argument is checked when the Trainer is built: a bad value is an error naming it, never a default."""

from __future__ import annotations

import logging
import math
from pathlib import Path
from typing import Any

import pytest

import torchplug
from tests.core.conftest import LogRecords
from tests.core.trainer.models import BlobData, Classifier, quiet


def _case(kwargs: dict[str, Any], *expected: Any) -> Any:
    """One parametrized case, its id written as the arguments are (``gradient_clip_val=-1.0``)."""
    return pytest.param(kwargs, *expected, id=",".join(f"{k}={v!r}" for k, v in kwargs.items()) or "defaults")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        _case(
            {"gradient_clip_val": -1.0}, "gradient_clip_val=-1.0 is not valid: a clipping threshold must be a positive"
        ),
        _case({"gradient_clip_val": math.nan}, "gradient_clip_val=nan is not valid"),
        _case({"gradient_clip_val": math.inf}, "gradient_clip_val=inf is not valid"),
        _case({"gradient_clip_val": "1"}, "gradient_clip_val='1' is not valid: give a positive number"),
        _case({"gradient_clip_val": True}, "gradient_clip_val=True is not valid"),
        _case({"gradient_clip_algorithm": "max"}, "gradient_clip_algorithm='max': choose 'norm' or 'value'."),
        _case({"gradient_clip_algorithm": 2}, "gradient_clip_algorithm=2: choose 'norm' or 'value'."),
        _case({"min_epochs": -3}, "min_epochs=-3 is not valid: give an int >= 0"),
        _case({"min_steps": "x"}, "min_steps='x' is not valid: give an int >= 0"),
        _case({"max_epochs": -2}, "max_epochs=-2 is not valid"),
        _case({"max_epochs": 2.5}, "max_epochs=2.5 is not valid"),
        _case({"max_steps": 0}, "max_steps=0 is not valid"),
        _case({"max_steps": True}, "max_steps=True is not valid"),
        _case({"fast_dev_run": 2.7}, "fast_dev_run=2.7 is not valid: give True, False or a positive int"),
        _case({"fast_dev_run": -1}, "fast_dev_run=-1 is not valid"),
        _case({"inference_mode": "x"}, "inference_mode='x': choose True, False."),
        _case({"use_distributed_sampler": 1}, "use_distributed_sampler=1: choose True, False."),
        _case({"enable_checkpointing": "yes"}, "enable_checkpointing='yes': choose True, False."),
        _case({"enable_progress_bar": 3}, "enable_progress_bar=3: choose True, False."),
        _case(
            {"limit_train_batches": -1}, "limit_train_batches=-1: give an int (batches) or a float between 0.0 and 1.0."
        ),
        _case({"limit_val_batches": 1.5}, "limit_val_batches=1.5: a float is a fraction of the batches, at most 1.0."),
        _case({"limit_test_batches": "all"}, "limit_test_batches='all'"),
        _case({"limit_predict_batches": math.nan}, "limit_predict_batches=nan"),
        _case({"val_check_interval": 0.0}, "val_check_interval=0.0 is not valid"),
        _case({"val_check_interval": -2}, "val_check_interval=-2 is not valid"),
        _case({"check_val_every_n_epoch": 0}, "check_val_every_n_epoch=0 is not valid"),
        _case({"num_sanity_val_steps": -2}, "num_sanity_val_steps=-2: give an int >= 0, or -1 for all batches."),
        _case({"log_every_n_steps": 0}, "log_every_n_steps=0 is not valid"),
        _case({"accumulate_grad_batches": 1.5}, "accumulate_grad_batches=1.5 is not valid: give a positive int."),
        _case({"num_nodes": 0}, "num_nodes=0 is not valid"),
        _case({"num_nodes": "2"}, "num_nodes='2' is not valid"),
        _case({"deterministic": 1}, "deterministic=1: choose True, False or 'warn'."),
        _case({"nonfinite_loss": "warn"}, "nonfinite_loss='warn': choose 'raise'"),
        _case({"default_root_dir": 3}, "default_root_dir=3 is not valid: give a directory path or URL"),
        _case({"default_root_dir": ""}, "default_root_dir='' is not valid"),
    ],
)
def test_a_bad_value_is_refused_at_construction_naming_it(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError) as info:
        torchplug.Trainer(**quiet(**kwargs))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("kwargs", "attribute", "expected"),
    [
        _case({"gradient_clip_val": 0}, "gradient_clip_val", None),
        _case({"gradient_clip_val": 2}, "gradient_clip_val", 2.0),
        _case({"gradient_clip_val": 1, "gradient_clip_algorithm": "VALUE"}, "gradient_clip_algorithm", "value"),
        _case({"gradient_clip_algorithm": None}, "gradient_clip_algorithm", "norm"),
        _case({"fast_dev_run": True}, "fast_dev_run", 1),
        _case({"nonfinite_loss": "Skip"}, "nonfinite_loss", "skip"),
        _case({}, "nonfinite_loss", "raise"),
        _case({"default_root_dir": Path("/some/where")}, "default_root_dir", "/some/where"),
        _case({"default_root_dir": "memory://runs"}, "default_root_dir", "memory://runs"),
    ],
)
def test_good_values_are_normalised(kwargs: dict[str, Any], attribute: str, expected: Any) -> None:
    assert getattr(torchplug.Trainer(**quiet(**kwargs)), attribute) == expected


def test_a_default_root_dir_that_is_a_file_is_refused(tmp_path: Path) -> None:
    taken = tmp_path / "taken"
    taken.write_text("")
    with pytest.raises(torchplug.MisconfigurationError, match=r"default_root_dir='.*taken' is a file"):
        torchplug.Trainer(default_root_dir=taken, logger=False)


def test_devices_minus_one_on_the_cpu_is_refused_as_the_guide_says() -> None:
    """docs/guides/backends.md: -1 is all devices; on the CPU, where devices are processes, give a count."""
    with pytest.raises(torchplug.MisconfigurationError) as info:
        torchplug.Trainer(**quiet(accelerator="cpu", devices=-1))
    assert str(info.value) == (
        "devices=-1 is not valid with the CPU accelerator: give the number of processes, a positive int such as "
        "devices=2."
    )
    guide = (Path(__file__).parents[3] / "docs" / "guides" / "backends.md").read_text()
    assert '# 4, -1 (all devices; on the CPU give a count of processes), "0,2", [0, 2]' in guide


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        _case({"min_epochs": 5, "max_epochs": 2}, "min_epochs=5 is more than max_epochs=2: training stops at max_"),
        _case({"min_steps": 100, "max_steps": 10}, "min_steps=100 is more than max_steps=10: training stops at max_"),
        _case({"gradient_clip_algorithm": "value"}, "gradient_clip_algorithm='value' has no effect: gradient_clip_val"),
    ],
)
def test_a_minimum_above_its_maximum_is_announced(kwargs: dict[str, Any], message: str) -> None:
    """As in Lightning the maximum wins; the minimum had no effect without a word."""
    with pytest.warns(UserWarning, match=message):
        torchplug.Trainer(**quiet(**kwargs))


def _said(argument: str, meaning: str) -> str:
    """The info line of ``Trainer(argument)``, as Lightning words it (users' tests match it)."""
    return f"`Trainer({argument})` was configured so {meaning}"


def _dev_run(batches: int) -> str:
    return (
        f"Running in `fast_dev_run` mode: will run the requested loop using {batches} batch(es). Logging and "
        "checkpointing is suppressed."
    )


ONE_TRAIN = _said("limit_train_batches=1", "1 batch per epoch will be used.")
ONE_TEST = _said("limit_test_batches=1", "1 batch will be used.")


@pytest.mark.parametrize(
    ("kwargs", "said"),
    [
        _case({"limit_train_batches": 1}, [ONE_TRAIN]),
        _case({"limit_val_batches": 1}, [_said("limit_val_batches=1", "1 batch will be used.")]),
        _case({"limit_test_batches": 1}, [ONE_TEST]),
        _case({"limit_predict_batches": 1}, [_said("limit_predict_batches=1", "1 batch will be used.")]),
        _case({"limit_train_batches": 1.0},
              [_said("limit_train_batches=1.0", "100% of the batches per epoch will be used.")]),
        _case({"limit_test_batches": 1.0}, [_said("limit_test_batches=1.0", "100% of the batches will be used.")]),
        _case({"val_check_interval": 1}, [_said("val_check_interval=1", "validation will run after every batch.")]),
        _case({"val_check_interval": 1.0},
              [_said("val_check_interval=1.0", "validation will run at the end of the training epoch.")]),
        _case({"limit_train_batches": 1, "limit_val_batches": 1},
              [ONE_TRAIN, _said("limit_val_batches=1", "1 batch will be used.")]),
        _case({"fast_dev_run": True, "limit_train_batches": 1}, [_dev_run(1)]),
        _case({"fast_dev_run": 3}, [_dev_run(3)]),
        _case({"overfit_batches": 1, "limit_test_batches": 1}, [ONE_TEST]),
        _case({"limit_train_batches": 2, "limit_val_batches": 0.5, "val_check_interval": 0.5}, []),
        _case({}, []),
    ],
)  # fmt: skip
def test_a_limit_of_one_batch_or_all_of_them_is_spelled_out(
    kwargs: dict[str, Any], said: list[str], torchplug_log: LogRecords
):
    # 1 and 1.0 differ only by their type: the Trainer says which one it read, at the info level.
    torchplug.Trainer(**quiet(**kwargs))
    lines = [m for m in torchplug_log.messages(logging.INFO) if "was configured so" in m or "`fast_dev_run` mode" in m]
    assert lines == said


def test_the_limits_are_spelled_out_once_per_trainer(torchplug_log: LogRecords):
    trainer = torchplug.Trainer(**quiet(limit_train_batches=1, max_epochs=2))
    model, data = Classifier(), BlobData(n=64)
    trainer.fit(model, datamodule=data)
    trainer.validate(model, datamodule=data)
    assert [m for m in torchplug_log.messages(logging.INFO) if "was configured so" in m] == [ONE_TRAIN]
