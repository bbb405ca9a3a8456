"""Two real processes train with DistributedDataParallel on ``tpdev`` through the ``tpgloo`` process group.

``tpgloo`` runs gloo on host copies of device tensors. DDP on ``tpdev`` must reach the same
weights as DDP on the CPU over plain gloo (the same arithmetic, so exactly), and the weights of one
process on the full batch (up to float rounding). See ddp_script.py for what each rank does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from tests.device_ext import ddp_script
from tests.device_ext_support import DeviceSite

SCRIPT = Path(ddp_script.__file__)

pytestmark = pytest.mark.slow


def run_ddp(site: DeviceSite, tmp_path: Path, device: str, backend: str) -> list[dict[str, Any]]:
    """Run ddp_script.py for ``device``/``backend`` and return each rank's report."""
    out = tmp_path / f"{device}-{backend.replace(':', '_').replace(',', '+')}"
    out.mkdir()
    result = site.run(str(SCRIPT), str(out), device, backend, env={"TPDEV_DEVICE_COUNT": "2"})
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    return [json.loads((out / f"rank{rank}.json").read_text()) for rank in range(ddp_script.WORLD_SIZE)]


def assert_close(actual: dict[str, list[Any]], expected: dict[str, list[Any]], exact: bool) -> None:
    assert actual.keys() == expected.keys()
    for name in expected:
        got, want = torch.tensor(actual[name]), torch.tensor(expected[name])
        if exact:
            assert torch.equal(got, want), name
        else:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def cpu_gloo_reports(testdevice_site: DeviceSite, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """DDP on the CPU over plain gloo: the arithmetic tpgloo must reproduce."""
    return run_ddp(testdevice_site, tmp_path_factory.mktemp("ddp-cpu"), "cpu", "gloo")


@pytest.mark.parametrize(
    "backend",
    [
        pytest.param("tpgloo", id="tpgloo"),
        pytest.param("cpu:gloo,tpdev:tpgloo", id="per-device"),
        pytest.param("default", id="torch-picks-the-accelerators-backend"),
    ],
)
def test_ddp_on_tpdev_trains_like_gloo_on_the_cpu(
    testdevice_site: DeviceSite, tmp_path: Path, cpu_gloo_reports: list[dict[str, Any]], backend: str
) -> None:
    reports = run_ddp(testdevice_site, tmp_path, "tpdev", backend)

    for rank, report in enumerate(reports):
        assert report["group"] == "HostStagedProcessGroup"
        assert "tpdev:tpgloo" in report["backend_config"]
        assert report["parameter_devices"] == [f"tpdev:{rank}"]
        assert report["gradient_devices"] == [f"tpdev:{rank}"]
    assert_close(reports[1]["weights"], reports[0]["weights"], exact=True)
    assert_close(reports[0]["weights"], cpu_gloo_reports[0]["weights"], exact=True)
    assert_close(reports[0]["weights"], ddp_script.train_one_process(), exact=False)


def test_every_collective_returns_device_tensors_with_gloos_results(
    testdevice_site: DeviceSite, tmp_path: Path, cpu_gloo_reports: list[dict[str, Any]]
) -> None:
    reports = run_ddp(testdevice_site, tmp_path, "tpdev", "tpgloo")

    for rank, report in enumerate(reports):
        expected = cpu_gloo_reports[rank]["collectives"]
        for name, seen in report["collectives"].items():
            if name == "all_gather_object":
                assert seen == [{"rank": 0}, {"rank": 1}]
                continue
            if name == "broadcast_object_list":
                assert seen == [{"from": 1}]
                continue
            assert seen["values"] == expected[name]["values"], name
            assert set(seen["devices"]) == {f"tpdev:{rank}"}, name
    assert reports[0]["collectives"]["all_reduce"]["values"] == [[3.0]]
    assert reports[1]["collectives"]["send_recv"]["values"] == [[42.0]]
