"""The ``ipu`` strategy on the fake poptorch: dataloaders, replicas and accumulation on the IPU, compiled steps.

The fake's compiled models keep their own copy of the weights (the IPUs'), so every test that
compares weights also checks that the strategy moves them between the host and the IPUs.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, DistributedSampler, IterableDataset, RandomSampler, SequentialSampler

import torchplug
from tests.accel_ipu.models import Regressor, dataset, loader, quiet, reference_weights, weights
from torchplug import MisconfigurationError
from torchplug_ipu import IPUStrategy

pytestmark = pytest.mark.usefixtures("fake_poptorch")


def close(a: list[float], b: list[float]) -> bool:
    return torch.allclose(torch.tensor(a), torch.tensor(b), atol=1e-6)


# -- dataloaders ------------------------------------------------------------------------------------


def test_the_loader_becomes_a_poptorch_loader_of_combined_batches(fake_poptorch: ModuleType) -> None:
    strategy = IPUStrategy(device_iterations=3, gradient_accumulation=2)
    strategy.parallel_devices = [torch.device("ipu", i) for i in range(4)]
    wrapped = strategy.process_dataloader(loader(n=480, batch_size=5, shuffle=True, drop_last=False))
    assert isinstance(wrapped, fake_poptorch.DataLoader)
    assert wrapped.combinedBatchSize == 5 * 3 * 4 * 2 and wrapped.batch_size == 120
    assert isinstance(wrapped.sampler, RandomSampler) and wrapped.drop_last is False
    assert wrapped.options is strategy.training_options
    assert strategy.distributed_sampler_kwargs is None


def test_a_poptorch_loader_is_kept_and_others_are_refused(fake_poptorch: ModuleType) -> None:
    strategy = IPUStrategy()
    own = fake_poptorch.DataLoader(fake_poptorch.Options(), dataset(), batch_size=4)
    assert strategy.process_dataloader(own) is own
    with pytest.raises(
        MisconfigurationError,
        match=r"cannot rebuild a list\. Hint: pass a "
        r"torch\.utils\.data\.DataLoader",
    ):
        strategy.process_dataloader([torch.zeros(2)])
    batches = DataLoader(dataset(), batch_sampler=[[0, 1], [2, 3]])
    with pytest.raises(MisconfigurationError, match=r"this DataLoader has a custom batch_sampler"):
        strategy.process_dataloader(batches)


def test_custom_samplers_and_iterable_datasets_are_passed_on(fake_poptorch: ModuleType) -> None:
    class Stream(IterableDataset[torch.Tensor]):
        def __iter__(self) -> Any:
            return iter(torch.zeros(8, 2))

    strategy = IPUStrategy()
    reverse = list(range(63, -1, -1))
    wrapped = strategy.process_dataloader(DataLoader(dataset(), batch_size=4, sampler=reverse))
    assert wrapped.sampler is reverse
    stream = strategy.process_dataloader(DataLoader(Stream(), batch_size=4))
    assert [b.shape[0] for b in stream] == [4, 4]


def test_the_trainer_never_adds_a_distributed_sampler(tmp_path: Path, fake_poptorch: ModuleType) -> None:
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, devices=4))
    trainer.fit(Regressor(), loader(batch_size=2), loader(batch_size=2))
    for wrapped in (trainer.train_dataloader, trainer.val_dataloaders):
        assert isinstance(wrapped, fake_poptorch.DataLoader)
        assert isinstance(wrapped.sampler, SequentialSampler)
        assert not isinstance(wrapped.sampler, DistributedSampler)
        assert wrapped.batch_size == 8


# -- training: replicas, accumulation and device iterations on the IPU --------------------------------


def test_replicas_and_on_device_accumulation_train_like_one_big_batch(tmp_path: Path) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(
        accelerator="ipu", strategy=IPUStrategy(gradient_accumulation=2), **quiet(tmp_path, devices=2, max_epochs=2)
    )
    trainer.fit(model, loader(batch_size=4))
    assert close(weights(model), reference_weights(batch_size=16, epochs=2))  # 2 replicas x 2 micro-batches x 4
    assert trainer.global_step == 8  # one optimizer step per Trainer batch: 64 / 16 x 2 epochs
    assert {shape for _, shape in model.seen} == {(4, 4)}  # the step sees one micro-batch


def test_accumulate_grad_batches_is_done_on_the_ipu(tmp_path: Path) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="ipu", accumulate_grad_batches=4, **quiet(tmp_path))
    trainer.fit(model, loader(batch_size=4))
    options = trainer.strategy.training_options
    assert (options.Training.gradient_accumulation, trainer.train_dataloader.batch_size) == (4, 16)
    assert close(weights(model), reference_weights(batch_size=16, epochs=1))


def test_with_on_device_accumulation_the_trainer_steps_every_batch(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="ipu", accumulate_grad_batches=4, **quiet(tmp_path))
    trainer.fit(Regressor(), loader(batch_size=4))
    assert trainer.global_step == 4  # 64 samples in batches of 4 x 4: each Trainer batch is one optimizer step
    assert trainer.estimated_stepping_batches == 4


def test_device_iterations_run_several_steps_per_call(tmp_path: Path, fake_state: ModuleType) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="ipu", strategy=IPUStrategy(device_iterations=2), **quiet(tmp_path))
    trainer.fit(model, loader(batch_size=8))
    assert close(weights(model), reference_weights(batch_size=8, epochs=1))
    assert fake_state.executors[0].calls == 4 == trainer.global_step  # 64 / (8 x 2)


def test_the_model_holds_the_trained_weights_after_fit_and_the_host_optimizer_never_stepped(
    tmp_path: Path, fake_state: ModuleType
) -> None:
    model = Regressor()
    before = weights(model)
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path))
    trainer.fit(model, loader(batch_size=16))
    assert weights(model) != before
    assert fake_state.calls[-3:] == ["copyWeightsToHost", "detach", "destroy"]
    assert fake_state.attached is None  # the IPUs are released
    assert trainer.optimizers[0].state == {}  # the optimizer stepped on the IPU only


def test_a_learning_rate_schedule_reaches_the_ipu(tmp_path: Path, fake_state: ModuleType) -> None:
    class Scheduled(Regressor):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return {
                "optimizer": optimizer,
                "lr_scheduler": {
                    "scheduler": torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5),
                    "interval": "step",
                },
            }

    model = Scheduled()
    # limit_val_batches=0: no validation is intended (Regressor's validation_step gets no data here)
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, limit_val_batches=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "lr_scheduler.step() before optimizer.step()": the host step is a no-op
        trainer.fit(model, loader(batch_size=16))
    assert fake_state.calls.count("setOptimizer") == 3  # before steps 2, 3 and 4
    reference = Regressor()
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.1)
    x, y = dataset().tensors
    for step in range(4):
        optimizer.param_groups[0]["lr"] = 0.1 * 0.5**step
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(reference(x[16 * step : 16 * step + 16]), y[16 * step : 16 * step + 16]).backward()
        optimizer.step()
    assert close(weights(model), weights(reference))


# -- the other steps, and switching the IPUs between compiled models -------------------------------------


def test_validation_runs_on_the_trained_weights_of_every_epoch(tmp_path: Path, fake_state: ModuleType) -> None:
    seen: list[tuple[float, float]] = []

    class Watch(torchplug.Callback):
        def on_validation_end(self, trainer: Any, module: Any) -> None:
            x, y = dataset().tensors
            with torch.no_grad():
                host = float(torch.nn.functional.mse_loss(module(x), y))
            seen.append((float(trainer.callback_metrics["val_loss"]), host))

    trainer = torchplug.Trainer(accelerator="ipu", callbacks=[Watch()], **quiet(tmp_path, max_epochs=2))
    trainer.fit(Regressor(), loader(batch_size=16), loader(batch_size=16))
    assert len(seen) == 2 and seen[0][0] != seen[1][0]
    for on_ipu, on_host in seen:
        assert on_ipu == pytest.approx(on_host, rel=1e-5)
    calls = fake_state.calls
    assert calls.index("compile:inference") > calls.index("copyWeightsToHost")  # compiled from the trained weights
    assert "copyWeightsToDevice" in calls  # the second validation received the new weights


def test_only_one_compiled_model_holds_the_ipus_at_a_time(tmp_path: Path, fake_state: ModuleType) -> None:
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, max_epochs=2))
    trainer.fit(Regressor(), loader(batch_size=16), loader(batch_size=16))  # the fake refuses a second holder
    compiled = [c for c in fake_state.calls if c.startswith(("compile", "attach", "detach"))]
    assert compiled == [
        "compile:training",
        "detach",
        "compile:inference",  # epoch 1: train, validate
        "detach",
        "attach",
        "detach",
        "attach",  # epoch 2: train, validate
        "detach",
    ]  # the end of fit releases the IPUs


def test_predict_returns_one_prediction_per_sample(tmp_path: Path) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, devices=2))
    predictions = trainer.predict(model, loader(n=32, batch_size=4))
    assert [p.shape for p in predictions] == [torch.Size([8, 1])] * 4
    with torch.no_grad():
        assert torch.allclose(torch.cat(predictions), model(dataset(32).tensors[0]))


def test_the_step_arguments_reach_the_step_as_tensors(tmp_path: Path) -> None:
    got: list[Any] = []

    class Spy(Regressor):
        def training_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
            got.append(batch_idx)
            return super().training_step(batch, batch_idx)

    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, devices=2, limit_train_batches=2))
    trainer.fit(Spy(), loader(batch_size=4))
    assert [int(i) for i in got] == [0, 0, 1, 1]  # one micro-batch per replica, each told its batch index
    assert {tuple(i.shape) for i in got} == {(1,)}


# -- checkpoints ---------------------------------------------------------------------------------


def test_checkpoints_hold_the_weights_trained_on_the_ipu(tmp_path: Path) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, enable_checkpointing=True))
    trainer.fit(model, loader(batch_size=16))
    saved = torch.load(trainer.checkpoint_callback.best_model_path, weights_only=True)["state_dict"]
    assert close(weights(model), [float(v) for key in ("layer.weight", "layer.bias") for v in saved[key].flatten()])


def test_a_resumed_run_sends_the_loaded_weights_to_the_ipu(tmp_path: Path) -> None:
    first = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path / "a", enable_checkpointing=True))
    first.fit(Regressor(), loader(batch_size=16))
    resumed = Regressor()
    second = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path / "b", max_epochs=2))
    second.fit(resumed, loader(batch_size=16), ckpt_path=first.checkpoint_callback.best_model_path)
    assert close(weights(resumed), reference_weights(batch_size=16, epochs=2))


# -- options and refusals ------------------------------------------------------------------------------


def test_the_options_follow_the_arguments_and_the_seed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_GLOBAL_SEED", "7")
    trainer = torchplug.Trainer(
        accelerator="ipu",
        accumulate_grad_batches=3,
        strategy=IPUStrategy(device_iterations=2),
        **quiet(tmp_path, devices=4),
    )
    trainer.fit(Regressor(), loader(n=48, batch_size=2), loader(n=48, batch_size=2))  # one batch of 2 x 24
    training, inference = trainer.strategy.training_options, trainer.strategy.inference_options
    assert training.toDict() | {"partials_type": None} == {
        "device_iterations": 2,
        "replication_factor": 4,
        "gradient_accumulation": 3,
        "random_seed": 7,
        "partials_type": None,
        "stochastic_rounding": False,
    }
    assert (inference.device_iterations, inference.replication_factor, inference.Training.gradient_accumulation) == (
        6,
        4,
        1,
    )  # the same micro-batches per call, no accumulation


def test_given_options_win_and_must_agree(fake_poptorch: ModuleType) -> None:
    training = fake_poptorch.Options().deviceIterations(2).replicationFactor(2)
    strategy = IPUStrategy(training_options=training)
    assert strategy.training_options is training and (strategy.replication_factor, strategy.accumulation) == (2, 1)
    wrong = fake_poptorch.Options().deviceIterations(3)
    with pytest.raises(
        MisconfigurationError,
        match=r"inference_options consume 3 micro-batches per call and the "
        r"training options 4",
    ):
        IPUStrategy(training_options=training, inference_options=wrong).inference_options  # noqa: B018


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"device_iterations": 0}, r"device_iterations=0 is not valid"),
        ({"gradient_accumulation": -1}, r"gradient_accumulation=-1"),
    ],
)
def test_counts_must_be_positive(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(MisconfigurationError, match=message):
        IPUStrategy(**kwargs)


def test_several_nodes_are_refused(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationError, match=r"strategy='ipu' drives the IPUs of one host, but num_nodes=2"):
        torchplug.Trainer(accelerator="ipu", num_nodes=2, **quiet(tmp_path))


def test_two_optimizers_are_refused(tmp_path: Path) -> None:
    class Two(Regressor):
        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.1)]

    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path))
    with pytest.raises(MisconfigurationError, match=r"returned 2 optimizers"):
        trainer.fit(Two(), loader())


def test_manual_optimization_is_refused(tmp_path: Path) -> None:
    model = Regressor()
    model.automatic_optimization = False
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path))
    with pytest.raises(MisconfigurationError, match=r"automatic_optimization=False is not supported on IPUs"):
        trainer.fit(model, loader())


def test_a_step_that_returns_no_loss_is_refused(tmp_path: Path) -> None:
    class Skips(Regressor):
        def training_step(self, batch: Any, batch_idx: Any) -> None:
            return None

    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path))
    with pytest.raises(
        MisconfigurationError,
        match=r"training_step returned NoneType; on IPUs it must return the "
        r"loss",
    ):
        trainer.fit(Skips(), loader())


def test_the_single_process_answers() -> None:
    strategy = IPUStrategy()
    assert (strategy.root_device, strategy.global_rank, strategy.world_size) == (torch.device("cpu"), 0, 1)
    assert strategy.is_global_zero and strategy.broadcast({"a": 1}) == {"a": 1}
    assert strategy.all_gather(torch.tensor([1.0, 2.0])).shape == (1, 2)
    assert strategy.reduce(torch.tensor(3.0)) == 3.0
    assert repr(strategy) == "IPUStrategy(device_iterations=1, gradient_accumulation=None)"


def test_validate_and_test_alone_compile_only_inference_models(tmp_path: Path, fake_state: ModuleType) -> None:
    class Tested(Regressor):
        def test_step(self, batch: Any, batch_idx: Any) -> torch.Tensor:
            return self.validation_step(batch, batch_idx)

        def on_test_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.log("test_loss", outputs.mean())

    model = Tested()
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, devices=2))
    validated = trainer.validate(model, loader(batch_size=8), verbose=False)[0]["val_loss"]
    tested = trainer.test(model, loader(batch_size=8), verbose=False)[0]["test_loss"]
    x, y = dataset().tensors
    with torch.no_grad():
        expected = float(torch.nn.functional.mse_loss(model(x), y))
    assert validated == pytest.approx(expected, rel=1e-5) and tested == pytest.approx(expected, rel=1e-5)
    assert "trainingModel" not in fake_state.calls and fake_state.calls.count("inferenceModel") == 2


def test_the_sanity_check_compiles_validation_before_training(tmp_path: Path, fake_state: ModuleType) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="ipu", **quiet(tmp_path, num_sanity_val_steps=1))
    trainer.fit(model, loader(batch_size=16), loader(batch_size=16))
    compiled = [c for c in fake_state.calls if c.startswith(("compile", "attach", "detach"))]
    assert compiled[:3] == ["compile:inference", "detach", "compile:training"]
    assert close(weights(model), reference_weights(batch_size=16, epochs=1))
