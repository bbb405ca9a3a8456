"""The Logger base class: where metrics and hyperparameters go."""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from typing_extensions import Self, override

from torchplug.utilities.annotations import RealSignature

if TYPE_CHECKING:
    from argparse import Namespace

    from torchplug.callbacks.model_checkpoint import ModelCheckpoint

__all__ = ["DummyExperiment", "DummyLogger", "Logger", "convert_params", "flatten_params", "metric_value"]


class Logger(ABC):
    """Receives metrics and hyperparameters; the Trainer calls it from global rank 0 only.

    A logger is also a plugin kind: a package registers its class in the ``torchplug_register_loggers``
    hook, and users name it (``Trainer(logger="mlflow")``, ``--trainer.logger=mlflow``). The Trainer
    then creates it with :meth:`for_trainer`.
    """

    #: ``inspect.signature`` of torchplug's subclasses shows real types (utilities/annotations.py).
    __signature__ = RealSignature()

    @classmethod
    def for_trainer(cls, default_root_dir: str, **init_params: Any) -> Self:
        """Create the logger that ``Trainer(logger="<name>")`` asks for, by its registry name.

        The default passes ``save_dir=default_root_dir`` when ``__init__`` takes a ``save_dir``
        that ``init_params`` (the registered ones) do not set, so that named loggers write under
        the Trainer's ``default_root_dir`` as its default logger does. Override it when the
        Trainer's directory means something else to your logger (a tracking store's folder).

        Args:
            default_root_dir: The Trainer's ``default_root_dir``.
            **init_params: The params registered with the name.
        """
        if "save_dir" not in init_params and "save_dir" in inspect.signature(cls).parameters:
            init_params["save_dir"] = default_root_dir
        return cls(**init_params)

    @property
    @abstractmethod
    def name(self) -> str:
        """The experiment's name."""

    @property
    @abstractmethod
    def version(self) -> str | int:
        """The run's version within the experiment."""

    @property
    def save_dir(self) -> str | None:
        """The root directory the logger writes under, if any."""
        return None

    @property
    def log_dir(self) -> str | None:
        """This run's directory (checkpoints go in ``<log_dir>/checkpoints`` by default), if any."""
        return None

    def sibling_log_dirs(self) -> list[str]:
        """The run directories of the experiment's other versions, which exist now; the default: none.

        A logger that gives every run of an experiment its own directory (``version_<n>``) returns
        the others: ``fit(ckpt_path="auto")`` (and the resume of a restarted job) looks for
        checkpoints in their ``checkpoints`` folders too, since a restarted run logs into a new
        version.
        """
        return []

    @abstractmethod
    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        """Record ``metrics`` (name to number) at ``step``."""

    def log_hyperparams(self, params: Mapping[str, Any]) -> None:
        """Record the run's hyperparameters."""

    def log_graph(self, model: Any, input_array: Any = None) -> None:
        """Record ``model``'s computation graph, for trackers that show one; the default does nothing.

        The Trainer calls it on global rank 0 when ``fit`` starts, with the module being fitted.

        Args:
            model: The module.
            input_array: An input for ``model``'s ``forward``; None: its ``example_input_array``.
        """

    def after_save_checkpoint(self, checkpoint_callback: ModelCheckpoint) -> None:
        """Called on global rank 0 after ``checkpoint_callback`` wrote a checkpoint (its paths are up to date).

        A tracker that stores checkpoints as artifacts reads ``checkpoint_callback.best_k_models``,
        ``last_model_path`` and ``best_model_path`` here. The default does nothing.
        """

    def save(self) -> None:
        """Flush what was recorded so far to storage."""

    def finalize(self, status: str) -> None:
        """Called once at the end of a run (``status``: ``"success"``, ``"failed"`` or ``"interrupted"``)."""
        self.save()


class DummyExperiment:
    """An experiment that records nothing: any method called on it (``add_image``, ``log``...) does nothing.

    It is what :attr:`DummyLogger.experiment` returns, so that code written for a tracker's own
    object (``self.logger.experiment.add_histogram(...)``) runs unchanged where nothing is logged.
    Indexing it (``experiment[0]``) gives it back.
    """

    def _nothing(self, *args: Any, **kwargs: Any) -> None:
        """Accept any call, do nothing."""

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):  # pickle and copy ask for protocol methods: answer as a plain object does
            raise AttributeError(name)
        return self._nothing

    def __getitem__(self, index: Any) -> DummyExperiment:
        return self

    def __setitem__(self, index: Any, value: Any) -> None:
        pass


class DummyLogger(Logger):
    """A logger that records nothing, for runs that must write nothing but run the user's logging code.

    ``Trainer(fast_dev_run=...)`` puts one in place of the loggers it was given (none for
    ``logger=False``): ``trainer.logger`` is not None, so ``self.logger.experiment.add_image(...)``
    and ``self.logger.log_metrics(...)`` run, and nothing is written. Any method called on it, or on
    its :attr:`experiment`, does nothing; ``name`` and ``version`` are empty strings.
    """

    def __init__(self) -> None:
        self._experiment = DummyExperiment()

    @property
    def experiment(self) -> DummyExperiment:
        """An experiment that accepts any method call and does nothing."""
        return self._experiment

    @property
    @override
    def name(self) -> str:
        """An empty string: there is no experiment."""
        return ""

    @property
    @override
    def version(self) -> str:
        """An empty string: there is no run directory."""
        return ""

    @override
    def log_metrics(self, *args: Any, **kwargs: Any) -> None:
        """Record nothing."""

    @override
    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:
        """Record nothing."""

    def __getitem__(self, index: int) -> DummyLogger:
        # Code written for a list of loggers (self.logger[0].experiment...) gets this one back.
        return self

    def __getattr__(self, name: str) -> Callable[..., None]:
        if name.startswith("__"):  # pickle (ddp_spawn sends the Trainer) and copy ask for protocol methods
            raise AttributeError(name)
        return self._experiment._nothing


def convert_params(params: Mapping[str, Any] | Namespace | None) -> dict[str, Any]:
    """Hyperparameters as a dict: a mapping copied, an argparse ``Namespace``'s attributes, None as no parameter.

    For a logger's ``log_hyperparams``, which users call with any of the three.

    Raises:
        TypeError: ``params`` is none of them (the message names its type).
    """
    if params is None:
        return {}
    if isinstance(params, Mapping):
        return dict(params)
    from argparse import Namespace  # only for the rare Namespace: argparse is not imported otherwise

    if isinstance(params, Namespace):
        return vars(params).copy()
    raise TypeError(
        f"log_hyperparams() takes a dict or an argparse Namespace, got {type(params).__name__}. Hint: pass a dict "
        "of names to values."
    )


def flatten_params(params: Mapping[str, Any], parent: str = "") -> dict[str, Any]:
    """Nested hyperparameters as one level, keys joined by ``/`` (``{"opt": {"lr": 1}}`` → ``{"opt/lr": 1}``).

    For loggers whose tracker takes flat parameters (TensorBoard's hparams, MLflow's params).
    """
    flat: dict[str, Any] = {}
    for key, value in params.items():
        name = f"{parent}/{key}" if parent else str(key)
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, name))
        else:
            flat[name] = value
    return flat


def metric_value(value: Any) -> float:
    """A logged metric as a Python float: a one-element tensor through ``.item()``, a number as it is."""
    return float(value.item()) if hasattr(value, "item") else float(value)
