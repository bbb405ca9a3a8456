"""The DeepSpeed config: from arguments, a dict or a JSON file, with the Trainer's settings (no processes)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

import torchplug
from torchplug import MisconfigurationError
from torchplug_deepspeed import DeepSpeedPrecision, DeepSpeedStrategy, _vendor
from torchplug_deepspeed._config import finalize_config


def final(strategy: DeepSpeedStrategy, **overrides: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "numerics": {},
        "precision": "32-true",
        "clip_val": None,
        "clip_algorithm": "norm",
        "micro_batch_size": 4,
        "optimizer_on_cpu": True,
    }
    return finalize_config(strategy.base_config, **{**settings, **overrides})


@pytest.mark.parametrize(
    ("name", "stage", "zero"),
    [
        ("deepspeed", 2, {}),
        ("deepspeed_stage_1", 1, {}),
        ("deepspeed_stage_2", 2, {}),
        ("deepspeed_stage_2_offload", 2, {"offload_optimizer": {"device": "cpu"}}),
        ("deepspeed_stage_3", 3, {}),
        ("deepspeed_stage_3_offload", 3, {"offload_optimizer": {"device": "cpu"}, "offload_param": {"device": "cpu"}}),
    ],
)
def test_each_name_builds_lightnings_configuration(tmp_path: Path, name: str, stage: int, zero: dict[str, Any]) -> None:
    trainer = torchplug.Trainer(accelerator="cpu", devices=2, strategy=name, default_root_dir=tmp_path, logger=False)
    strategy = trainer.strategy
    assert isinstance(strategy, DeepSpeedStrategy)
    assert strategy.zero_stage == stage and strategy.zero_stage_3 == (stage == 3)
    built = strategy.base_config["zero_optimization"]
    for key, value in zero.items():
        assert built[key]["device"] == value["device"]
    assert set(built) & {"offload_optimizer", "offload_param"} == set(zero)
    assert isinstance(trainer.precision_plugin, DeepSpeedPrecision)
    (line,) = [line for line in trainer.describe().splitlines() if line.startswith("strategy ")]
    assert line.split()[1] == name and "from strategy-deepspeed 0.1.0" in line
    assert trainer.world_size == 2


@pytest.mark.parametrize(
    ("given", "plugin"),
    [("32-true", "32-true"), ("bf16-mixed", "bf16-mixed"), ("16-mixed", "16-mixed"), ("bf16", "bf16-mixed")],
)
def test_precision_names_map_to_deepspeeds_plugin(tmp_path: Path, given: str, plugin: str) -> None:
    trainer = torchplug.Trainer(accelerator="cpu", strategy="deepspeed", precision=given, default_root_dir=tmp_path)
    assert repr(trainer.precision_plugin) == f"DeepSpeedPrecision({plugin!r})"
    assert f"deepspeed-{plugin}" in trainer.describe()


def test_a_precision_deepspeed_does_not_have_is_refused_with_the_choices(tmp_path: Path) -> None:
    with pytest.raises(MisconfigurationError, match=r"precision='64-true' is not supported by DeepSpeed\. Supported: "):
        torchplug.Trainer(accelerator="cpu", strategy="deepspeed", precision="64-true", default_root_dir=tmp_path)


def test_the_precision_writes_deepspeeds_numerics() -> None:
    assert DeepSpeedPrecision("32-true").ds_config() == {}
    assert DeepSpeedPrecision("bf16-mixed").ds_config() == {"bf16": {"enabled": True}}
    assert DeepSpeedPrecision("16-true").ds_config() == {"fp16": {"enabled": True}}
    batch = DeepSpeedPrecision("bf16-mixed").convert_input({"x": torch.ones(2), "i": torch.ones(2, dtype=torch.long)})
    assert (batch["x"].dtype, batch["i"].dtype) == (torch.bfloat16, torch.long)
    assert DeepSpeedPrecision("16-true").convert_module(torch.nn.Linear(2, 2)).weight.dtype == torch.float16
    with pytest.raises(MisconfigurationError, match="DeepSpeed trains in 32-true, bf16-mixed"):
        DeepSpeedPrecision("64-true")


def test_config_as_a_dict_a_json_file_or_arguments(tmp_path: Path) -> None:
    config = {"zero_optimization": {"stage": 3, "overlap_comm": False}, "steps_per_print": 7}
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(config))
    from_dict, from_file = DeepSpeedStrategy(config=config), DeepSpeedStrategy(config=str(path))
    assert from_dict.base_config == from_file.base_config == config
    assert from_dict.base_config is not config  # a copy: the strategy writes into it
    from_arguments = DeepSpeedStrategy(stage=1, reduce_bucket_size=1000, pin_memory=True)
    assert from_arguments.base_config["zero_optimization"]["reduce_bucket_size"] == 1000
    assert from_arguments.zero_stage == 1


def test_the_trainers_settings_are_written_into_the_config() -> None:
    config = final(DeepSpeedStrategy(stage=2), clip_val=0.5, numerics={"bf16": {"enabled": True}})
    assert config["gradient_accumulation_steps"] == 1
    assert config["managed_gradient_accumulation"] is False  # the loop owns the step
    assert config["gradient_clipping"] == 0.5
    assert config["train_micro_batch_size_per_gpu"] == 4
    assert config["bf16"] == {"enabled": True}
    # DeepSpeed clips at 1.0 by default; the Trainer's default is no clipping, written out.
    assert final(DeepSpeedStrategy())["gradient_clipping"] == 0.0
    fp16 = final(DeepSpeedStrategy(loss_scale=128.0), numerics={"fp16": {"enabled": True}})["fp16"]
    assert fp16["enabled"] is True and fp16["loss_scale"] == 128.0


@pytest.mark.parametrize(
    ("config", "settings", "message"),
    [
        ({"gradient_accumulation_steps": 4}, {}, r"Trainer\(accumulate_grad_batches=4\)"),
        ({"managed_gradient_accumulation": True}, {}, "must be false or absent"),
        ({"gradient_clipping": 1.0}, {"clip_val": 0.5}, r"gradient_clipping=1.0, but gradient_clip_val=0.5"),
        ({"bf16": {"enabled": True}}, {}, r"enables bf16, but precision='32-true'"),
        ({}, {"clip_val": 1.0, "clip_algorithm": "value"}, "DeepSpeed clips gradients by their norm only"),
    ],
)
def test_a_config_that_contradicts_the_trainer_is_refused(
    config: dict[str, Any], settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(MisconfigurationError, match=message):
        final(DeepSpeedStrategy(config=config), **settings)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: DeepSpeedStrategy(config={}, stage=3), "got config= and also stage=3"),
        (lambda: DeepSpeedStrategy(config={"optimizer": {"type": "Adam"}}), "comes from configure_optimizers"),
        (lambda: DeepSpeedStrategy(config="/nonexistent/ds.json"), "no such file"),
        (lambda: DeepSpeedStrategy(stage=4), r"stage=4\): choose 0, 1, 2 or 3"),
        (lambda: DeepSpeedStrategy(stage=2, offload_parameters=True), "offloaded by ZeRO stage 3 only"),
    ],
)
def test_arguments_that_cannot_be_honoured_are_refused(make: Any, message: str) -> None:
    with pytest.raises(MisconfigurationError, match=message):
        make()


def test_an_unknown_argument_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="unexpected arguments: stages"):
        DeepSpeedStrategy(stages=3)


def test_deepspeeds_accelerator_follows_the_trainers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DS_ACCELERATOR", "cuda")
    with pytest.raises(_vendor.DeepSpeedUnavailableError, match="DS_ACCELERATOR='cuda' asks DeepSpeed for another"):
        _vendor.use_accelerator("cpu")
    monkeypatch.delenv("DS_ACCELERATOR")
    with pytest.raises(_vendor.DeepSpeedUnavailableError, match="no accelerator for torch device type 'xla'"):
        _vendor.use_accelerator("xla")
    assert _vendor.use_accelerator("cpu")._name == "cpu"
    from deepspeed.accelerator import get_accelerator

    assert get_accelerator()._name == "cpu"


def test_an_old_deepspeed_is_refused_with_the_version_needed() -> None:
    with pytest.raises(_vendor.DeepSpeedUnavailableError, match=r"deepspeed 0.14.0 is too old: .* 0.19.8 or newer"):
        _vendor._check_version("0.14.0")
    _vendor._check_version("0.19.8+cpu")


def test_a_checkpoint_in_the_middle_of_accumulation_is_refused(tmp_path: Path) -> None:
    checkpoint = {"optimizer_states": [{}], "accumulated_gradients": [torch.zeros(1)]}
    with pytest.raises(MisconfigurationError, match="in the middle of gradient accumulation"):
        DeepSpeedStrategy().save_checkpoint(checkpoint, str(tmp_path / "x.ckpt"))


def test_components_deepspeed_cannot_drive_are_refused_when_the_trainer_is_built(tmp_path: Path) -> None:
    from torchplug.precision.double import DoublePrecision

    with pytest.raises(
        MisconfigurationError, match="DeepSpeedStrategy needs a DeepSpeedPrecision, got DoublePrecision"
    ):
        torchplug.Trainer(accelerator="cpu", strategy=DeepSpeedStrategy(precision=DoublePrecision()))
    with pytest.raises(MisconfigurationError, match="cannot honour AsyncCheckpointIO"):
        torchplug.Trainer(accelerator="cpu", strategy="deepspeed", plugins=["async"], default_root_dir=tmp_path)


def test_attach_without_a_precision_gives_deepspeeds_float32() -> None:
    from torchplug.accelerators.cpu import CPUAccelerator
    from torchplug.environments.local import LocalEnvironment

    strategy = DeepSpeedStrategy()
    strategy.attach(accelerator=CPUAccelerator(), cluster_environment=LocalEnvironment())
    assert repr(strategy.precision) == "DeepSpeedPrecision('32-true')"
    assert strategy.launcher is not None  # the script re-launcher, as for ddp
