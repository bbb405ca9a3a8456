"""Finding a hyperparameter (``lr``, ``batch_size``) where users keep it: the module, its hparams, the DataModule."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["get_attr", "has_attr", "set_attr"]


def _owners(module: Module, trainer: Trainer | None) -> list[Any]:
    """Where ``name`` may live, in the order it is looked up: the module, its hparams, the DataModule, its hparams."""
    owners: list[Any] = [module, getattr(module, "hparams", None)]
    datamodule = trainer.datamodule if trainer is not None else None
    if datamodule is not None:
        owners += [datamodule, getattr(datamodule, "hparams", None)]
    return [owner for owner in owners if owner is not None]


def _holds(owner: Any, name: str) -> bool:
    if isinstance(owner, dict):
        return name in owner
    return hasattr(owner, name)


def has_attr(module: Module, name: str, trainer: Trainer | None = None) -> bool:
    """Whether ``name`` is an attribute of the module or the DataModule, or a key of their ``hparams``."""
    return any(_holds(owner, name) for owner in _owners(module, trainer))


def get_attr(module: Module, name: str, trainer: Trainer | None = None) -> Any:
    """The first value of ``name`` found (see :func:`has_attr`).

    Raises:
        AttributeError: Nowhere to be found.
    """
    for owner in _owners(module, trainer):
        if _holds(owner, name):
            return owner[name] if isinstance(owner, dict) else getattr(owner, name)
    raise AttributeError(
        f"{name!r} is neither an attribute nor a hyperparameter of {type(module).__name__} or its DataModule."
    )


def set_attr(module: Module, name: str, value: Any, trainer: Trainer | None = None) -> None:
    """Set ``name`` everywhere it is found (the module and its DataModule may both read it).

    Raises:
        AttributeError: Nowhere to be found.
    """
    found = False
    for owner in _owners(module, trainer):
        if _holds(owner, name):
            found = True
            if isinstance(owner, dict):
                owner[name] = value
            else:
                setattr(owner, name, value)
    if not found:
        raise AttributeError(
            f"{name!r} is neither an attribute nor a hyperparameter of {type(module).__name__} or its DataModule."
        )
