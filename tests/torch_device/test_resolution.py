"""How ``tpdev`` is reached with no plugin for it, and how a dedicated plugin for it always wins."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.device_ext_support import REPO_ROOT, DeviceSite
from tests.torch_device.conftest import CHILD_ENV

pytestmark = pytest.mark.slow

# A dedicated accelerator for tpdev, as a vendor's plugin would register it. It subclasses the core's
# base class, not the generic accelerator.
DEDICATED = """
import json, warnings, torch, torchplug
from torchplug import Accelerator
from torchplug._host import plugin_host

class Dedicated(Accelerator):
    device_type = "tpdev"
    auto_priority = 60
    is_available = staticmethod(lambda: True)
    auto_device_count = staticmethod(lambda: 2)
    parse_devices = staticmethod(lambda devices: int(devices))
    get_parallel_devices = staticmethod(lambda n: [torch.device("tpdev", i) for i in range(n)])
    def setup_device(self, device): pass
    def teardown(self): pass

registry = plugin_host().registry("accelerator")
registry.register({name!r}, Dedicated, description="a dedicated tpdev plugin")

def outcome(**kwargs):
    try:
        trainer = torchplug.Trainer(logger=False, enable_checkpointing=False, **kwargs)
    except Exception as exc:
        return [type(exc).__name__, str(exc)]
    return [type(trainer.accelerator).__name__, trainer.describe().splitlines()[0]]

from torchplug.accelerators.torch_device import TorchDeviceAccelerator
result = {{
    "auto": outcome(accelerator="auto", devices=1),
    "tpdev": outcome(accelerator="tpdev", devices=1),
    "torch": outcome(accelerator="torch", devices=1),
    "generic_reason": TorchDeviceAccelerator.unavailable_reason(),
}}
print(json.dumps(result))
"""


def test_the_device_type_is_a_name_of_the_generic_accelerator(device_python: Any) -> None:
    result = device_python(
        """
        import json, torchplug
        from torchplug.accelerators.torch_device import TorchDeviceAccelerator
        by_type = torchplug.Trainer(accelerator="tpdev", devices=[1], logger=False)
        by_name = torchplug.Trainer(accelerator="torch", devices="0,1", strategy="ddp", logger=False)
        print(json.dumps([repr(by_type.accelerator), str(by_type.strategy.root_device),
                          by_type.describe().splitlines()[0], repr(by_name.accelerator),
                          [str(d) for d in by_name.strategy.parallel_devices],
                          by_name.accelerator.process_group_backend, TorchDeviceAccelerator.is_available(),
                          TorchDeviceAccelerator.auto_device_count()]))
        """
    )

    assert result[0] == "TorchDeviceAccelerator(device_type='tpdev')"
    assert result[1] == "tpdev:1"
    assert result[2].startswith("accelerator")
    assert "accelerator='tpdev': torch's device type, served by the generic accelerator 'torch' from core" in result[2]
    assert result[3] == "TorchDeviceAccelerator(device_type='tpdev')"
    assert result[4] == ["tpdev:0", "tpdev:1"]
    assert result[5] == "tpgloo"  # torch.distributed.get_default_backend_for_device("tpdev")
    assert result[6:] == [True, 2]


def test_another_device_type_is_an_unknown_name_that_says_what_torch_has(device_python: Any) -> None:
    result = device_python(
        """
        import json, torchplug
        try:
            torchplug.Trainer(accelerator="xpu")
        except torchplug.UnknownPluginError as exc:
            print(json.dumps(str(exc)))
        """
    )

    assert result.startswith("Unknown accelerator 'xpu'.")
    assert result.endswith("Nor is 'xpu' a torch device type served here (torch's current accelerator is 'tpdev').")


@pytest.mark.parametrize(
    ("devices", "message"),
    [
        (3, "devices=3 is not valid for the 'tpdev' devices torch reports (2 device(s), ids 0-1)"),
        ([0, 0], "devices=[0, 0] is not valid"),
        ([2], "devices=[2] is not valid"),
        (True, "devices=True is not valid"),
    ],
)
def test_devices_beyond_what_torch_reports_are_refused_in_the_users_words(
    device_python: Any, devices: object, message: str
) -> None:
    result = device_python(
        f"""
        import json, torchplug
        try:
            torchplug.Trainer(accelerator="tpdev", devices={devices!r})
        except torchplug.MisconfigurationError as exc:
            print(json.dumps(str(exc)))
        """
    )

    assert message in result


def test_a_plugin_claiming_the_device_type_by_its_class_wins_over_the_generic_one(device_python: Any) -> None:
    result = device_python(DEDICATED.format(name="acme"))

    assert result["auto"][0] == "Dedicated"
    assert "accelerator='auto': highest priority available (60)" in result["auto"][1]
    claim = (
        "served by the accelerator 'acme' (device_type='tpdev') from user code (registered at run time), "
        "which always wins over the generic one"
    )
    assert claim in result["generic_reason"]
    assert result["tpdev"][0] == "PluginUnavailableError"
    assert claim in result["tpdev"][1]
    assert result["torch"][0] == "PluginUnavailableError"
    assert claim in result["torch"][1]


def test_a_plugin_registered_under_the_device_types_name_is_that_name(device_python: Any) -> None:
    result = device_python(DEDICATED.format(name="tpdev"))

    assert result["auto"][0] == result["tpdev"][0] == "Dedicated"
    assert (
        "served by the accelerator 'tpdev' from user code (registered at run time), which always wins"
        in result["generic_reason"]
    )


def test_auto_tells_nothing_about_the_generic_accelerator_standing_aside(device_python: Any) -> None:
    result = device_python(
        DEDICATED.format(name="acme")
        + """
import torchplug.trainer.auto_accelerator as auto
auto._reset_warnings()
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    trainer = torchplug.Trainer(accelerator="auto", devices=1, logger=False)
print(json.dumps([[str(w.message) for w in caught], trainer.describe()]))
"""
    )
    caught, describe = result

    assert caught == []
    assert (
        "- torch (core" in describe
        and "skipped, nothing to serve: torch's accelerator 'tpdev' is served by" in describe
    )


def test_the_priority_override_changes_what_auto_picks(device_python: Any) -> None:
    result = device_python(
        """
        import json, torchplug
        trainer = torchplug.Trainer(accelerator="auto", devices=1, logger=False)
        print(json.dumps([repr(trainer.accelerator), trainer.describe().splitlines()[:3]]))
        """,
        TORCHPLUG_ACCELERATOR_PRIORITY="torch=-5",
    )

    assert result[0] == "CPUAccelerator()"
    assert "- torch (core" in result[1][1] and "lost, priority -5 < 0" in result[1][1]


def test_the_trainer_says_what_it_uses_and_names_the_device_a_cpu_run_leaves_unused(device_python: Any) -> None:
    result = device_python(
        """
        import json, logging, torchplug
        records = []
        handler = logging.Handler()
        handler.emit = lambda record: records.append(record.getMessage())
        logging.getLogger("torchplug").addHandler(handler)
        torchplug.Trainer(accelerator="cpu", devices=2, logger=False)
        torchplug.Trainer(accelerator="tpdev", devices=2, logger=False)
        print(json.dumps([r for r in records if r.startswith("Trainer:")]))
        """
    )

    on_cpu, on_device = result
    assert on_cpu.startswith("Trainer: accelerator 'cpu', 2 devices (cpu), strategy 'ddp', precision '32-true'.")
    assert "torch reports 2 'tpdev' device(s) here, which this run does not use" in on_cpu
    assert "accelerator='auto'" in on_cpu
    assert on_device == "Trainer: accelerator 'tpdev', 2 devices (tpdev), strategy 'ddp', precision '32-true'."


def test_plugins_list_check_asks_torch_and_plain_listing_never_imports_it(testdevice_site: DeviceSite) -> None:
    checked = testdevice_site.run(
        "-m", "torchplug", "plugins", "list", "--kind", "accelerator", "--check", "--json", env=CHILD_ENV
    )
    code = (
        "import runpy, sys; sys.argv = ['core', 'plugins', 'list', '--json']\n"
        "try:\n    runpy.run_module('torchplug', run_name='__main__')\nexcept SystemExit:\n    pass\n"
        "print('TORCH-IMPORTED' if 'torch' in sys.modules else 'TORCH-FREE', file=sys.stderr)"
    )
    plain = testdevice_site.run("-c", code, env=CHILD_ENV)

    assert checked.returncode == 0, checked.stderr
    entries = {e["name"]: e for e in json.loads(checked.stdout)["entries"]}
    assert entries["torch"]["status"] == "ok"
    assert entries["torch"]["check"]["available"] is True
    assert entries["torch"]["check"]["device_count"] == 2
    assert "TORCH-FREE" in plain.stderr, plain.stderr
    listed = {e["name"]: e for e in json.loads(plain.stdout.strip())["entries"] if e["kind"] == "accelerator"}
    assert listed["torch"]["status"] == "ok" and listed["torch"]["reason"] is None


def test_core_fit_takes_the_device_type_as_its_accelerator(testdevice_site: DeviceSite, tmp_path: Path) -> None:
    config = REPO_ROOT / "examples" / "digits" / "config.yaml"
    result = testdevice_site.run(
        "-m",
        "torchplug",
        "fit",
        "--config",
        str(config),
        "--trainer.accelerator=tpdev",
        "--trainer.devices=1",
        f"--trainer.default_root_dir={tmp_path}",
        "--resolve",
        env=CHILD_ENV,
    )

    assert result.returncode == 0, result.stderr
    assert "accelerator='tpdev': torch's device type, served by the generic accelerator 'torch'" in result.stdout
