"""``torchplug.Module``: a ``torch.nn.Module`` that knows how to train, validate, test and predict."""

from __future__ import annotations

import contextlib
import copy
import inspect
import os
import sys
import warnings
from collections.abc import Callable, Generator, Iterable, Mapping
from typing import TYPE_CHECKING, Any, cast

import torch

from torchplug.core.hparams import AttributeDict, collect_init_args, split_unsafe

if TYPE_CHECKING:
    from torchplug.trainer.metrics import MetricStore
    from torchplug.trainer.trainer import Trainer

__all__ = ["Module"]


def _is_metric_collection(value: Any) -> bool:
    torchmetrics = sys.modules.get("torchmetrics")
    return torchmetrics is not None and isinstance(value, torchmetrics.MetricCollection)


class Module(torch.nn.Module):
    """Your model, its steps, and its optimizers, in one class.

    Implement ``training_step`` and ``configure_optimizers``; add ``validation_step``,
    ``test_step`` and ``predict_step`` as needed. Every ``on_*`` hook is optional.

    Example:
        >>> class Classifier(torchplug.Module):
        ...     def __init__(self, lr=0.1):
        ...         super().__init__()
        ...         self.save_hyperparameters()
        ...         self.net = torch.nn.Linear(64, 10)
        ...     def training_step(self, batch, batch_idx):
        ...         x, y = batch
        ...         loss = torch.nn.functional.cross_entropy(self.net(x), y)
        ...         self.log("train_loss", loss, prog_bar=True)
        ...         return loss
        ...     def configure_optimizers(self):
        ...         return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)
    """

    # Properties that TorchScript must not compile (they reach the Trainer, which is not scriptable).
    __jit_unused_properties__: list[str] = [
        "trainer",
        "device",
        "dtype",
        "global_step",
        "current_epoch",
        "global_rank",
        "local_rank",
        "logger",
        "loggers",
        "hparams",
        "hparams_initial",
        "example_input_array",
    ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._trainer: Trainer | None = None
        #: The metric store of the run in progress, handed over by the Trainer (None outside a run).
        self._results: MetricStore | None = None
        #: The optimizers ``optimizers()`` returns in manual optimization, handed over by the Trainer.
        self._step_optimizers: list[Any] = []
        #: ``manual_backward`` with the backward hooks around it, handed over by the Trainer (None: no hooks).
        self._manual_backward: Callable[..., None] | None = None
        self._hparams = AttributeDict()
        self._log_warned = False
        #: Set to False to step the optimizers yourself in ``training_step`` (see :meth:`manual_backward`).
        self.automatic_optimization = True
        #: Whether resuming (``fit(ckpt_path=...)``) requires the checkpoint's keys to match the module's exactly.
        self.strict_loading = True
        self._example_input_array: Any = None
        self._jit_is_scripting = False  # TorchScript reads every attribute: `trainer` must not raise meanwhile
        self._hparams_initial = AttributeDict()
        self._param_requires_grad_state: dict[torch.nn.Parameter, bool] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> Module:
        """A deep copy of the layers, parameters, buffers and hyperparameters, detached from any Trainer run.

        The copy has no Trainer, no metric store and no optimizers (copying them would copy the
        whole run); attach it to a Trainer by fitting it. The weight-averaging callbacks rely on it.
        """
        memo[id(self._trainer)] = None
        memo[id(self._results)] = None
        memo[id(self._step_optimizers)] = []
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = copy.deepcopy(value, memo)
        return new

    # -- the steps: override these ------------------------------------------------------------

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        """Compute and return the loss of one training batch (a tensor, or a dict with ``"loss"``).

        Return None to skip this batch's optimizer step.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement training_step(batch, batch_idx) to be fit.")

    def validation_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluate one validation batch; log metrics with :meth:`log` (averaged over the epoch)."""

    def test_step(self, batch: Any, batch_idx: int) -> Any:
        """Evaluate one test batch; log metrics with :meth:`log`."""

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        """Return the prediction for one batch. Default: ``self(batch)``."""
        return self(batch)

    def configure_optimizers(self) -> Any:
        """Return the optimizer(s) and learning-rate scheduler(s).

        Accepted forms: an optimizer; a list of optimizers; ``([optimizers], [schedulers])``; a dict
        ``{"optimizer": opt, "lr_scheduler": sched}`` or ``{"optimizer": opt, "lr_scheduler":
        {"scheduler": sched, "interval": "step"|"epoch", "frequency": 1, "monitor": "val_loss"}}``;
        or a list of such dicts.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement configure_optimizers() to be fit.")

    def configure_callbacks(self) -> Any:
        """Callbacks this model always needs; they are added to (and replace same-type) Trainer callbacks."""
        return []

    # -- the trainer it is attached to ----------------------------------------------------------

    @property
    def trainer(self) -> Trainer:
        """The Trainer running this module (an error outside ``fit``/``validate``/``test``/``predict``)."""
        if self._trainer is None and not self._jit_is_scripting:
            raise RuntimeError(f"{type(self).__name__} is not attached to a Trainer; call trainer.fit(model) first.")
        return cast("Trainer", self._trainer)  # None only while TorchScript inspects the module

    @trainer.setter
    def trainer(self, trainer: Trainer | None) -> None:
        """Attach this module, and every ``Module`` among its direct children (recursively), to ``trainer``.

        ``fit``/``validate``/``test``/``predict`` attach the module they run; set it yourself to
        use a module's Trainer-dependent properties outside a run, or ``None`` to detach it.
        """
        for child in self.children():
            if isinstance(child, Module):
                child.trainer = trainer
        self._trainer = trainer

    @property
    def device(self) -> torch.device:
        """The device the parameters live on."""
        if self._trainer is not None:
            return self._trainer.strategy.root_device
        for param in self.parameters():
            return param.device
        return torch.device("cpu")

    @property
    def global_step(self) -> int:
        """Optimizer steps taken so far (0 outside fit)."""
        return self._trainer.global_step if self._trainer is not None else 0

    @property
    def current_epoch(self) -> int:
        """The epoch in progress (0 outside fit)."""
        return self._trainer.current_epoch if self._trainer is not None else 0

    @property
    def global_rank(self) -> int:
        """This process's rank among all processes."""
        return self._trainer.global_rank if self._trainer is not None else 0

    @property
    def local_rank(self) -> int:
        """This process's rank on its node."""
        return self._trainer.local_rank if self._trainer is not None else 0

    @property
    def logger(self) -> Any:
        """The Trainer's first logger, or None."""
        return self._trainer.logger if self._trainer is not None else None

    @property
    def loggers(self) -> list[Any]:
        """The Trainer's loggers (empty without a Trainer or with ``logger=False``)."""
        return self._trainer.loggers if self._trainer is not None else []

    # -- logging ----------------------------------------------------------------------------------

    def log(
        self,
        name: str,
        value: Any,
        prog_bar: bool = False,
        logger: bool | None = None,
        on_step: bool | None = None,
        on_epoch: bool | None = None,
        reduce_fx: str | Callable[..., Any] = "mean",
        enable_graph: bool = False,
        sync_dist: bool = False,
        sync_dist_group: Any | None = None,
        add_dataloader_idx: bool = True,
        batch_size: int | None = None,
        metric_attribute: str | None = None,
        rank_zero_only: bool = False,
    ) -> None:
        """Record a metric: for the loggers, the progress bar, and callbacks such as ModelCheckpoint.

        Call it from the training, validation and test steps and the hooks around them.

        Args:
            name: The metric's name (``"val_acc"``).
            value: A number, a one-element tensor, or a torchmetrics ``Metric`` (an attribute of this
                module): its step value is what its last ``forward`` returned, its epoch value
                ``compute()`` (synchronised over the processes by torchmetrics), and it is
                ``reset()`` at the end of each epoch or evaluation run.
            prog_bar: Show it in the progress bar.
            logger: Send it to the loggers (None: True).
            on_step: Record the value of every step. Default: True in training batches, else False.
            on_epoch: Record the epoch's aggregate. Default: False in training batches, else True.
                With both, the loggers get ``name_step`` and ``name_epoch``.
            reduce_fx: How the epoch aggregate is formed: ``"mean"`` (weighted by batch size),
                ``"sum"``, ``"max"`` or ``"min"``, or ``torch.mean``, ``torch.sum``, ``torch.max``,
                ``torch.min``.
            enable_graph: Keep the value attached to the autograd graph (default: detached).
            sync_dist: Reduce the value over all processes (per step, or at epoch end for the aggregate).
            sync_dist_group: The process group to reduce over (default: all processes).
            add_dataloader_idx: With several validation or test dataloaders, append
                ``/dataloader_idx_N`` to the name (False: give each dataloader its own names).
            batch_size: The weight of this value in the epoch mean; inferred from the batch when None.
            metric_attribute: The name of the attribute holding a logged torchmetrics ``Metric``
                (found by itself when the Metric is a direct or nested attribute).
            rank_zero_only: The value is logged from global rank 0 only: it is never synchronised
                (``sync_dist`` is ignored), and other ranks cannot monitor it.
        """
        results = self._results
        if results is None:
            if not self._log_warned:
                self._log_warned = True
                warnings.warn(
                    f"{type(self).__name__}.log({name!r}) was called outside a Trainer run; the value is ignored.",
                    stacklevel=2,
                )
            return
        # One tuple in the order of torchplug.trainer.metrics.LOG_OPTIONS: a repeated call is recognised by it.
        options = (
            prog_bar,
            logger is not False,
            on_step,
            on_epoch,
            reduce_fx,
            enable_graph,
            sync_dist,
            sync_dist_group,
            metric_attribute,
            rank_zero_only,
        )
        results.log(name, value, options, add_dataloader_idx, batch_size)

    def log_dict(self, metrics: Mapping[str, Any], **kwargs: Any) -> None:
        """Call :meth:`log` for each item of ``metrics`` with the same options.

        ``metrics`` may be a dict or a torchmetrics ``MetricCollection`` (each of its metrics is
        logged under its name in the collection).
        """
        if _is_metric_collection(metrics):  # MetricCollection.items takes these arguments (a Mapping's does not)
            items = cast(Any, metrics).items(keep_base=False, copy_state=False)
        else:
            items = metrics.items()
        for name, value in items:
            self.log(name, value, **kwargs)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on global rank 0 only."""
        if self.global_rank == 0:
            print(*args, **kwargs)

    # -- hyperparameters --------------------------------------------------------------------------

    def save_hyperparameters(self, *args: Any, ignore: Iterable[str] | str = (), logger: bool = True) -> None:
        """Store the ``__init__`` arguments in :attr:`hparams`, the checkpoints, and the loggers.

        Call it inside ``__init__``. ``save_hyperparameters()`` keeps every argument;
        ``save_hyperparameters("lr", "hidden")`` only those; a dict is taken as it is.
        Values that are not plain data (a module, a dataset) are left out of checkpoints with a
        warning: list them in ``ignore`` and pass them again to :meth:`load_from_checkpoint`.
        """
        frame = inspect.currentframe()
        assert frame is not None and frame.f_back is not None
        ignored = (ignore,) if isinstance(ignore, str) else tuple(ignore)
        values = collect_init_args(frame.f_back, self, args, ignored)
        self._hparams = AttributeDict(values)
        self._hparams_initial = copy.deepcopy(self._hparams)
        self._hparams_for_checkpoint = split_unsafe(values, type(self).__name__)
        self._log_hyperparams = logger

    @property
    def hparams(self) -> AttributeDict:
        """The hyperparameters saved with :meth:`save_hyperparameters` (attribute or key access)."""
        return self._hparams

    @property
    def hparams_initial(self) -> AttributeDict:
        """A copy of the hyperparameters as :meth:`save_hyperparameters` saved them, unchanged by later edits."""
        return copy.deepcopy(self._hparams_initial)

    @property
    def example_input_array(self) -> Any:
        """An example input of ``forward`` (a tensor, or a tuple of them), for the model summary and exports.

        Set it in ``__init__``: ``self.example_input_array = torch.randn(1, 64)``. The model summary
        then shows each layer's input and output sizes; :meth:`to_onnx` and :meth:`to_torchscript`
        (``method="trace"``) use it when given no input.
        """
        return self._example_input_array

    @example_input_array.setter
    def example_input_array(self, example: Any) -> None:
        self._example_input_array = example

    @property
    def dtype(self) -> torch.dtype:
        """The dtype of the first floating-point parameter (torch's default dtype when there is none)."""
        for param in self.parameters():
            if param.is_floating_point():
                return param.dtype
        return torch.get_default_dtype()

    @classmethod
    def load_from_checkpoint(
        cls,
        checkpoint_path: str,
        map_location: Any = None,
        strict: bool | None = None,
        weights_only: bool = True,
        **kwargs: Any,
    ) -> Module:
        """Build the module from a checkpoint's hyperparameters (updated by ``kwargs``) and load its weights.

        Args:
            checkpoint_path: A local path or fsspec URL: a checkpoint file, or a sharded checkpoint directory.
            map_location: Where to put the tensors (as in ``torch.load``); default: the CPU.
            strict: Require the checkpoint's keys to match the module's exactly; None (the default, as in
                Lightning): the module's ``strict_loading`` (True unless the module sets it). With False,
                the keys that do not match are named in a warning.
            weights_only: Refuse anything but tensors and plain data (pass False only for files you trust).
            **kwargs: Init arguments that replace the saved ones, or that were not saved. One that is not an
                argument of ``__init__`` (a class without ``**kwargs``) is left out, with a warning naming it.
        """
        from torchplug.io._formats import read_weights
        from torchplug.trainer.checkpoint_layout import check_checkpoint

        path = os.fspath(checkpoint_path)
        # A file, or a sharded checkpoint directory (its shards joined, its optimizer states left out).
        checkpoint = check_checkpoint(read_weights(path, map_location=map_location, weights_only=weights_only), path)
        if strict is not None and not isinstance(strict, bool):
            raise TypeError(
                f"strict={strict!r} is not valid: give True, False, or None for the module's strict_loading. "
                "Hint: write the bool itself, not a string."
            )
        saved = dict(checkpoint.get("hyper_parameters") or {})
        init_args = {**saved, **kwargs}
        parameters = inspect.signature(cls.__init__).parameters.values()
        if not any(p.kind is p.VAR_KEYWORD for p in parameters):
            names = {p.name for p in parameters} - {"self"}
            unknown_saved = [key for key in saved if key not in names and key not in kwargs]
            if unknown_saved:
                warnings.warn(
                    f"{cls.__name__}.load_from_checkpoint({path!r}): the saved hyperparameter(s) {unknown_saved} are "
                    f"not arguments of {cls.__name__}.__init__ and are left out.",
                    stacklevel=2,
                )
            unknown_given = [key for key in kwargs if key not in names]
            if unknown_given:
                warnings.warn(
                    f"{cls.__name__}.load_from_checkpoint({path!r}, {', '.join(f'{k}=...' for k in unknown_given)}): "
                    f"{unknown_given} are not arguments of {cls.__name__}.__init__, so they are left out and change "
                    f"nothing. Hint: {cls.__name__}.__init__ takes {', '.join(sorted(names)) or 'no arguments'}.",
                    stacklevel=2,
                )
            init_args = {key: value for key, value in init_args.items() if key in names}
        module = cls(**init_args)
        module.on_load_checkpoint(checkpoint)
        strict = module.strict_loading if strict is None else strict
        try:
            result = module.load_state_dict(checkpoint["state_dict"], strict=strict)
        except RuntimeError as exc:
            from torchplug.trainer.checkpoint_connector import weights_mismatch

            raise weights_mismatch(str(path), cls.__name__, exc) from exc
        if not strict and (result.missing_keys or result.unexpected_keys):
            warnings.warn(
                f"{cls.__name__}.load_from_checkpoint({path!r}, strict=False): keys that do not match were skipped: "
                f"missing from the checkpoint (left as initialised): {result.missing_keys or 'none'}; in the "
                f"checkpoint but not in the module (ignored): {result.unexpected_keys or 'none'}.",
                stacklevel=2,
            )
        return module

    # -- helpers for steps --------------------------------------------------------------------

    def optimizers(self) -> Any:
        """The optimizer(s) from :meth:`configure_optimizers`; one optimizer when there is only one.

        With ``automatic_optimization = False`` their ``step()`` goes through the strategy and
        precision plugins (loss scaling included).
        """
        optimizers = self._step_optimizers or self.trainer.optimizers
        return optimizers[0] if len(optimizers) == 1 else optimizers

    def lr_schedulers(self) -> Any:
        """The scheduler(s) from :meth:`configure_optimizers`; one when there is only one, None when none."""
        schedulers = [config.scheduler for config in self.trainer.lr_scheduler_configs]
        if not schedulers:
            return None
        return schedulers[0] if len(schedulers) == 1 else schedulers

    def manual_backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward for manual optimization: goes through the precision plugin (loss scaling) and strategy.

        Extra arguments (``retain_graph=True``...) reach ``loss.backward``. ``on_before_backward``
        and ``on_after_backward`` run around it, and an overridden :meth:`backward` computes the
        gradients, as in automatic optimization.
        """
        backward = self._manual_backward
        if backward is not None:
            backward(loss, *args, **kwargs)
        else:
            self.trainer.strategy.backward(loss, None, *args, **kwargs)

    def clip_gradients(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip the gradients of ``optimizer``'s parameters through the precision plugin (unscaled first).

        Args:
            optimizer: Whose parameters' gradients to clip.
            gradient_clip_val: The maximum norm (or value); None or 0 does nothing.
            gradient_clip_algorithm: ``"norm"`` (default) or ``"value"``.
        """
        if not gradient_clip_val:
            return
        algorithm = gradient_clip_algorithm or "norm"
        if algorithm not in ("norm", "value"):
            raise ValueError(f"gradient_clip_algorithm={algorithm!r} is not valid: choose 'norm' or 'value'.")
        if isinstance(gradient_clip_val, bool) or not isinstance(gradient_clip_val, (int, float)):
            raise TypeError(f"gradient_clip_val={gradient_clip_val!r} is not valid: give a positive number.")
        if not gradient_clip_val > 0 or gradient_clip_val != gradient_clip_val:
            raise ValueError(f"gradient_clip_val={gradient_clip_val!r} is not valid: give a positive number.")
        optimizer = getattr(optimizer, "optimizer", optimizer)  # the step wrapper of manual optimization
        self.trainer.strategy.clip_gradients(optimizer, float(gradient_clip_val), algorithm)

    def toggle_optimizer(self, optimizer: Any) -> None:
        """Let only ``optimizer``'s parameters require gradients; the others' wait for :meth:`untoggle_optimizer`.

        For several optimizers in manual optimization (a GAN's generator and discriminator): the
        backward of one loss then computes no gradient for the other optimizer's parameters.
        """
        optimizer = getattr(optimizer, "optimizer", optimizer)  # the step wrapper of manual optimization
        state: dict[torch.nn.Parameter, bool] = {}
        for other in self.trainer.optimizers:
            for group in other.param_groups:
                for param in group["params"]:
                    if param not in state:
                        state[param] = param.requires_grad
                        param.requires_grad = False
        for group in optimizer.param_groups:
            for param in group["params"]:
                param.requires_grad = state.get(param, True)
        self._param_requires_grad_state = state

    def untoggle_optimizer(self, optimizer: Any) -> None:
        """Give the parameters frozen by :meth:`toggle_optimizer` their ``requires_grad`` back."""
        for param, requires_grad in self._param_requires_grad_state.items():
            param.requires_grad = requires_grad
        self._param_requires_grad_state = {}

    @contextlib.contextmanager
    def toggled_optimizer(self, optimizer: Any) -> Generator[None, None, None]:
        """:meth:`toggle_optimizer` for the block, :meth:`untoggle_optimizer` after it (also on an error)."""
        self.toggle_optimizer(optimizer)
        try:
            yield
        finally:
            self.untoggle_optimizer(optimizer)

    def freeze(self) -> None:
        """Stop gradients for every parameter and put the module in eval mode (for inference or a frozen backbone)."""
        for param in self.parameters():
            param.requires_grad = False
        self.eval()

    def unfreeze(self) -> None:
        """Undo :meth:`freeze`: every parameter requires gradients, and the module is in train mode."""
        for param in self.parameters():
            param.requires_grad = True
        self.train()

    def to_torchscript(
        self,
        file_path: str | os.PathLike[str] | None = None,
        method: str = "script",
        example_inputs: Any = None,
        **kwargs: Any,
    ) -> Any:
        """The module as TorchScript (compiled in eval mode; the module's own mode is kept), saved when given a path.

        Args:
            file_path: Where to save it with ``torch.jit.save`` (a path or fsspec URL); None: not saved.
            method: ``"script"`` (``torch.jit.script``) or ``"trace"`` (``torch.jit.trace``).
            example_inputs: The input to trace with; default :attr:`example_input_array`.
            **kwargs: Passed to ``torch.jit.script`` or ``torch.jit.trace``.
        """
        from torchplug.core import _export

        return _export.to_torchscript(self, file_path, method, example_inputs, **kwargs)

    def to_onnx(self, file_path: str | os.PathLike[str] | None = None, input_sample: Any = None, **kwargs: Any) -> Any:
        """Export the module to ONNX with ``torch.onnx.export`` (in eval mode; needs ``pip install 'core[onnx]'``).

        Args:
            file_path: The ``.onnx`` file to write (None: only return torch's export result).
            input_sample: The input to export with; default :attr:`example_input_array`.
            **kwargs: Passed to ``torch.onnx.export`` (``dynamo=False`` for the TorchScript-based exporter...).
        """
        from torchplug.core import _export

        return _export.to_onnx(self, file_path, input_sample, **kwargs)

    def all_gather(self, data: Any, group: Any | None = None, sync_grads: bool = False) -> Any:
        """Gather ``data`` (a tensor, a number, or a collection of them) from every process.

        Each tensor gains a leading dimension of size world size; on one process it keeps its
        shape. Numbers become tensors on :attr:`device`.

        Args:
            data: What to gather.
            group: The process group to gather over (default: all processes).
            sync_grads: Let gradients flow back through the gather.
        """
        from torchplug.utilities.apply import apply_to_tensors, numbers_to_tensors

        data = numbers_to_tensors(data, self.device)
        strategy = self.trainer.strategy
        if strategy.world_size == 1:
            return data
        return apply_to_tensors(data, lambda t: strategy.all_gather(t, group=group, sync_grads=sync_grads))

    # -- hooks: override any of them --------------------------------------------------------------

    def setup(self, stage: str) -> None:
        """Called at the start of fit, validate, test or predict in every process (``stage``: ``"fit"``...)."""

    def teardown(self, stage: str) -> None:
        """Called at the end of fit, validate, test or predict in every process."""

    def on_fit_start(self) -> None:
        """Called when fit starts, after setup and checkpoint restore."""

    def on_fit_end(self) -> None:
        """Called when fit ends."""

    def on_train_start(self) -> None:
        """Called before the first training epoch."""

    def on_train_end(self) -> None:
        """Called after the last training epoch."""

    def on_train_epoch_start(self) -> None:
        """Called at the start of every training epoch."""

    def on_train_epoch_end(self) -> None:
        """Called at the end of every training epoch (log epoch-level metrics here)."""

    def on_train_batch_start(self, batch: Any, batch_idx: int) -> Any:
        """Called before each training batch. Return -1 to end the epoch now."""

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        """Called after each training batch (after the optimizer step, when one was due)."""

    def on_validation_start(self) -> None:
        """Called when a validation run starts."""

    def on_validation_end(self) -> None:
        """Called when a validation run ends."""

    def on_validation_epoch_start(self) -> None:
        """Called at the start of a validation epoch."""

    def on_validation_epoch_end(self) -> None:
        """Called at the end of a validation epoch (log aggregate metrics here)."""

    def on_validation_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called before each validation batch."""

    def on_validation_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called after each validation batch."""

    def on_test_start(self) -> None:
        """Called when a test run starts."""

    def on_test_end(self) -> None:
        """Called when a test run ends."""

    def on_test_epoch_start(self) -> None:
        """Called at the start of the test epoch."""

    def on_test_epoch_end(self) -> None:
        """Called at the end of the test epoch."""

    def on_test_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called before each test batch."""

    def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called after each test batch."""

    def on_predict_start(self) -> None:
        """Called when a predict run starts."""

    def on_predict_end(self) -> None:
        """Called when a predict run ends."""

    def on_predict_epoch_start(self) -> None:
        """Called at the start of the predict epoch."""

    def on_predict_epoch_end(self) -> None:
        """Called at the end of the predict epoch."""

    def on_predict_batch_start(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called before each predict batch."""

    def on_predict_batch_end(self, outputs: Any, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Called after each predict batch."""

    def on_before_backward(self, loss: torch.Tensor) -> None:
        """Called before ``loss.backward()``."""

    def on_after_backward(self) -> None:
        """Called after backward, before the optimizer step (gradients are available, still scaled)."""

    def on_before_optimizer_step(self, optimizer: torch.optim.Optimizer) -> None:
        """Called before each optimizer step, before gradient clipping (the gradients are unscaled only by then)."""

    def on_before_zero_grad(self, optimizer: torch.optim.Optimizer) -> None:
        """Called before the gradients are reset."""

    def on_validation_model_zero_grad(self) -> None:
        """Called when validation starts inside ``fit`` (not mid-accumulation): frees the gradients' memory."""
        self.zero_grad()

    def on_validation_model_eval(self) -> None:
        """Called when validation starts: puts the model in eval mode."""
        self._model_as_run().eval()

    def on_validation_model_train(self) -> None:
        """Called when validation ends; default: the modes of the submodules are restored as they were."""
        self._model_as_run().train()

    def on_test_model_eval(self) -> None:
        """Called when testing starts: puts the model in eval mode."""
        self._model_as_run().eval()

    def on_test_model_train(self) -> None:
        """Called when testing ends; default: the modes of the submodules are restored as they were."""
        self._model_as_run().train()

    def on_predict_model_eval(self) -> None:
        """Called when predicting starts: puts the model in eval mode."""
        self._model_as_run().eval()

    def _model_as_run(self) -> torch.nn.Module:
        """The model as the strategy runs it (wrapped in DDP...), or this module outside a run."""
        model = self._trainer.model if self._trainer is not None else None
        return model if model is not None else self

    # -- optimization hooks: override to change how the Trainer optimizes ------------------------

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Compute the gradients of ``loss`` (called by the precision plugin, after any loss scaling)."""
        loss.backward(*args, **kwargs)

    def optimizer_step(
        self,
        epoch: int,
        batch_idx: int,
        optimizer: Any,
        optimizer_closure: Callable[[], Any] | None = None,
    ) -> None:
        """Step the optimizer; ``optimizer_closure`` runs ``training_step``, ``zero_grad`` and backward.

        Override it to change the step, for example a learning-rate warm-up::

            def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure):
                optimizer.step(closure=optimizer_closure)
                if self.trainer.global_step < 500:
                    scale = min(1.0, float(self.trainer.global_step + 1) / 500.0)
                    for group in optimizer.param_groups:
                        group["lr"] = scale * self.hparams.lr

        ``optimizer.step`` goes through the strategy and precision plugins. Always pass the closure
        on: without it there is no forward or backward.
        """
        optimizer.step(closure=optimizer_closure)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Reset the gradients (on the first batch of each accumulation window, before backward).

        The default goes through the strategy (``Strategy.zero_grad``), which owns the gradient
        buffers where an engine such as DeepSpeed keeps them.
        """
        trainer = self._trainer
        if trainer is None:
            optimizer.zero_grad()
        else:
            trainer.strategy.zero_grad(optimizer)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Step a learning-rate scheduler (``metric`` is the monitored value for ReduceLROnPlateau, else None)."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip the gradients before each optimizer step (default: the Trainer's ``gradient_clip_val``)."""
        self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_model(self) -> None:
        """Create the layers here to have them built on the device, in the precision's dtype, sharded.

        Called in every process at the start of each run, inside the strategy's and precision's
        init contexts; make it idempotent (it runs again for each ``fit``/``validate``...).
        """

    def configure_sharded_model(self) -> None:
        """The older name of :meth:`configure_model`: an override runs as ``configure_model``, with a warning."""

    # -- data hooks ------------------------------------------------------------------------------

    def prepare_data(self) -> None:
        """Download or write data to disk; called on local rank 0 of each node only. Do not set state here."""

    def train_dataloader(self) -> Any:
        """The training dataloader, when no DataModule or dataloader is given to ``fit``."""
        raise NotImplementedError(f"{type(self).__name__} has no train_dataloader(); define it to fit without data.")

    def val_dataloader(self) -> Any:
        """The validation dataloader(s), when no DataModule or dataloader is given."""
        raise NotImplementedError(f"{type(self).__name__} has no val_dataloader().")

    def test_dataloader(self) -> Any:
        """The test dataloader(s), when no DataModule or dataloader is given."""
        raise NotImplementedError(f"{type(self).__name__} has no test_dataloader().")

    def predict_dataloader(self) -> Any:
        """The predict dataloader(s), when no DataModule or dataloader is given."""
        raise NotImplementedError(f"{type(self).__name__} has no predict_dataloader().")

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch on the host, before it moves to the device (a DataModule's override wins)."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Move a batch to ``device`` (default: every tensor in lists, tuples, dicts and dataclasses)."""
        from torchplug.utilities.apply import move_to_device

        return move_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Change a batch on the device, after the transfer (a DataModule's override wins)."""
        return batch

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Add your own entries to a checkpoint being written (plain data and tensors only)."""

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Read your own entries back from a checkpoint being restored."""
