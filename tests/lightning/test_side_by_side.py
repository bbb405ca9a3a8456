"""The same small models trained under torchplug and under PyTorch Lightning 2.6, compared number for number.

Each model is written once, as a mixin of plain methods, and combined with each framework's base
classes (``torchplug.Module`` / ``lightning.pytorch.LightningModule``, and the Callback and
Logger bases): the code is the same, only the imports differ, as for a user who switches. Both
runs start from the same seed and must end with equal weights (``torch.equal``: bit for bit),
send equal rows to their loggers (the same steps, keys and values), keep the same
``logged_metrics`` and ``callback_metrics``, and call the same hooks in the same order.

Lightning comes from PyPI (``lightning==2.6.*``) in the ``lightning`` tox environment; torchplug
itself never imports it.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug
from torchplug.loggers.logger import Logger as TorchplugLogger

pl = pytest.importorskip("lightning.pytorch", reason="the side-by-side tests need lightning==2.6.* (tox -e lightning)")
torchmetrics = pytest.importorskip("torchmetrics", reason="the side-by-side tests log torchmetrics Metrics")


# -- the two frameworks ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Framework:
    """What a user imports from each framework."""

    name: str
    module: type
    callback: type
    logger: type
    trainer: Callable[..., Any]
    seed_everything: Callable[[int], Any]
    extra_trainer_args: Mapping[str, Any]


def _memory_logger(base: type) -> type:
    class MemoryLogger(base):  # type: ignore[misc,valid-type]
        """Keeps every row: (step, {name: value}) with the values as Python floats."""

        def __init__(self) -> None:
            super().__init__()
            self.rows: list[tuple[int, dict[str, float]]] = []

        @property
        def name(self) -> str:
            return "memory"

        @property
        def version(self) -> int:
            return 0

        def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
            assert step is not None
            self.rows.append((step, {key: float(value) for key, value in metrics.items()}))

        def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
            pass

    return MemoryLogger


TORCHPLUG = Framework(
    "torchplug",
    torchplug.Module,
    torchplug.Callback,
    _memory_logger(TorchplugLogger),
    torchplug.Trainer,
    torchplug.seed_everything,
    {},
)
LIGHTNING = Framework(
    "lightning",
    pl.LightningModule,
    pl.Callback,
    _memory_logger(pl.loggers.Logger),
    pl.Trainer,
    pl.seed_everything,
    {"enable_model_summary": False},
)


@dataclass
class Result:
    """What a run leaves behind, to compare between the frameworks."""

    weights: dict[str, torch.Tensor]
    rows: list[tuple[int, dict[str, float]]]
    logged: dict[str, float]
    callback: dict[str, float]
    global_step: int
    calls: list[str]
    extra: dict[str, Any]


def run(
    framework: Framework,
    body: type,
    trainer_args: Mapping[str, Any],
    then: Callable[[Any, Any], dict[str, Any]] | None = None,
    data: Callable[[], dict[str, Any]] | None = None,
) -> Result:
    """Fit ``body`` (a mixin) combined with ``framework``'s Module, from seed 0; ``then(trainer, model)`` after."""
    framework.seed_everything(0)
    model = type(body.__name__, (body, framework.module), {})()
    logger = framework.logger()
    trainer = framework.trainer(
        accelerator="cpu",
        devices=1,
        logger=logger,
        enable_checkpointing=False,
        enable_progress_bar=False,
        **framework.extra_trainer_args,
        **trainer_args,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # each framework has its own advice to give
        trainer.fit(model, **(data() if data is not None else {}))
        extra = then(trainer, model) if then is not None else {}
    return Result(
        weights={k: v.detach().clone() for k, v in model.state_dict().items()},
        rows=logger.rows,
        logged=_numbers(trainer.logged_metrics),
        callback=_numbers(trainer.callback_metrics),
        global_step=trainer.global_step,
        calls=list(getattr(model, "calls", [])),
        extra=extra,
    )


def _numbers(metrics: Mapping[str, Any]) -> dict[str, float]:
    assert all(isinstance(value, torch.Tensor) for value in metrics.values()), metrics
    return {key: float(value) for key, value in metrics.items()}


def assert_same(a: Result, b: Result) -> None:
    assert a.global_step == b.global_step
    assert a.weights.keys() == b.weights.keys()
    different = [k for k in a.weights if not torch.equal(a.weights[k], b.weights[k])]
    assert not different, f"weights differ: {different}"
    assert a.rows == b.rows
    assert a.logged == b.logged
    assert a.callback == b.callback
    assert a.calls == b.calls
    assert a.extra == b.extra


def both(*args: Any, **kwargs: Any) -> tuple[Result, Result]:
    """The same run under torchplug and under Lightning."""
    return run(TORCHPLUG, *args, **kwargs), run(LIGHTNING, *args, **kwargs)


# -- data and models ------------------------------------------------------------------------------------


def blobs(n: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 3, (n,), generator=generator)
    centers = torch.tensor([[2.0, 0.0, 0.0, 1.0], [0.0, 2.0, 1.0, 0.0], [-2.0, -2.0, 0.0, 0.0]])
    return TensorDataset(centers[labels] + torch.randn(n, 4, generator=generator), labels)


class Unvalidated:
    """An MLP with dropout over a shuffled loader (every random draw matters); validation data, no validation_step."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 3)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
        return loss

    def test_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("test_acc", (self(x).argmax(-1) == y).float().mean())

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(-1)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(100, 0), batch_size=8, shuffle=True)  # 13 batches, the last one of 4

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(40, 1), batch_size=16, shuffle=True)

    def test_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(40, 2), batch_size=16)

    def predict_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(20, 3), batch_size=16)


class Classifier(Unvalidated):
    """:class:`Unvalidated` with a validation_step logging the loss and the accuracy."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(-1) == y).float().mean(), prog_bar=True)


def evaluate_all(trainer: Any, model: Any) -> dict[str, Any]:
    """validate, test and predict after fit: their results and the metrics each leaves."""
    out: dict[str, Any] = {}
    out["validate"] = trainer.validate(model, verbose=False)
    out["after_validate"] = (_numbers(trainer.logged_metrics), _numbers(trainer.callback_metrics))
    out["test"] = trainer.test(model, verbose=False)
    out["after_test"] = (_numbers(trainer.logged_metrics), _numbers(trainer.callback_metrics))
    out["predict"] = [p.tolist() for p in trainer.predict(model)]
    return out


# -- automatic optimization -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "trainer_args",
    [
        pytest.param({"max_epochs": 3, "log_every_n_steps": 5}, id="plain"),
        pytest.param({"max_epochs": 2, "log_every_n_steps": 1, "num_sanity_val_steps": 0}, id="every-step"),
        pytest.param({"max_epochs": 2, "accumulate_grad_batches": 3, "log_every_n_steps": 2}, id="accumulate-3"),
        pytest.param({"max_epochs": 2, "gradient_clip_val": 0.3}, id="clip-norm"),
        pytest.param(
            {
                "max_epochs": 2,
                "gradient_clip_val": 0.02,
                "gradient_clip_algorithm": "value",
                "accumulate_grad_batches": 2,
            },
            id="clip-value-accumulate-2",
        ),
        pytest.param({"max_steps": 20, "val_check_interval": 0.5, "log_every_n_steps": 3}, id="val-twice-an-epoch"),
        pytest.param(
            {"max_epochs": 4, "check_val_every_n_epoch": 2, "limit_train_batches": 5}, id="val-every-2-epochs"
        ),
    ],
)
def test_automatic_optimization(trainer_args: dict[str, Any]) -> None:
    ours, theirs = both(Classifier, trainer_args, then=evaluate_all)
    assert_same(ours, theirs)


class WithSchedulers(Classifier):
    """A step-interval StepLR every 2 steps and an epoch-interval ReduceLROnPlateau on val_loss."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.2, momentum=0.9)
        self.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, patience=0, factor=0.5)
        step = torch.optim.lr_scheduler.StepLR(optimizer, 3, 0.8)
        return (
            [optimizer],
            [
                {"scheduler": step, "interval": "step", "frequency": 2},
                {"scheduler": self.plateau, "monitor": "val_loss"},
            ],
        )


def test_schedulers() -> None:
    def lr(trainer: Any, model: Any) -> dict[str, Any]:
        return {"lr": trainer.optimizers[0].param_groups[0]["lr"]}

    ours, theirs = both(WithSchedulers, {"max_epochs": 4, "log_every_n_steps": 4}, then=lr)
    assert_same(ours, theirs)


class WarmUp(Classifier):
    """The documented learning-rate warm-up in optimizer_step, zero_grad to zeros, and a custom scheduler hook."""

    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.Adam(self.parameters(), lr=0.01)
        return {"optimizer": optimizer, "lr_scheduler": torch.optim.lr_scheduler.ExponentialLR(optimizer, 0.9)}

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any) -> None:
        optimizer.step(closure=optimizer_closure)
        if self.trainer.global_step < 10:
            scale = min(1.0, float(self.trainer.global_step + 1) / 10.0)
            for group in optimizer.param_groups:
                group["lr"] = scale * 0.01

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        optimizer.zero_grad(set_to_none=False)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        scheduler.step()

    def configure_gradient_clipping(
        self, optimizer: Any, gradient_clip_val: float | None = None, gradient_clip_algorithm: str | None = None
    ) -> None:
        if self.trainer.current_epoch > 0:
            self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val, gradient_clip_algorithm="norm")

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        (loss * 0.5).backward(*args, **kwargs)


def test_optimization_hooks() -> None:
    ours, theirs = both(WarmUp, {"max_epochs": 3, "gradient_clip_val": 0.5, "accumulate_grad_batches": 2})
    assert_same(ours, theirs)


class SkipsAndNoBatchIdx(Classifier):
    """training_step without batch_idx, returning None on every third call (that batch is skipped)."""

    def training_step(self, batch: Any) -> torch.Tensor | None:  # type: ignore[override]
        self.calls_made = getattr(self, "calls_made", 0) + 1
        loss = super().training_step(batch, 0)
        return None if self.calls_made % 3 == 0 else loss

    def predict_step(self, batch: Any) -> torch.Tensor:  # type: ignore[override]
        return self(batch[0]).argmax(-1)


def test_training_step_without_batch_idx_returning_none() -> None:
    ours, theirs = both(SkipsAndNoBatchIdx, {"max_epochs": 2, "log_every_n_steps": 2}, then=evaluate_all)
    assert_same(ours, theirs)


def test_no_validation_step_means_no_validation_and_no_sanity_check() -> None:
    ours, theirs = both(Unvalidated, {"max_epochs": 2, "num_sanity_val_steps": 2})
    assert_same(ours, theirs)


# -- manual optimization --------------------------------------------------------------------------------


class TwoOptimizers:
    """Manual optimization: two heads, two optimizers, clipping, manual schedulers, grads read after backward."""

    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.body = torch.nn.Linear(4, 8)
        self.head_a = torch.nn.Linear(8, 3)
        self.head_b = torch.nn.Linear(8, 3)

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        first, second = self.optimizers()
        scheduler = self.lr_schedulers()
        features = torch.relu(self.body(x))
        loss_a = torch.nn.functional.cross_entropy(self.head_a(features), y)
        first.zero_grad()
        self.manual_backward(loss_a, retain_graph=True)
        self.clip_gradients(first, gradient_clip_val=0.5, gradient_clip_algorithm="norm")
        first.step()
        if batch_idx % 2 == 0:
            loss_b = torch.nn.functional.cross_entropy(self.head_b(features.detach()), y)
            second.zero_grad()
            self.manual_backward(loss_b)
            second.step()
            self.log("loss_b", loss_b, prog_bar=True)
        scheduler.step()
        self.log("loss_a", loss_a, on_epoch=True)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        features = torch.relu(self.body(x))
        self.log("val_a", torch.nn.functional.cross_entropy(self.head_a(features), y), on_step=True)

    def configure_optimizers(self) -> Any:
        first = torch.optim.SGD([*self.body.parameters(), *self.head_a.parameters()], lr=0.1, momentum=0.5)
        second = torch.optim.Adam(self.head_b.parameters(), lr=0.01)
        return [first, second], [torch.optim.lr_scheduler.StepLR(first, 4, 0.5)]

    def train_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(64, 0), batch_size=8, shuffle=True)

    def val_dataloader(self) -> DataLoader[Any]:
        return DataLoader(blobs(32, 1), batch_size=8)


def test_manual_optimization() -> None:
    ours, theirs = both(TwoOptimizers, {"max_epochs": 3, "log_every_n_steps": 3})
    assert_same(ours, theirs)


# -- logging ---------------------------------------------------------------------------------------------


class LogsEverything(Classifier):
    """self.log's options: reduce_fx, on_step/on_epoch in every stage, numbers, Metric objects, epoch hooks."""

    def __init__(self) -> None:
        super().__init__()
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=3)
        self.val_scores = torchmetrics.MetricCollection(
            {"f1": torchmetrics.F1Score(task="multiclass", num_classes=3), "mse": torchmetrics.MeanSquaredError()},
            prefix="val_",
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = torch.nn.functional.cross_entropy(logits, y)
        self.train_acc(logits.argmax(-1), y)
        self.log("train_acc", self.train_acc, on_step=True, on_epoch=True)
        self.log("max_loss", loss, on_step=False, on_epoch=True, reduce_fx=torch.max)
        self.log("min_loss", loss, on_step=False, on_epoch=True, reduce_fx="min")
        self.log("sum_loss", loss, on_step=False, on_epoch=True, reduce_fx="sum")
        self.log("batch_idx", batch_idx)
        self.log("weighted", loss, on_epoch=True, batch_size=3)
        if batch_idx % 4 == 0:
            self.log("sometimes", float(batch_idx))
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("epoch_end_value", float(self.current_epoch) * 2)

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        x, y = batch
        logits = self(x)
        self.val_acc.update(logits.argmax(-1), y)
        self.log("val_acc", self.val_acc)
        self.val_scores(logits.argmax(-1), y)
        self.log_dict(self.val_scores)
        self.log("val_loss", torch.nn.functional.cross_entropy(logits, y), on_step=True, on_epoch=True)
        self.log(f"val_seen_{dataloader_idx}", float(batch_idx), add_dataloader_idx=False, reduce_fx="max")

    def on_validation_epoch_end(self) -> None:
        self.log("val_epoch_end", float(self.current_epoch))

    def val_dataloader(self) -> list[DataLoader[Any]]:
        return [DataLoader(blobs(32, 1), batch_size=8), DataLoader(blobs(20, 4), batch_size=8)]


@pytest.mark.parametrize(
    "trainer_args",
    [
        pytest.param({"max_epochs": 2, "log_every_n_steps": 3}, id="every-3"),
        pytest.param({"max_epochs": 2, "log_every_n_steps": 1, "accumulate_grad_batches": 2}, id="accumulate"),
        pytest.param({"max_steps": 18, "val_check_interval": 6, "log_every_n_steps": 50}, id="val-every-6"),
    ],
)
def test_logging(trainer_args: dict[str, Any]) -> None:
    ours, theirs = both(LogsEverything, trainer_args, then=evaluate_all)
    assert_same(ours, theirs)


# -- hooks: the same calls in the same order ---------------------------------------------------------------

MODULE_HOOKS = [
    "configure_callbacks", "prepare_data", "setup", "teardown", "configure_model", "configure_optimizers",
    "on_fit_start", "on_fit_end", "on_train_start", "on_train_end", "on_train_epoch_start", "on_train_epoch_end",
    "on_train_batch_start", "on_train_batch_end", "on_validation_start", "on_validation_end",
    "on_validation_epoch_start", "on_validation_epoch_end", "on_validation_batch_start", "on_validation_batch_end",
    "on_test_start", "on_test_end", "on_test_epoch_start", "on_test_epoch_end", "on_test_batch_start",
    "on_test_batch_end", "on_predict_start", "on_predict_end", "on_predict_epoch_start", "on_predict_epoch_end",
    "on_predict_batch_start", "on_predict_batch_end", "on_validation_model_zero_grad", "on_validation_model_eval",
    "on_validation_model_train", "on_test_model_eval", "on_test_model_train", "on_predict_model_eval",
    "on_before_zero_grad", "on_before_backward", "backward", "on_after_backward", "on_before_optimizer_step",
    "optimizer_step", "optimizer_zero_grad", "lr_scheduler_step", "configure_gradient_clipping",
    "on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer", "train_dataloader",
    "val_dataloader", "test_dataloader", "predict_dataloader", "training_step", "validation_step", "test_step",
    "predict_step",
]  # fmt: skip
MANUAL_ONLY_SKIPPED = {"optimizer_step", "optimizer_zero_grad", "configure_gradient_clipping", "on_before_zero_grad"}


def recorded(body: type, hooks: list[str]) -> type:
    """``body`` with every hook in ``hooks`` appending its name to ``self.calls`` before running."""

    def wrapper(name: str) -> Callable[..., Any]:
        def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
            self.__dict__.setdefault("calls", []).append(name)
            return getattr(super(cls, self), name)(*args, **kwargs)

        return hook

    cls = type(f"Recorded{body.__name__}", (body,), {name: wrapper(name) for name in hooks})
    return cls


class HookBody(Classifier):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": torch.optim.lr_scheduler.StepLR(optimizer, 2)}}


class ManualHookBody(HookBody):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(self(batch[0]), batch[1])
        self.manual_backward(loss)
        optimizer.step()
        return loss


@pytest.mark.parametrize(
    ("body", "trainer_args"),
    [
        pytest.param(HookBody, {"accumulate_grad_batches": 2, "gradient_clip_val": 1.0}, id="automatic"),
        pytest.param(HookBody, {"num_sanity_val_steps": 0, "val_check_interval": 2}, id="no-sanity-check"),
        pytest.param(ManualHookBody, {}, id="manual"),
    ],
)
def test_the_same_hooks_run_in_the_same_order(body: type, trainer_args: dict[str, Any]) -> None:
    hooks = [h for h in MODULE_HOOKS if body is HookBody or h not in MANUAL_ONLY_SKIPPED]
    args: dict[str, Any] = {
        "max_epochs": 2,
        "limit_train_batches": 3,
        "limit_val_batches": 2,
        "num_sanity_val_steps": 1,
    }
    args |= {"limit_test_batches": 1, "limit_predict_batches": 1, **trainer_args}
    ours, theirs = both(recorded(body, hooks), args, then=evaluate_all)
    assert ours.calls == theirs.calls
    never_called = {"lr_scheduler_step"} if body is ManualHookBody else set()  # the user steps it there
    assert set(hooks) - set(ours.calls) == never_called
    assert_same(ours, theirs)


def test_callback_hooks_run_in_the_same_order() -> None:
    names = [
        name
        for name in vars(torchplug.Callback)
        if not name.startswith("_") and callable(getattr(torchplug.Callback, name)) and name != "on_exception"
    ]

    def recorder(framework: Framework) -> Any:
        calls: list[str] = []

        def wrapper(name: str) -> Callable[..., Any]:
            def hook(self: Any, *args: Any, **kwargs: Any) -> Any:
                calls.append(name)
                return getattr(framework.callback, name)(self, *args, **kwargs)

            return hook

        callback = type("Recorder", (framework.callback,), {name: wrapper(name) for name in names})()
        return callback, calls

    results = []
    for framework in (TORCHPLUG, LIGHTNING):
        callback, calls = recorder(framework)
        run(framework, HookBody, {"max_epochs": 2, "limit_train_batches": 2, "callbacks": [callback]}, evaluate_all)
        results.append(calls)
    assert results[0] == results[1]
