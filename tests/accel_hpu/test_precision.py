"""HPU precisions: bf16 autocast on the HPU, fp8 through the transformer engine, and the names refused."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch

import torchplug
from tests.accel_hpu.models import Regressor, loader, quiet, reference_weights, weights
from torchplug import MisconfigurationError, PluginUnavailableError
from torchplug_hpu import HabanaUnavailableError, HPUPrecision
from torchplug_hpu.precision import hpu_precision_name

pytestmark = pytest.mark.usefixtures("fake_habana")


@pytest.mark.parametrize(
    ("given", "mapped"),
    [
        ("bf16-mixed", "hpu-bf16-mixed"),
        ("fp8", "hpu-fp8"),
        ("32-true", "32-true"),
        ("bf16-true", "bf16-true"),
        ("hpu-fp8", "hpu-fp8"),
    ],
)
def test_the_users_names_map_to_the_hpu_precisions(given: str, mapped: str) -> None:
    assert hpu_precision_name(given) == mapped


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("16-mixed", "Gaudi trains in bfloat16, which needs no loss scaler: use precision='bf16-mixed'"),
        ("16-true", "Gaudi trains in bfloat16: use precision='bf16-true'"),
        ("64-true", "HPUs have no float64"),
    ],
)
def test_other_precisions_are_refused_with_the_choices(tmp_path: Path, given: str, why: str) -> None:
    with pytest.raises(MisconfigurationError) as info:
        torchplug.Trainer(accelerator="hpu", precision=given, **quiet(tmp_path))
    assert str(info.value) == (
        f"precision={given!r} is not supported on HPUs (accelerator='hpu'): {why}. "
        "Choose one of '32-true', 'bf16-true', 'bf16-mixed', 'fp8'."
    )


def test_bf16_mixed_resolves_to_the_hpu_precision(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="hpu", precision="bf16-mixed", **quiet(tmp_path))
    assert (
        "precision            hpu-bf16-mixed  (precision='bf16-mixed', mapped to 'hpu-bf16-mixed'" in trainer.describe()
    )
    assert type(trainer.precision_plugin).__name__ == "HPUPrecision"


def test_bf16_mixed_trains_under_autocast_on_the_hpu(tmp_path: Path) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="hpu", precision="bf16-mixed", **quiet(tmp_path, max_epochs=2))
    trainer.fit(model, loader())
    assert set(model.autocast) == {(True, torch.bfloat16)}
    assert model.layer.weight.dtype == torch.float32
    assert weights(model) == pytest.approx(reference_weights(), abs=1e-6)  # the fake HPU computes in float32


def test_bf16_true_is_the_cores_half_precision(tmp_path: Path) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="hpu", precision="bf16-true", **quiet(tmp_path))
    trainer.fit(model, loader())
    assert type(trainer.precision_plugin).__name__ == "HalfPrecision"
    assert model.layer.weight.dtype == torch.bfloat16


def test_fp8_swaps_the_linear_layers_keeping_their_weights_and_trains_under_fp8_autocast(
    tmp_path: Path, fake_state: ModuleType
) -> None:
    model = Regressor()
    before = weights(model)
    trainer = torchplug.Trainer(accelerator="hpu", precision="fp8", **quiet(tmp_path, max_epochs=2))
    assert "precision            hpu-fp8  (precision='fp8', mapped to 'hpu-fp8'" in trainer.describe()
    trainer.precision_plugin.convert_module(model)
    assert type(model.layer).__module__ == "habana_frameworks.torch.hpex.experimental.transformer_engine"
    assert weights(model) == before  # lightning-habana re-initialised the replaced layers
    trainer.fit(model, loader())
    assert fake_state.fp8_forwards == 8  # 4 batches x 2 epochs, every one inside fp8_autocast
    assert set(model.autocast) == {(True, torch.bfloat16)}  # the rest of the step in bfloat16
    assert weights(model) == pytest.approx(reference_weights(), abs=1e-6)


def test_fp8_leaves_a_model_that_already_has_engine_layers_alone() -> None:
    from habana_frameworks.torch.hpex.experimental import transformer_engine as engine

    model = torch.nn.Sequential(engine.Linear(2, 2), torch.nn.Linear(2, 1))
    HPUPrecision("fp8").convert_module(model)
    assert type(model[1]) is torch.nn.Linear


def test_an_fp8_recipe_is_given_to_fp8_autocast(fake_state: ModuleType) -> None:
    precision = HPUPrecision("fp8", recipe={"margin": 1, "amax_history_len": 16})
    with precision.forward_context():
        assert fake_state.fp8_enabled and torch.is_autocast_enabled("hpu")
    assert not fake_state.fp8_enabled
    assert (fake_state.fp8_recipes[-1].margin, fake_state.fp8_recipes[-1].amax_history_len) == (1, 16)


def test_fp8_is_refused_where_habana_has_no_transformer_engine(tmp_path: Path, refake: Callable[..., None]) -> None:
    refake(FAKE_HABANA_NO_FP8="1")
    with pytest.raises(
        HabanaUnavailableError,
        match=r"precision='fp8' needs Intel Gaudi's transformer engine "
        r"\(habana_frameworks\.torch\.hpex\.experimental\."
        r"transformer_engine\), which the installed habana_frameworks "
        r"does not have .* Hint: upgrade Intel Gaudi's software stack to "
        r"1\.14 or later, or use precision='bf16-mixed'",
    ):
        torchplug.Trainer(accelerator="hpu", precision="fp8", **quiet(tmp_path))


def test_fp8_is_refused_on_a_first_generation_gaudi(tmp_path: Path, refake: Callable[..., None]) -> None:
    refake(FAKE_HPU_NAME="GAUDI")
    with pytest.raises(
        PluginUnavailableError,
        match=r"precision='fp8' needs Gaudi2 or newer, but this HPU is a GAUDI\. Hint: use "
        r"precision='bf16-mixed'",
    ):
        torchplug.Trainer(accelerator="hpu", precision="fp8", **quiet(tmp_path))


def test_the_plugin_refuses_what_it_does_not_do() -> None:
    with pytest.raises(
        MisconfigurationError,
        match=r"precision='16-mixed' is not supported by HPUPrecision; choose "
        r"'bf16-mixed' or 'fp8'\.",
    ):
        HPUPrecision("16-mixed")
    with pytest.raises(MisconfigurationError, match=r"recipe= is for precision='fp8'"):
        HPUPrecision("bf16-mixed", recipe={"margin": 1})


def test_outputs_come_back_as_float32() -> None:
    output = HPUPrecision().convert_output({"y": torch.zeros(2, dtype=torch.bfloat16), "i": torch.zeros(2).long()})
    assert (output["y"].dtype, output["i"].dtype) == (torch.float32, torch.int64)
