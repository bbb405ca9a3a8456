"""IPU precisions: the user's names mapped, the others refused, and what each does to PopTorch and the model."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
import torch

import torchplug
from tests.accel_ipu.fake import forget_poptorch
from tests.accel_ipu.models import Regressor, loader, quiet
from torchplug import MisconfigurationError
from torchplug_ipu import IPUPrecision, IPUStrategy
from torchplug_ipu.precision import ipu_precision_name

pytestmark = pytest.mark.usefixtures("fake_poptorch")


@pytest.mark.parametrize(
    ("given", "mapped"),
    [
        ("32-true", "ipu-32-true"),
        ("16-mixed", "ipu-16-mixed"),
        ("16-true", "ipu-16-true"),
        ("ipu-16-true", "ipu-16-true"),
    ],
)
def test_the_users_names_map_to_the_ipu_precisions(given: str, mapped: str) -> None:
    assert ipu_precision_name(given) == mapped


@pytest.mark.parametrize(
    ("given", "why"),
    [
        ("bf16-mixed", "IPUs have no bfloat16"),
        ("bf16-true", "IPUs have no bfloat16"),
        ("64-true", "IPUs compute in float32 and float16 only"),
    ],
)
def test_other_precisions_are_refused_with_the_choices(tmp_path: Path, given: str, why: str) -> None:
    with pytest.raises(MisconfigurationError) as info:
        torchplug.Trainer(accelerator="ipu", precision=given, **quiet(tmp_path))
    assert str(info.value) == (
        f"precision={given!r} is not supported on IPUs (accelerator='ipu'): {why}. "
        "Choose one of '32-true', '16-mixed', '16-true'."
    )


@pytest.mark.parametrize("given", ["16-mixed", "16-true"])
def test_the_trainer_resolves_the_ipu_precision(tmp_path: Path, given: str) -> None:
    trainer = torchplug.Trainer(accelerator="ipu", precision=given, **quiet(tmp_path))
    assert trainer.precision_plugin.precision == given
    assert f"precision            ipu-{given}  (precision={given!r}, mapped to 'ipu-{given}'" in trainer.describe()


def test_16_true_halves_the_model_and_the_inputs_and_turns_on_stochastic_rounding(tmp_path: Path) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="ipu", precision="16-true", **quiet(tmp_path))
    trainer.fit(model, loader())
    assert model.layer.weight.dtype == torch.float16
    assert {dtype for dtype, _ in model.seen} == {torch.float16}
    training, inference = trainer.strategy.training_options, trainer.strategy.inference_options
    assert (training.Precision.partials_type, training.Precision.stochastic_rounding) == (torch.float32, True)
    assert (inference.Precision.partials_type, inference.Precision.stochastic_rounding) == (torch.float32, False)
    predictions = trainer.predict(model, loader(n=16))
    assert {p.dtype for p in predictions} == {torch.float32}


def test_16_mixed_keeps_float32_weights_and_computes_in_a_poptorch_autocast_region(
    tmp_path: Path, fake_state: ModuleType
) -> None:
    model = Regressor()
    trainer = torchplug.Trainer(accelerator="ipu", precision="16-mixed", **quiet(tmp_path))
    trainer.fit(model, loader())
    assert model.layer.weight.dtype == torch.float32
    assert {dtype for dtype, _ in model.seen} == {torch.float16}  # cast on the host
    assert fake_state.autocast_regions == len(model.seen)
    assert trainer.strategy.training_options.Precision.partials_type == torch.float32
    assert trainer.strategy.training_options.Precision.stochastic_rounding is False


def test_16_mixed_is_refused_where_poptorch_has_no_autocast(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_POPTORCH_NO_AUTOCAST", "1")
    forget_poptorch()
    trainer = torchplug.Trainer(accelerator="ipu", precision="16-mixed", **quiet(tmp_path))
    with pytest.raises(
        MisconfigurationError,
        match=r"precision='16-mixed' on IPUs runs the step in a "
        r"poptorch\.autocast region, which the installed poptorch does not "
        r"offer\. Hint: use precision='16-true'",
    ):
        trainer.fit(Regressor(), loader())


def test_32_true_changes_nothing() -> None:
    precision = IPUPrecision()
    module = torch.nn.Linear(2, 2)
    assert precision.convert_module(module).weight.dtype == torch.float32
    batch = (torch.zeros(2), torch.zeros(2, dtype=torch.long))
    assert precision.convert_input(batch) is batch


def test_gradient_clipping_is_refused_with_the_alternative(tmp_path: Path) -> None:
    trainer = torchplug.Trainer(accelerator="ipu", gradient_clip_val=1.0, **quiet(tmp_path))
    with pytest.raises(
        MisconfigurationError,
        match=r"gradient_clip_val is not supported on IPUs: the gradients never "
        r"leave the IPU\. Hint: .*poptorch\.optim\.LAMB",
    ):
        trainer.fit(Regressor(), loader())


def test_an_unknown_precision_name_lists_the_choices() -> None:
    with pytest.raises(
        MisconfigurationError,
        match=r"precision='bf16-true' is not supported by IPUPrecision; choose "
        r"'32-true', '16-mixed', '16-true'\.",
    ):
        IPUPrecision("bf16-true")
    assert repr(IPUStrategy(precision=IPUPrecision("16-true")).precision) == "IPUPrecision(precision='16-true')"
