"""``BaseFinetuning`` and ``BackboneFinetuning``: freeze parts of a model, unfreeze them into the optimizer later."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

import torch
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_warn

if TYPE_CHECKING:
    from torchplug.core.module import Module
    from torchplug.trainer.trainer import Trainer

__all__ = ["BackboneFinetuning", "BaseFinetuning", "multiplicative"]

Modules = torch.nn.Module | Iterable[Any]
_BatchNorm = torch.nn.modules.batchnorm._BatchNorm


def multiplicative(epoch: int) -> float:
    """The default schedule of :class:`BackboneFinetuning`: the backbone's learning rate doubles every epoch."""
    return 2.0


class BaseFinetuning(Callback):
    """Freeze modules before training, and unfreeze them into the optimizer as training goes.

    Implement :meth:`freeze_before_training` (called at ``setup``, before ``configure_optimizers``)
    and :meth:`finetune_function` (called at the start of every epoch, for every optimizer); the
    static helpers do the work. The parameter groups added on the way are saved in checkpoints
    and put back when a fit resumes, before the optimizer states are loaded.

    Example::

        class Unfreeze(BaseFinetuning):
            def freeze_before_training(self, module):
                self.freeze(module.feature_extractor)

            def finetune_function(self, module, epoch, optimizer):
                if epoch == 10:
                    self.unfreeze_and_add_param_group(module.feature_extractor, optimizer, train_bn=True)

    The model's ``configure_optimizers`` must then give the optimizer only the parameters that
    require gradients: ``Adam(filter(lambda p: p.requires_grad, self.parameters()))``.
    """

    def __init__(self) -> None:
        self._internal_optimizer_metadata: dict[int, list[dict[str, Any]]] = {}
        self._restarting = False
        self._trainer: Trainer | None = None
        self._averaged_by_ddp: set[int] | None = None
        self._unsynced: list[torch.nn.Parameter] = []

    @override
    def state_dict(self) -> dict[str, Any]:
        """Every optimizer's parameter groups, with parameter names in place of the parameters."""
        return {"internal_optimizer_metadata": self._internal_optimizer_metadata}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Put back the parameter groups of the checkpoint's run (now, when the optimizers exist)."""
        self._internal_optimizer_metadata = state_dict.get("internal_optimizer_metadata", state_dict)
        self._restarting = True
        if self._trainer is not None and self._trainer.optimizers:
            self._restore_param_groups(self._trainer)

    @override
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Freeze the modules (:meth:`freeze_before_training`) before the optimizers are made."""
        self._trainer = trainer
        self.freeze_before_training(module)

    @override
    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Put back the parameter groups of a checkpoint loaded before this point; note what DDP averages."""
        self._trainer = trainer
        # DistributedDataParallel averages the gradients of the parameters that required them when it
        # wrapped the model (before this hook): those unfrozen later are averaged here instead.
        wrapped = isinstance(trainer.model, torch.nn.parallel.DistributedDataParallel)
        self._averaged_by_ddp = {id(p) for p in module.parameters() if p.requires_grad} if wrapped else None
        if self._restarting:
            self._restore_param_groups(trainer)

    @override
    def teardown(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Let go of the Trainer."""
        self._trainer = None

    def _restore_param_groups(self, trainer: Trainer) -> None:
        module = trainer.lightning_module
        named = dict(module.named_parameters())
        restored: set[int] = set()
        for index, optimizer in enumerate(trainer.optimizers):
            groups = self._internal_optimizer_metadata.get(index)
            if groups:
                optimizer.param_groups = self._apply_mapping_to_param_groups(groups, named)
                restored.update(id(p) for group in optimizer.param_groups for p in group["params"])
        # freeze_before_training() froze them again at setup; what the optimizer trained when the
        # checkpoint was written trains again.
        for layer in self.flatten_modules(module):
            own = list(layer.parameters(recurse=False))
            if own and all(id(p) in restored for p in own):
                self.make_trainable(layer)
        self._restarting = False

    @override
    def on_train_epoch_start(self, trainer: Trainer, module: Module) -> None:
        """Call :meth:`finetune_function` for every optimizer, and record the groups it added."""
        for index, optimizer in enumerate(trainer.optimizers):
            before = len(optimizer.param_groups)
            self.finetune_function(module, trainer.current_epoch, optimizer)
            self._store(module, index, before, optimizer.param_groups)
        averaged = self._averaged_by_ddp
        self._unsynced = [] if averaged is None else [
            p for p in module.parameters() if p.requires_grad and id(p) not in averaged
        ]  # fmt: skip

    @override
    def on_before_optimizer_step(self, trainer: Trainer, module: Module, optimizer: torch.optim.Optimizer) -> None:
        """Under DDP, average the gradients of the parameters unfrozen after DDP wrapped the model.

        DDP averages only the parameters that required gradients when it wrapped the model; without
        this, the processes would train the unfrozen modules apart. One all-reduce per step, only
        while such parameters exist.
        """
        grads = [p.grad for p in self._unsynced if p.grad is not None]
        if not grads:
            return
        flat = trainer.strategy.reduce(torch.cat([g.reshape(-1) for g in grads]), reduce_op="mean")
        offset = 0
        for grad in grads:
            grad.copy_(flat[offset : offset + grad.numel()].view_as(grad))
            offset += grad.numel()

    def _store(self, module: Module, index: int, before: int, groups: list[dict[str, Any]]) -> None:
        names = {param: name for name, param in module.named_parameters()}
        if index not in self._internal_optimizer_metadata:
            self._internal_optimizer_metadata[index] = self._apply_mapping_to_param_groups(groups, names)
        elif before != len(groups):
            self._internal_optimizer_metadata[index].extend(self._apply_mapping_to_param_groups(groups[before:], names))

    @staticmethod
    def _apply_mapping_to_param_groups(groups: list[dict[str, Any]], mapping: dict[Any, Any]) -> list[dict[str, Any]]:
        return [
            {**{k: v for k, v in g.items() if k != "params"}, "params": [mapping[p] for p in g["params"]]}
            for g in groups
        ]

    # -- override these -------------------------------------------------------------------------

    def freeze_before_training(self, module: Module) -> None:
        """Freeze what must not train at first (called at ``setup``, before ``configure_optimizers``)."""
        raise NotImplementedError(f"{type(self).__name__} must implement freeze_before_training(module).")

    def finetune_function(self, module: Module, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Unfreeze at the right epoch (called at the start of every epoch, for every optimizer)."""
        raise NotImplementedError(f"{type(self).__name__} must implement finetune_function(module, epoch, optimizer).")

    # -- the helpers ----------------------------------------------------------------------------

    @staticmethod
    def flatten_modules(modules: Modules) -> list[torch.nn.Module]:
        """The leaf modules of ``modules`` (a module, a ModuleDict, an iterable) and the parents owning parameters."""
        if isinstance(modules, torch.nn.ModuleDict):
            modules = modules.values()
        if isinstance(modules, Iterable) and not isinstance(modules, torch.nn.Module):
            flat: list[torch.nn.Module] = []
            for item in modules:
                flat.extend(BaseFinetuning.flatten_modules(item))
            candidates: Iterable[torch.nn.Module] = flat
        else:
            candidates = modules.modules()
        return [m for m in candidates if not list(m.children()) or m._parameters]

    @staticmethod
    def filter_params(
        modules: Modules, train_bn: bool = True, requires_grad: bool = True
    ) -> Iterator[torch.nn.Parameter]:
        """The parameters of ``modules`` with this ``requires_grad`` (batch norm's only with ``train_bn``)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and not train_bn:
                continue
            for param in module.parameters(recurse=False):
                if param.requires_grad == requires_grad:
                    yield param

    @staticmethod
    def make_trainable(modules: Modules) -> None:
        """Unfreeze ``modules`` (and let batch norm track running statistics again)."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm):
                module.track_running_stats = True
            for param in module.parameters(recurse=False):
                param.requires_grad = True

    @staticmethod
    def freeze_module(module: torch.nn.Module) -> None:
        """Freeze one module's own parameters (batch norm also stops tracking running statistics)."""
        if isinstance(module, _BatchNorm):
            module.track_running_stats = False
        for param in module.parameters(recurse=False):
            param.requires_grad = False

    @staticmethod
    def freeze(modules: Modules, train_bn: bool = True) -> None:
        """Freeze ``modules``; with ``train_bn`` their batch-norm layers keep training."""
        for module in BaseFinetuning.flatten_modules(modules):
            if isinstance(module, _BatchNorm) and train_bn:
                BaseFinetuning.make_trainable(module)
            else:
                BaseFinetuning.freeze_module(module)

    @staticmethod
    def filter_on_optimizer(optimizer: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter]) -> list[Any]:
        """``params`` that are not in ``optimizer`` already (the others are skipped, with a warning)."""
        present = {id(p) for group in optimizer.param_groups for p in group["params"]}
        kept: list[Any] = []
        skipped: list[Any] = []
        for param in params:
            (skipped if id(param) in present else kept).append(param)
        if skipped:
            rank_zero_warn(
                f"{len(skipped)} parameter(s) to unfreeze are already in the optimizer and were skipped. Hint: build "
                f"the optimizer from the trainable parameters only: {type(optimizer).__name__}(filter(lambda p: "
                "p.requires_grad, self.parameters()), ...)."
            )
        return kept

    @staticmethod
    def unfreeze_and_add_param_group(
        modules: Modules,
        optimizer: torch.optim.Optimizer,
        lr: float | None = None,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
    ) -> None:
        """Unfreeze ``modules`` and add their parameters to ``optimizer`` as a new group.

        Args:
            modules: What to unfreeze.
            optimizer: The optimizer that gets the new group.
            lr: The group's learning rate; None: the first group's divided by ``initial_denom_lr``.
            initial_denom_lr: See ``lr``.
            train_bn: Unfreeze the batch-norm layers too.
        """
        BaseFinetuning.make_trainable(modules)
        base_lr = optimizer.param_groups[0]["lr"] if lr is None else float(lr)
        denominator = initial_denom_lr if lr is None else 1.0
        params = BaseFinetuning.filter_on_optimizer(
            optimizer, BaseFinetuning.filter_params(modules, train_bn=train_bn, requires_grad=True)
        )
        if params:
            optimizer.add_param_group({"params": params, "lr": base_lr / denominator})


class BackboneFinetuning(BaseFinetuning):
    """Train the model's ``backbone`` only from a given epoch, with a learning rate that grows to the model's.

    The module needs a ``backbone`` attribute (a ``torch.nn.Module``), frozen at the start. At
    ``unfreeze_backbone_at_epoch`` it joins the optimizer as a new parameter group with
    ``backbone_initial_lr`` (default: the current learning rate times
    ``backbone_initial_ratio_lr``); each later epoch multiplies its learning rate by
    ``lambda_func(epoch + 1)``, up to the model's learning rate when ``should_align``.

    Example:
        >>> Trainer(callbacks=[BackboneFinetuning(unfreeze_backbone_at_epoch=5)])

    Args:
        unfreeze_backbone_at_epoch: The epoch (0-based, an int >= 0) the backbone starts training in; one
            after the last epoch is warned about when ``fit`` starts.
        lambda_func: ``epoch -> factor`` applied to the backbone's learning rate each later epoch.
        backbone_initial_ratio_lr: The backbone's first learning rate relative to the model's.
        backbone_initial_lr: The backbone's first learning rate (wins over the ratio).
        should_align: Never let the backbone's learning rate exceed the model's.
        initial_denom_lr: Passed to :meth:`unfreeze_and_add_param_group`.
        train_bn: Train the backbone's batch-norm layers while it is frozen.
        verbose: Log the learning rates each epoch (global rank 0).
        rounding: Digits of the logged learning rates.
    """

    def __init__(
        self,
        unfreeze_backbone_at_epoch: int = 10,
        lambda_func: Callable[[int], float] = multiplicative,
        backbone_initial_ratio_lr: float = 10e-2,
        backbone_initial_lr: float | None = None,
        should_align: bool = True,
        initial_denom_lr: float = 10.0,
        train_bn: bool = True,
        verbose: bool = False,
        rounding: int = 12,
    ) -> None:
        epoch = unfreeze_backbone_at_epoch
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise MisconfigurationError(
                f"BackboneFinetuning(unfreeze_backbone_at_epoch={epoch!r}) is not valid: give an int >= 0, the epoch "
                "(counting from 0) the backbone starts training in. Hint: 0 trains it from the start."
            )
        super().__init__()
        self.unfreeze_backbone_at_epoch = unfreeze_backbone_at_epoch
        self.lambda_func = lambda_func
        self.backbone_initial_ratio_lr = backbone_initial_ratio_lr
        self.backbone_initial_lr = backbone_initial_lr
        self.should_align = should_align
        self.initial_denom_lr = initial_denom_lr
        self.train_bn = train_bn
        self.verbose = verbose
        self.rounding = rounding
        self.previous_backbone_lr: float | None = None

    @override
    def state_dict(self) -> dict[str, Any]:
        """The parameter groups and the backbone's last learning rate."""
        return {**super().state_dict(), "previous_backbone_lr": self.previous_backbone_lr}

    @override
    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the parameter groups and the backbone's last learning rate."""
        self.previous_backbone_lr = state_dict["previous_backbone_lr"]
        super().load_state_dict(state_dict)

    @override
    def on_fit_start(self, trainer: Trainer, module: Module) -> None:
        """Warn when the backbone would unfreeze after the last epoch (it would never train)."""
        super().on_fit_start(trainer, module)
        max_epochs = trainer.max_epochs
        if max_epochs is not None and max_epochs != -1 and self.unfreeze_backbone_at_epoch >= max_epochs:
            rank_zero_warn(
                f"BackboneFinetuning(unfreeze_backbone_at_epoch={self.unfreeze_backbone_at_epoch}) unfreezes the "
                f"backbone after the last epoch of max_epochs={max_epochs}: it stays frozen in this fit. Hint: give "
                "an earlier epoch (counting from 0)."
            )

    @override
    def freeze_before_training(self, module: Module) -> None:
        """Freeze the backbone."""
        self.freeze(_backbone(module), train_bn=self.train_bn)

    @override
    def finetune_function(self, module: Module, epoch: int, optimizer: torch.optim.Optimizer) -> None:
        """Unfreeze the backbone at its epoch; then grow its learning rate."""
        current_lr = optimizer.param_groups[0]["lr"]
        if epoch == self.unfreeze_backbone_at_epoch:
            initial = (
                self.backbone_initial_lr
                if self.backbone_initial_lr is not None
                else current_lr * self.backbone_initial_ratio_lr
            )
            self.previous_backbone_lr = initial
            self.unfreeze_and_add_param_group(
                _backbone(module), optimizer, initial, train_bn=self.train_bn, initial_denom_lr=self.initial_denom_lr
            )
            backbone_lr = initial
        elif epoch > self.unfreeze_backbone_at_epoch:
            assert self.previous_backbone_lr is not None
            backbone_lr = self.lambda_func(epoch + 1) * self.previous_backbone_lr
            if self.should_align and backbone_lr > current_lr:
                backbone_lr = current_lr
            optimizer.param_groups[-1]["lr"] = backbone_lr
            self.previous_backbone_lr = backbone_lr
        else:
            return
        if self.verbose:
            rank_zero_info(
                f"Current lr: {round(current_lr, self.rounding)}, Backbone lr: {round(backbone_lr, self.rounding)}"
            )


def _backbone(module: Module) -> torch.nn.Module:
    backbone = getattr(module, "backbone", None)
    if not isinstance(backbone, torch.nn.Module):
        raise MisconfigurationError(
            f"BackboneFinetuning needs the module to have a 'backbone' attribute that is a torch.nn.Module; "
            f"{type(module).__name__} has {type(backbone).__name__ if backbone is not None else 'none'}."
        )
    return backbone
