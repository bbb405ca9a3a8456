"""``ModelPruning``: prune weights with ``torch.nn.utils.prune`` as training goes (optionally as a lottery ticket)."""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch
from torch.nn.utils import prune
from typing_extensions import override

from torchplug._errors import MisconfigurationError
from torchplug.callbacks.callback import Callback
from torchplug.core.module import Module
from torchplug.utilities.rank_zero import log

if TYPE_CHECKING:
    from torchplug.trainer.trainer import Trainer

__all__ = ["ModelPruning"]

ParameterList = Sequence[tuple[torch.nn.Module, str]]
Schedule = bool | Callable[[int], bool]

_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "ln_structured": prune.ln_structured,
    "l1_unstructured": prune.l1_unstructured,
    "random_structured": prune.random_structured,
    "random_unstructured": prune.random_unstructured,
}
_METHODS: dict[str, type[prune.BasePruningMethod]] = {
    "ln_structured": prune.LnStructured,
    "l1_unstructured": prune.L1Unstructured,
    "random_structured": prune.RandomStructured,
    "random_unstructured": prune.RandomUnstructured,
}
_CONTAINERS = (Module, torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict)


class ModelPruning(Callback):
    """Prune the model's parameters at the end of every training epoch (or of every validation).

    Uses ``torch.nn.utils.prune``: each pruned parameter ``weight`` becomes ``weight_orig`` times a
    ``weight_mask`` buffer until pruning is made permanent (when training ends, and in every
    checkpoint's ``state_dict``, so that a checkpoint loads into the unpruned model class). With
    the lottery ticket hypothesis, the weights that survive are reset to their values at the start
    of training (or resampled). Under DDP, global rank 0's masks (and reset weights) are sent to
    every process, so random pruning stays the same everywhere.

    Example:
        >>> Trainer(callbacks=[ModelPruning("l1_unstructured", amount=0.2)])

    Args:
        pruning_fn: ``"l1_unstructured"``, ``"random_unstructured"``, ``"ln_structured"``,
            ``"random_structured"``, or a ``torch.nn.utils.prune.BasePruningMethod`` subclass
            (with ``use_global_unstructured=True``).
        parameters_to_prune: ``(module, "weight")`` pairs; empty: every ``parameter_names``
            parameter of every layer.
        parameter_names: ``"weight"`` and/or ``"bias"`` (default: both).
        use_global_unstructured: Prune the given parameters together, as one pool (unstructured only).
        amount: The fraction (float) or number (int) of parameters to prune, or ``epoch -> amount``.
        apply_pruning: Whether to prune, or ``epoch -> bool``.
        make_pruning_permanent: Remove the masks when training ends and in checkpoints.
        use_lottery_ticket_hypothesis: Reset the surviving weights after pruning, or ``epoch -> bool``.
        resample_parameters: With the lottery ticket: resample the weights (``reset_parameters``)
            instead of restoring the original ones.
        pruning_dim: The dimension of structured pruning (required for it).
        pruning_norm: The norm of ``ln_structured`` (required for it).
        verbose: 0 silent, 1 the overall sparsity, 2 also each parameter's (logged at the info level on global rank 0).
        prune_on_train_epoch_end: Prune after each training epoch; False: after each validation.

    Raises:
        MisconfigurationError: An unknown pruning function or parameter name, a structured
            method without ``pruning_dim`` (or ``pruning_norm``), a bad ``amount`` or ``verbose``.
    """

    PARAMETER_NAMES = ("weight", "bias")

    def __init__(
        self,
        pruning_fn: str | type[prune.BasePruningMethod],
        parameters_to_prune: ParameterList = (),
        parameter_names: list[str] | None = None,
        use_global_unstructured: bool = True,
        amount: int | float | Callable[[int], int | float] = 0.5,
        apply_pruning: Schedule = True,
        make_pruning_permanent: bool = True,
        use_lottery_ticket_hypothesis: Schedule = True,
        resample_parameters: bool = False,
        pruning_dim: int | None = None,
        pruning_norm: int | None = None,
        verbose: int = 0,
        prune_on_train_epoch_end: bool = True,
    ) -> None:
        self._use_global_unstructured = use_global_unstructured
        self._parameters_to_prune: ParameterList = parameters_to_prune
        self._use_lottery_ticket_hypothesis = use_lottery_ticket_hypothesis
        self._resample_parameters = resample_parameters
        self._prune_on_train_epoch_end = prune_on_train_epoch_end
        self._parameter_names = tuple(parameter_names or self.PARAMETER_NAMES)
        for name in self._parameter_names:
            if name not in self.PARAMETER_NAMES:
                raise MisconfigurationError(
                    f"ModelPruning(parameter_names=[{name!r}]): choose among {', '.join(self.PARAMETER_NAMES)}."
                )
        self._global_kwargs: dict[str, Any] = {}
        self._original_layers: dict[int, tuple[torch.nn.Module, list[tuple[int, str]]]] | None = None
        self.pruning_fn: Any = self._resolve(pruning_fn, pruning_dim, pruning_norm)
        self._method_name = getattr(self.pruning_fn, "__name__", type(self.pruning_fn).__name__)
        if isinstance(amount, bool) or not (isinstance(amount, (int, float)) or callable(amount)):
            raise MisconfigurationError(
                f"ModelPruning(amount={amount!r}): give an int, a float or a function of the epoch."
            )
        self.amount = amount
        self._apply_pruning = apply_pruning
        self._make_pruning_permanent = make_pruning_permanent
        if verbose not in (0, 1, 2):
            raise MisconfigurationError(f"ModelPruning(verbose={verbose!r}): choose 0, 1 or 2.")
        self._verbose = verbose

    def _resolve(self, pruning_fn: Any, dim: int | None, norm: int | None) -> Any:
        if isinstance(pruning_fn, str):
            name = pruning_fn.lower()
            if name not in _FUNCTIONS:
                raise MisconfigurationError(
                    f"ModelPruning(pruning_fn={pruning_fn!r}): choose one of {', '.join(_FUNCTIONS)}, or give a "
                    "torch.nn.utils.prune.BasePruningMethod subclass."
                )
            kwargs: dict[str, Any] = {}
            if name.endswith("_structured"):
                if dim is None:
                    raise MisconfigurationError(f"ModelPruning({name!r}) is structured: give pruning_dim=.")
                if name == "ln_structured":
                    if norm is None:
                        raise MisconfigurationError("ModelPruning('ln_structured') needs pruning_norm= (1, 2...).")
                    kwargs["n"] = norm
                kwargs["dim"] = dim
            if self._use_global_unstructured:
                method = _METHODS[name]
                self._global_kwargs = kwargs
                self._check_global(method)
                return method
            return functools.partial(_FUNCTIONS[name], **kwargs)
        if inspect.isclass(pruning_fn) and issubclass(pruning_fn, prune.BasePruningMethod):
            if not self._use_global_unstructured:
                raise MisconfigurationError(
                    f"ModelPruning(pruning_fn={pruning_fn.__name__}): a BasePruningMethod works with "
                    "use_global_unstructured=True only."
                )
            self._check_global(pruning_fn)
            return pruning_fn
        raise MisconfigurationError(
            f"ModelPruning(pruning_fn={pruning_fn!r}): give a name ({', '.join(_FUNCTIONS)}) or a "
            "torch.nn.utils.prune.BasePruningMethod subclass (the class, not an instance)."
        )

    @staticmethod
    def _check_global(method: type[prune.BasePruningMethod]) -> None:
        kind = getattr(method, "PRUNING_TYPE", None)
        if kind != "unstructured":
            raise MisconfigurationError(
                f"ModelPruning: use_global_unstructured=True needs an unstructured method; {method.__name__} is "
                f"{kind}. Hint: pass use_global_unstructured=False."
            )

    # -- which parameters -----------------------------------------------------------------------

    def filter_parameters_to_prune(self, parameters_to_prune: ParameterList = ()) -> ParameterList:
        """Override to choose which ``(module, name)`` pairs are pruned (default: all of them)."""
        return parameters_to_prune

    @staticmethod
    def sanitize_parameters_to_prune(
        module: torch.nn.Module, parameters_to_prune: ParameterList = (), parameter_names: Sequence[str] = ()
    ) -> ParameterList:
        """Check ``parameters_to_prune`` against ``module``, or list every layer's ``parameter_names`` when empty.

        Raises:
            MisconfigurationError: A pair whose module is not in the model or has no such parameter.
        """
        names = tuple(parameter_names) or ModelPruning.PARAMETER_NAMES
        layers = [m for m in module.modules() if not isinstance(m, _CONTAINERS)]
        if not parameters_to_prune:
            return [(m, n) for n in names for m in layers if isinstance(getattr(m, n, None), torch.nn.Parameter)]
        pairs = list(parameters_to_prune)
        if not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in pairs) or not all(
            isinstance(m, torch.nn.Module) and isinstance(n, str) for m, n in pairs
        ):
            raise MisconfigurationError(
                "ModelPruning(parameters_to_prune=...): give a list of (torch.nn.Module, 'parameter name') pairs."
            )
        ids = {id(m) for m in layers}
        missing_modules = [type(m).__name__ for m, _ in pairs if id(m) not in ids]
        missing_names = [n for m, n in pairs if id(m) in ids and not hasattr(m, n)]
        if missing_modules or missing_names:
            raise MisconfigurationError(
                "ModelPruning(parameters_to_prune=...): not in the model: "
                f"modules {missing_modules or '(none)'}, parameters {missing_names or '(none)'}."
            )
        return pairs

    @override
    def setup(self, trainer: Trainer, module: Module, stage: str) -> None:
        """Find the parameters to prune; with the lottery ticket, keep a copy of their layers as they start."""
        pairs = self.sanitize_parameters_to_prune(module, self._parameters_to_prune, self._parameter_names)
        self._parameters_to_prune = self.filter_parameters_to_prune(pairs)
        if self._use_lottery_ticket_hypothesis:
            self._original_layers = {}
            for index, (layer, name) in enumerate(self._parameters_to_prune):
                _, names = self._original_layers.setdefault(id(layer), (copy.deepcopy(layer), []))
                names.append((index, name))

    # -- pruning --------------------------------------------------------------------------------

    def apply_pruning(self, amount: int | float) -> None:
        """Prune ``amount`` of the parameters (globally or layer by layer)."""
        before = self._stats() if self._verbose else []
        if self._use_global_unstructured:
            accepted = set(inspect.signature(self.pruning_fn).parameters) - {"self"}
            kwargs = {k: v for k, v in {**self._global_kwargs, "amount": amount}.items() if k in accepted}
            prune.global_unstructured(self._parameters_to_prune, pruning_method=self.pruning_fn, **kwargs)
        else:
            for layer, name in self._parameters_to_prune:
                self.pruning_fn(layer, name=name, amount=amount)
        if self._verbose:
            self._report(before, self._stats(), amount)

    def apply_lottery_ticket_hypothesis(self) -> None:
        """Reset the surviving weights to their starting values (or, with ``resample_parameters``, resample them)."""
        assert self._original_layers is not None
        for original, names in self._original_layers.values():
            source = original
            if self._resample_parameters and callable(getattr(original, "reset_parameters", None)):
                source = copy.deepcopy(original)
                source.reset_parameters()  # type: ignore[operator]  # nn.Module.__getattr__ is typed Tensor | Module; checked callable above
            for index, name in names:
                layer, _ = self._parameters_to_prune[index]
                target = getattr(layer, f"{name}_orig", None)
                if target is None:
                    target = getattr(layer, name)
                value = getattr(source, name)
                if isinstance(target, torch.Tensor) and isinstance(value, torch.Tensor):
                    target.data = value.data.to(target.device)

    def make_pruning_permanent(self, module: torch.nn.Module) -> None:
        """Remove the masks: each pruned ``weight`` becomes a plain parameter holding the zeros."""
        for layer in module.modules():
            for key, hook in list(layer._forward_pre_hooks.items()):
                if isinstance(hook, prune.BasePruningMethod):
                    hook.remove(layer)
                    del layer._forward_pre_hooks[key]

    def _run_pruning(self, trainer: Trainer, epoch: int) -> None:
        should_prune = self._apply_pruning(epoch) if callable(self._apply_pruning) else self._apply_pruning
        amount = self.amount(epoch) if callable(self.amount) else self.amount
        if not should_prune or not amount:
            return
        self.apply_pruning(amount)
        lottery = self._use_lottery_ticket_hypothesis
        if lottery(epoch) if callable(lottery) else lottery:
            self.apply_lottery_ticket_hypothesis()
        if trainer.world_size > 1:
            self._agree(trainer)

    def _agree(self, trainer: Trainer) -> None:
        """Give every process global rank 0's masks and reset weights (random pruning differs per process)."""
        for layer, name in self._parameters_to_prune:
            for attribute in (f"{name}_mask", f"{name}_orig"):
                tensor = getattr(layer, attribute, None)
                if isinstance(tensor, torch.Tensor):
                    tensor.data.copy_(trainer.strategy.broadcast(tensor.detach().cpu()).to(tensor.device))

    @override
    def on_train_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Prune (``prune_on_train_epoch_end=True``)."""
        if self._prune_on_train_epoch_end:
            self._run_pruning(trainer, trainer.current_epoch)

    @override
    def on_validation_epoch_end(self, trainer: Trainer, module: Module) -> None:
        """Prune (``prune_on_train_epoch_end=False``), but not in the sanity check."""
        if not self._prune_on_train_epoch_end and not trainer.sanity_checking:
            self._run_pruning(trainer, trainer.current_epoch)

    @override
    def on_train_end(self, trainer: Trainer, module: Module) -> None:
        """Make pruning permanent (``make_pruning_permanent=True``)."""
        if self._make_pruning_permanent:
            self.make_pruning_permanent(module)

    @override
    def on_save_checkpoint(self, trainer: Trainer, module: Module, checkpoint: dict[str, Any]) -> None:
        """Write the pruned weights as plain ``weight`` entries (``weight_orig * weight_mask``), without masks."""
        if not self._make_pruning_permanent:
            return
        state = dict(checkpoint["state_dict"])
        for key in [k for k in state if k.endswith("_mask")]:
            base = key[: -len("_mask")]
            mask, orig = state.pop(key), state.pop(f"{base}_orig")
            state[base] = mask.to(dtype=orig.dtype) * orig
        checkpoint["state_dict"] = state

    # -- reporting ------------------------------------------------------------------------------

    def _stats(self) -> list[tuple[int, int]]:
        stats = []
        for layer, name in self._parameters_to_prune:
            mask = getattr(layer, f"{name}_mask", None)
            stats.append((0, 1) if mask is None else (int((mask == 0).sum().item()), mask.numel()))
        return stats

    def _report(self, before: list[tuple[int, int]], after: list[tuple[int, int]], amount: int | float) -> None:
        from torchplug.utilities.rank_zero import rank_zero_only

        if not rank_zero_only.is_zero():
            return
        total = sum(n for _, n in after)
        old, new = sum(z for z, _ in before), sum(z for z, _ in after)
        log.info(
            f"Applied {self._method_name}. Pruned: {old}/{total} ({old / total:.2%}) -> "
            f"{new}/{total} ({new / total:.2%})"
        )
        if self._verbose == 2:
            for (layer, name), (z0, n0), (z1, n1) in zip(self._parameters_to_prune, before, after):
                log.info(
                    f"Applied {self._method_name} to {layer!r}.{name} with amount={amount}. Pruned: "
                    f"{z0} ({z0 / n0:.2%}) -> {z1} ({z1 / n1:.2%})"
                )
