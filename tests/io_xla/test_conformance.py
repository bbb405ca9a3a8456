"""torchplug's conformance suite against io-xla's ``xla`` checkpoint IO: without torch_xla, and on the fake one.

Without torch_xla (the state of this machine) the IO is the core's torch IO with every tensor
moved to the CPU, and it trains on the CPU. With the fake torch_xla (shared with accel-tpu's
tests) it trains on a (fake) TPU when accel-tpu is installed beside it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.accel_tpu.fake import use_fake, without_torch_xla
from torchplug.testing import CheckpointIOSuite


class TestXLACheckpointIOConformance(CheckpointIOSuite):
    plugin = "xla"

    @pytest.fixture
    def plugin_setup(self) -> Iterator[None]:
        yield from without_torch_xla()


class TestXLACheckpointIOOnFakeTorchXLA(CheckpointIOSuite):
    plugin = "xla"

    @pytest.fixture
    def plugin_setup(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        for _ in use_fake(monkeypatch):
            yield
