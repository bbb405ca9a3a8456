"""torchplug's conformance suite against accel-mps: on this Linux machine as it is, and on the faked Mac.

On Linux every check that needs MPS is skipped with the accelerator's own reason, as on a user's
machine without a Mac. On the faked Mac (torch's MPS boundary only, see conftest.py) the checks that
ask the accelerator run for real; the ones that put tensors on the device cannot, since no Metal
device exists here: they are listed below with that reason, not silently dropped.
"""

from __future__ import annotations

from typing import ClassVar

import pytest

from torchplug.testing import AcceleratorSuite

_NO_DEVICE = "the Mac is faked at torch's MPS boundary: no tensor can live on a Metal device here"


class TestMPSOnLinux(AcceleratorSuite):
    plugin = "mps"


class TestMPSOnAFakedMac(AcceleratorSuite):
    plugin = "mps"
    skipped_checks: ClassVar[dict[str, str]] = {
        name: _NO_DEVICE
        for name in (
            "device",
            "describe",
            "fit",
            "precision[64-true]",
            "precision[32-true]",
            "precision[16-mixed]",
            "precision[bf16-mixed]",
            "precision[16-true]",
            "precision[bf16-true]",
            "precision[declared]",
            "checkpoint_resume",
            "ddp_fit",
            "collectives",
        )
    }

    @pytest.fixture
    def plugin_setup(self, fake_mac: object) -> None:
        """Every check runs on the faked Mac (the fixture undoes it afterwards)."""
