"""torchplug's conformance suite against accel-hpu's plugins: on the fake habana_frameworks, and without it.

There is no Gaudi here: the fake (``fake_vendor/habana_frameworks``) stands in for the vendor
library at its import boundary (``hpu`` tensors live on the CPU, ``hccl`` runs gloo underneath),
so every check runs, the two-process ones included. Without habana_frameworks, every check that
needs it is skipped with the install hint, as on a user's machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.accel_hpu.fake import use_fake, without_habana
from torchplug.testing import AcceleratorSuite, PrecisionSuite, StrategySuite


class OnFakeHabana:
    """Every check runs with the fake habana_frameworks on the path, seeing two Gaudi2 HPUs."""

    @pytest.fixture
    def plugin_setup(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        for _ in use_fake(monkeypatch, hpus=2):
            yield


class TestHPUConformance(OnFakeHabana, AcceleratorSuite):
    plugin = "hpu"


class TestHPUWithoutHabana(AcceleratorSuite):
    plugin = "hpu"

    @pytest.fixture
    def plugin_setup(self) -> Iterator[None]:
        yield from without_habana()


class TestHPUSingleConformance(OnFakeHabana, StrategySuite):
    plugin = "hpu_single"


class TestHPUParallelConformance(OnFakeHabana, StrategySuite):
    plugin = "hpu_parallel"


class TestHPUBf16MixedConformance(OnFakeHabana, PrecisionSuite):
    plugin = "hpu-bf16-mixed"


class TestHPUFp8Conformance(OnFakeHabana, PrecisionSuite):
    plugin = "hpu-fp8"
