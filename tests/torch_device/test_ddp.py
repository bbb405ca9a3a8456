"""Two processes train with ``strategy="ddp"`` on two ``tpdev`` devices through the process group torch names for it.

The process-group backend is asked of torch (``get_default_backend_for_device("tpdev")``:
``tpgloo``, gloo on host copies of the device tensors). Two ranks on half batches reach the
weights of one process on the whole batch, up to float rounding.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.device_ext_support import DeviceSite
from tests.torch_device.conftest import run_scenario

pytestmark = pytest.mark.slow


def test_two_ranks_on_half_batches_reach_the_weights_of_one_process(
    testdevice_site: DeviceSite, tmp_path: Path
) -> None:
    ranks = run_scenario(testdevice_site, tmp_path, "ddp", "2", "16", ranks=2)
    (single,) = run_scenario(testdevice_site, tmp_path, "ddp", "1", "32")

    for rank, report in enumerate(ranks):
        assert report["world_size"] == 2
        assert report["backend"] == "tpgloo"
        assert report["group"] == "HostStagedProcessGroup"
        assert report["parameter_devices"] == [f"tpdev:{rank}"]
        assert report["batch_devices"] == [f"tpdev:{rank}"]
        assert report["steps"] == single["steps"] == 16
    assert ranks[0]["weights"] == ranks[1]["weights"]
    for name, expected in single["weights"].items():
        torch.testing.assert_close(
            torch.tensor(ranks[0]["weights"][name]), torch.tensor(expected), rtol=1e-5, atol=1e-6, msg=name
        )
    assert re.search(r"^devices\s+tpdev:0, tpdev:1\s+\(devices=2\)$", ranks[0]["describe"], re.M)
