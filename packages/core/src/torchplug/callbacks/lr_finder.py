"""``LearningRateFinder``: run the learning-rate range test when ``fit`` starts, and train with the rate it suggests."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.trainer.states import ExitRun

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer
    from torchplug.tuner.lr_finder import LRFinder

__all__ = ["LearningRateFinder"]


class LearningRateFinder(Callback):
    """Find a learning rate at the start of ``fit`` (see :func:`torchplug.tuner.lr_finder.lr_find`), then train with it.

    ``num_training_steps`` optimizer steps run with the rate growing from ``min_lr`` to
    ``max_lr``; then the model, optimizer, schedulers, loop and random state are put back as they
    were, the suggested rate is written to the module's ``lr`` (or ``learning_rate``, or
    ``attr_name``) and to the optimizer, and the fit proceeds. Call :meth:`lr_find` from another
    hook (and override ``on_fit_start`` to do nothing) to search again later, for example at
    given epochs. :class:`torchplug.tuner.Tuner` runs the same search without training afterwards.

    Example:
        >>> Trainer(callbacks=[LearningRateFinder(num_training_steps=50)])

    Args:
        min_lr: The first learning rate tried.
        max_lr: The last one.
        num_training_steps: Optimizer steps in the search.
        mode: ``"exponential"`` or ``"linear"`` growth.
        early_stop_threshold: Stop when the smoothed loss exceeds this times the best (None: never).
        update_attr: Write the suggestion to the module and the optimizer.
        attr_name: The module's learning-rate attribute (default: ``lr`` or ``learning_rate``).

    Attributes:
        optimal_lr: The :class:`torchplug.tuner.LRFinder` of the last search (None before).
    """

    SUPPORTED_MODES = ("linear", "exponential")

    def __init__(
        self,
        min_lr: float = 1e-8,
        max_lr: float = 1.0,
        num_training_steps: int = 100,
        mode: str = "exponential",
        early_stop_threshold: float | None = 4.0,
        update_attr: bool = True,
        attr_name: str = "",
    ) -> None:
        mode = mode.lower()
        if mode not in self.SUPPORTED_MODES:
            raise MisconfigurationError(f"LearningRateFinder(mode={mode!r}): choose 'exponential' or 'linear'.")
        self._min_lr = min_lr
        self._max_lr = max_lr
        self._num_training_steps = num_training_steps
        self._mode = mode
        self._early_stop_threshold = early_stop_threshold
        self._update_attr = update_attr
        self._attr_name = attr_name
        self._early_exit = False
        self.optimal_lr: LRFinder | None = None

    def lr_find(self, trainer: Trainer, module: Module) -> None:
        """Run the search now (inside ``fit``, once the optimizers exist) and keep its :class:`LRFinder`."""
        from torchplug.tuner.lr_finder import lr_find

        self.optimal_lr = lr_find(
            trainer,
            module,
            min_lr=self._min_lr,
            max_lr=self._max_lr,
            num_training=self._num_training_steps,
            mode=self._mode,
            early_stop_threshold=self._early_stop_threshold,
            update_attr=self._update_attr,
            attr_name=self._attr_name,
        )
        if self._early_exit:
            raise ExitRun

    @override
    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Search before training starts."""
        self.lr_find(trainer, module)

    @override
    def state_dict(self) -> dict[str, Any]:
        """The last search's results (so that they travel with the checkpoint, and back from spawned workers)."""
        finder = self.optimal_lr
        if finder is None:
            return {}
        return {
            "mode": finder.mode,
            "lr_min": finder.lr_min,
            "lr_max": finder.lr_max,
            "num_training": finder.num_training,
            "results": {k: list(v) for k, v in finder.results.items()},
        }

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Bring back a search's results."""
        if not state_dict:
            return
        from torchplug.tuner.lr_finder import LRFinder

        finder = LRFinder(state_dict["mode"], state_dict["lr_min"], state_dict["lr_max"], state_dict["num_training"])
        finder.results = {k: list(v) for k, v in state_dict["results"].items()}
        self.optimal_lr = finder
