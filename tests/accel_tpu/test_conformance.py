"""torchplug's conformance suite against accel-tpu's plugins: on the fake torch_xla, and without torch_xla.

There is no TPU here: the fake (``fake_vendor/torch_xla``) stands in for torch_xla at its import
boundary with two TPU chips, so the suite runs every check, the two-process ones included
(``xmp.spawn`` starts real processes). Without torch_xla, every check that needs it is skipped
with the install hint, as on a user's machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.accel_tpu.fake import use_fake, without_torch_xla
from torchplug.testing import AcceleratorSuite, ClusterEnvironmentSuite, PrecisionSuite, StrategySuite


class OnFakeTorchXLA:
    """Every check runs with the fake torch_xla on the path, seeing two TPU chips."""

    @pytest.fixture
    def plugin_setup(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        for _ in use_fake(monkeypatch, chips=2):
            yield


class TestTPUConformance(OnFakeTorchXLA, AcceleratorSuite):
    plugin = "tpu"


class TestTPUWithoutTorchXLA(AcceleratorSuite):
    plugin = "tpu"

    @pytest.fixture
    def plugin_setup(self) -> Iterator[None]:
        yield from without_torch_xla()


class TestXLAStrategyConformance(OnFakeTorchXLA, StrategySuite):
    plugin = "xla"


class TestSingleXLAStrategyConformance(OnFakeTorchXLA, StrategySuite):
    plugin = "single_xla"


class TestXLABf16TrueConformance(OnFakeTorchXLA, PrecisionSuite):
    plugin = "xla-bf16-true"


class TestXLABf16MixedConformance(OnFakeTorchXLA, PrecisionSuite):
    plugin = "xla-bf16-mixed"


class TestXLAEnvironmentConformance(OnFakeTorchXLA, ClusterEnvironmentSuite):
    plugin = "xla_runtime"
    # Never detected (the XLA strategies bring it): the variable torch_xla's runtime reads declares the job.
    environment_variables = {"PJRT_DEVICE": "TPU"}
    known_failures = {
        "ranks": "main_address and main_port raise NotImplementedError on purpose: torch_xla's runtime does its "
        "own rendezvous, and the XLA strategies never ask for them",
    }
