"""The conformance suite against the generic accelerator on ``tpdev``, with no torchplug plugin for the device.

``core plugins verify torch`` runs in a child that has tpdev (two devices): every accelerator check,
the two-process DDP fit and the collectives over ``tpgloo`` included, must pass; none may be skipped.
"""

from __future__ import annotations

import json

import pytest

from tests.device_ext_support import DeviceSite
from tests.torch_device.conftest import CHILD_ENV

pytestmark = pytest.mark.slow


def test_the_generic_accelerator_conforms_on_tpdev(testdevice_site: DeviceSite) -> None:
    result = testdevice_site.run(
        "-m", "torchplug", "plugins", "verify", "torch", "--kind", "accelerator", "--json", env=CHILD_ENV, timeout=900
    )
    assert result.returncode == 0, f"exit code {result.returncode}\n{result.stdout}\n{result.stderr}"
    report = json.loads(result.stdout)

    outcomes = {r["check"]: r["outcome"] for r in report["checks"]}
    assert set(outcomes.values()) == {"passed"}, outcomes
    for check in ("ddp_fit", "collectives", "checkpoint_resume", "precision[bf16-mixed]", "rng_state"):
        assert outcomes.get(check) == "passed", (check, outcomes)
