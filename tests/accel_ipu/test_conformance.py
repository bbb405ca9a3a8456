"""torchplug's conformance suite against accel-ipu's plugins: on the fake poptorch, and without it.

There is no IPU here: the fake (``fake_vendor/poptorch``) stands in for poptorch at its import
boundary, with four IPUs, so every check runs. Without poptorch, every check that needs it is
skipped with the install hint, as on a user's machine.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.accel_ipu.fake import use_fake, without_poptorch
from torchplug.testing import AcceleratorSuite, PrecisionSuite, StrategySuite

#: Found by the suite: the optimizer's state stays on the IPUs, so a checkpoint holds the host
#: optimizer's state, which never stepped (empty: no SGD momentum), and a resumed run restarts it.
#: A run with a stateless optimizer (SGD without momentum) resumes exactly.
OPTIMIZER_STATE_ON_DEVICE = {
    "checkpoint_resume": "the optimizer state (SGD momentum) stays on the IPUs and is not saved in checkpoints"
}


class OnFakePoptorch:
    """Every check runs with the fake poptorch on the path, seeing four IPUs."""

    @pytest.fixture
    def plugin_setup(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        for _ in use_fake(monkeypatch, ipus=4):
            yield


class TestIPUConformance(OnFakePoptorch, AcceleratorSuite):
    plugin = "ipu"
    known_failures = OPTIMIZER_STATE_ON_DEVICE


class TestIPUWithoutPoptorch(AcceleratorSuite):
    plugin = "ipu"

    @pytest.fixture
    def plugin_setup(self) -> Iterator[None]:
        yield from without_poptorch()


class TestIPUStrategyConformance(OnFakePoptorch, StrategySuite):
    plugin = "ipu"
    known_failures = OPTIMIZER_STATE_ON_DEVICE


class TestIPU16MixedConformance(OnFakePoptorch, PrecisionSuite):
    plugin = "ipu-16-mixed"
    known_failures = OPTIMIZER_STATE_ON_DEVICE
