"""How ``ddp_spawn``/``ddp_fork`` (and vendor launchers) hand a worker's state back to the caller's Trainer.

The functions are tested here in one process, on the state of a real single-device run; the
multi-process launches themselves are in test_ddp.py and test_fsdp.py.
"""

from __future__ import annotations

import io
import warnings
from pathlib import Path
from typing import Any

import torch

import torchplug
from tests.core.strategies.scripts import common
from torchplug.callbacks.model_checkpoint import ModelCheckpoint
from torchplug.strategies.launchers.multiprocessing import collect_results, own_parameters, restore_results


def make_trainer(root: Path, checkpoint: ModelCheckpoint) -> torchplug.Trainer:
    return torchplug.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=False,
        callbacks=[checkpoint],
        enable_progress_bar=False,
        num_sanity_val_steps=0,
        default_root_dir=str(root),
    )


def through_a_file(results: dict[str, Any]) -> dict[str, Any]:
    """What the caller reads back: the launchers pass the results through ``torch.save``."""
    buffer = io.BytesIO()
    torch.save(results, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=False)  # type: ignore[no-any-return]


def test_the_caller_gets_the_weights_progress_metrics_and_checkpoint_paths(tmp_path: Path) -> None:
    worker_checkpoint = ModelCheckpoint(save_last=True)  # no dirpath: the worker decides it in setup()
    worker = make_trainer(tmp_path, worker_checkpoint)
    trained = common.Regressor(log_sync=True)
    worker.fit(trained, common.loader())
    results = through_a_file(collect_results(worker, "done", trained.state_dict()))

    caller_checkpoint = ModelCheckpoint(save_last=True)  # the caller's copy never ran setup()
    caller = make_trainer(tmp_path, caller_checkpoint)
    model = common.Regressor(log_sync=True)
    caller.module = model  # as Trainer.fit sets it before launching
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the state is the callback's own: nothing to warn about
        restore_results(caller, results)

    assert results["result"] == "done"
    assert common.state_hash(model.state_dict()) == common.state_hash(trained.state_dict())
    assert caller.global_step == worker.global_step == 16
    assert caller.callback_metrics.keys() == worker.callback_metrics.keys()
    assert caller.logged_metrics == worker.logged_metrics
    assert caller_checkpoint.dirpath == worker_checkpoint.dirpath == str((tmp_path / "checkpoints").resolve())
    assert caller_checkpoint.last_model_path == worker_checkpoint.last_model_path
    assert caller_checkpoint.best_model_path == worker_checkpoint.best_model_path
    assert caller_checkpoint.last_model_path.endswith("/last.ckpt")


def test_a_checkpoint_from_another_directory_still_restores_only_the_best_path(tmp_path: Path) -> None:
    # Adopting the saved directory is only for a callback that has not chosen one.
    saved = ModelCheckpoint(dirpath=tmp_path / "a", save_last=True).state_dict()
    saved.update(last_model_path=str(tmp_path / "a" / "last.ckpt"), best_model_path=str(tmp_path / "a" / "x.ckpt"))
    elsewhere = ModelCheckpoint(dirpath=tmp_path / "b", save_last=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        elsewhere.load_state_dict(saved)
    assert [str(w.message) for w in caught if "only best_model_path is restored" in str(w.message)]
    assert elsewhere.dirpath == str((tmp_path / "b").resolve())
    assert (elsewhere.best_model_path, elsewhere.last_model_path) == (str(tmp_path / "a" / "x.ckpt"), "")


def test_own_parameters_stops_sharing_tensors_with_the_caller() -> None:
    module = torch.nn.Linear(2, 2)
    module.register_buffer("count", torch.zeros(1))
    shared = [t.data for t in [*module.parameters(), *module.buffers()]]
    own_parameters(module)
    with torch.no_grad():
        for tensor in [*module.parameters(), *module.buffers()]:
            tensor.add_(1.0)
    for before, after in zip(shared, [*module.parameters(), *module.buffers()]):
        assert before.data_ptr() != after.data_ptr()
        torch.testing.assert_close(after.detach(), before + 1.0)
