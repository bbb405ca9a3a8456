"""Checks of a Logger: created as ``Trainer(logger=NAME)`` creates it, then called as the Trainer calls it.

The shared ``fit`` check (``_checks_training``) trains with ``logger=NAME``; these call the logger
directly, so that a failure points at the one method that broke.
"""

from __future__ import annotations

import pickle
from typing import Any

from torchplug.testing._check import CheckFailed, check
from torchplug.testing._context import Context

#: Hyperparameters of the shapes ``save_hyperparameters()`` produces: numbers, text, lists, nested dicts, None.
HYPERPARAMETERS: dict[str, Any] = {
    "lr": 0.02,
    "layers": [16, 1],
    "optimizer": {"name": "SGD", "momentum": 0.9},
    "dropout": None,
    "use_bias": True,
}


def _create(context: Context) -> Any:
    subject = context.subject
    subject.require_available()
    return subject.load().for_trainer(str(context.workdir), **subject.entry.init_params)


def _where(logger: Any) -> tuple[object, object, object, object]:
    return logger.name, logger.version, logger.save_dir, logger.log_dir


@check(
    "logger",
    "logger_api",
    summary="created by name as the Trainer creates it, it takes hyperparameters, metrics at increasing steps, "
    "save() and finalize('success'), and keeps one name and version throughout",
    fix="implement the Logger base class: name (str), version (str or int, fixed once asked), log_hyperparams() "
    "for nested dicts, lists and None, log_metrics(metrics, step) for floats, save(), finalize(status); "
    "Logger.for_trainer(default_root_dir, **init_params) must build it from its registered params alone",
)
def logger_api(context: Context) -> str:
    logger = _create(context)
    before = _where(logger)
    name, version, save_dir, log_dir = before
    problems = []
    if not isinstance(name, str):
        problems.append(f"name is {name!r}, not a str")
    if not isinstance(version, (str, int)) or isinstance(version, bool):
        problems.append(f"version is {version!r}, not a str or int")
    for label, value in (("save_dir", save_dir), ("log_dir", log_dir)):
        if value is not None and not isinstance(value, str):
            problems.append(f"{label} is {value!r}, not a str or None")
    if problems:
        raise CheckFailed("; ".join(problems))
    logger.log_hyperparams(HYPERPARAMETERS)
    for step in range(3):
        logger.log_metrics({"train_loss": 1.0 / (step + 1), "epoch": 0.0}, step)
    logger.save()
    after = _where(logger)
    logger.finalize("success")
    if after != before:
        raise CheckFailed(f"(name, version, save_dir, log_dir) changed while logging: {before!r} became {after!r}")
    return f"name {name!r}, version {version!r}, log_dir {log_dir!r}"


@check(
    "logger",
    "pickle",
    summary="after logging, the logger survives pickling with the same name and version "
    "(a launching strategy such as ddp_spawn sends the Trainer, loggers included, to its workers)",
    fix="drop unpicklable handles (clients, open files, threads) in __getstate__ and recreate them on first use",
)
def pickled(context: Context) -> str:
    logger = _create(context)
    logger.log_metrics({"train_loss": 1.0}, 0)
    logger.save()
    try:
        copy = pickle.loads(pickle.dumps(logger))
    except Exception as exc:
        raise CheckFailed(
            f"pickling {type(logger).__name__} after logging failed: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        logger.finalize("success")
    if (copy.name, copy.version) != (logger.name, logger.version):
        raise CheckFailed(
            f"the copy is named {copy.name!r} version {copy.version!r}, "
            f"the original {logger.name!r} version {logger.version!r}"
        )
    return f"{type(logger).__name__} pickles as {copy.name!r} version {copy.version!r}"
