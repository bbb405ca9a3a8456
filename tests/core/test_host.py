"""Discovery and loading: one guarded load per plugin, a recorded state for each, and the controls."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import torchplug._host
from torchplug import BrokenPluginError, PluginLoadError, PluginSettingsError, PluginTimeoutError, UnknownPluginError
from torchplug._deadline import THREAD_NAME
from torchplug._host import PluginHost, plugin_host
from torchplug._settings import PluginSettings
from torchplug.utilities.warn import reset_warned

MakeDist = Callable[..., str]

NewHost = Callable[..., PluginHost]


def _record(host: PluginHost, name: str):  # type: ignore[no-untyped-def]
    host.ensure_loaded()
    return next(r for r in host.records if r.name == name)


def test_builtins_register_through_the_hooks(new_host: NewHost) -> None:
    host = new_host()
    builtin = _record(host, "builtin")
    assert builtin.state == "ok"
    assert builtin.builtin
    assert builtin.distribution == "core"
    entry = host.registry("accelerator").resolve("cpu")
    assert entry.provider.builtin
    assert entry.provider.distribution == "core"


def test_good_plugin_registers_with_its_distribution(
    make_dist: MakeDist, new_host: NewHost, plugin_source: Callable[..., str]
) -> None:
    make_dist("vendor-good", "1.2.3", plugins={"good": plugin_source("goodaccel")})
    host = new_host()
    assert _record(host, "good").state == "ok"
    entry = host.registry("accelerator").resolve("goodaccel")
    assert (entry.provider.distribution, entry.provider.version, entry.provider.plugin) == (
        "vendor-good",
        "1.2.3",
        "good",
    )


def test_broken_import_is_recorded_and_the_others_still_load(
    make_dist: MakeDist, new_host: NewHost, plugin_source: Callable[..., str]
) -> None:
    make_dist("vendor-a-broken", plugins={"broken": "import tp_no_such_vendor_lib\n"})
    make_dist("vendor-b-good", plugins={"good": plugin_source("goodaccel")})
    host = new_host()
    broken = _record(host, "broken")
    assert broken.state == "broken"
    assert broken.reason == "ModuleNotFoundError: No module named 'tp_no_such_vendor_lib'"
    assert "Traceback" in (broken.traceback or "")
    assert _record(host, "good").state == "ok"
    with pytest.raises(UnknownPluginError) as info:
        host.registry("accelerator").get("broken")
    assert "plugin 'broken' from vendor-a-broken 1.0 is broken" in str(info.value)
    assert isinstance(info.value.__cause__, ModuleNotFoundError)


def test_hook_that_raises_marks_the_plugin_broken_and_its_names_raise(make_dist: MakeDist, new_host: NewHost) -> None:
    make_dist(
        "vendor-hook",
        plugins={
            "hook": """
        def torchplug_register_accelerators(registry):
            registry.register("halfway", "torchplug.accelerators.cpu:CPUAccelerator")
            raise RuntimeError("vendor runtime exploded")
    """
        },
    )
    host = new_host()
    assert _record(host, "hook").reason == "RuntimeError: vendor runtime exploded"
    with pytest.raises(BrokenPluginError) as info:
        host.registry("accelerator").get("halfway")
    assert "from vendor-hook 1.0 is broken: RuntimeError: vendor runtime exploded" in str(info.value)
    assert isinstance(info.value.__cause__, RuntimeError)


def test_misspelt_hook_is_reported_with_a_suggestion(make_dist: MakeDist, new_host: NewHost) -> None:
    make_dist(
        "vendor-typo",
        plugins={
            "typo": """
        def torchplug_register_accelerator(registry):
            registry.register("typo", "torchplug.accelerators.cpu:CPUAccelerator")
    """
        },
    )
    record = _record(new_host(), "typo")
    assert record.state == "broken"
    assert "unknown hook 'torchplug_register_accelerator'" in record.reason
    assert "Did you mean 'torchplug_register_accelerators'?" in record.reason


def test_hook_with_an_argument_the_spec_lacks_is_broken(make_dist: MakeDist, new_host: NewHost) -> None:
    make_dist(
        "vendor-args",
        plugins={
            "args": """
        def torchplug_register_accelerators(registry, device_map):
            pass
    """
        },
    )
    record = _record(new_host(), "args")
    assert record.state == "broken"
    assert "device_map" in record.reason


def test_incompatible_core_requirement_is_not_imported(make_dist: MakeDist, new_host: NewHost, tmp_path: Path) -> None:
    marker = tmp_path / "imported"
    prefix = make_dist(
        "vendor-old", "0.9", requires=("core<0.1",), plugins={"old": f"open({str(marker)!r}, 'w').close()\n"}
    )
    record = _record(new_host(), "old")
    assert record.state == "incompatible"
    assert "vendor-old 0.9 requires core<0.1, but core 0.1.0 is installed" in record.reason
    assert not marker.exists()
    assert f"{prefix}_old" not in sys.modules


def test_requirement_behind_an_extra_is_ignored(
    make_dist: MakeDist, new_host: NewHost, plugin_source: Callable[..., str]
) -> None:
    make_dist("vendor-extra", requires=('core<0.1; extra == "legacy"',), plugins={"extra": plugin_source("extraaccel")})
    assert _record(new_host(), "extra").state == "ok"


def test_shadowed_copy_of_a_distribution_is_reported(
    make_dist: MakeDist,
    new_host: NewHost,
    tmp_path: Path,
    plugin_source: Callable[..., str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    later = tmp_path / "later-site"
    later.mkdir()
    monkeypatch.setattr(sys, "path", [*sys.path, str(later)])
    make_dist("vendor-dup", "2.0", plugins={"dup": plugin_source("dupaccel", "first copy")})
    make_dist("vendor-dup", "1.0", plugins={"dup": plugin_source("dupaccel", "stale copy")}, location=later)
    host = new_host()
    states = sorted((r.version, r.state) for r in host.records if r.name == "dup")
    assert states == [("1.0", "shadowed"), ("2.0", "ok")]
    shadowed = next(r for r in host.records if r.name == "dup" and r.state == "shadowed")
    assert "vendor-dup 2.0" in shadowed.reason and "comes first on sys.path" in shadowed.reason
    assert host.registry("accelerator").resolve("dupaccel").description == "first copy"


def test_plugins_load_in_sorted_order_whatever_the_file_system_says(
    make_dist: MakeDist, new_host: NewHost, plugin_source: Callable[..., str]
) -> None:
    for dist in ("vendor-zz", "vendor-aa", "vendor-mm"):
        make_dist(dist, plugins={"p": plugin_source(dist.replace("-", ""))})
    host = new_host()
    host.ensure_loaded()
    assert [r.distribution for r in host.records if r.name == "p"] == ["vendor-aa", "vendor-mm", "vendor-zz"]


def test_autoload_off_loads_only_builtins_and_named_plugins(
    make_dist: MakeDist, new_host: NewHost, plugin_source: Callable[..., str]
) -> None:
    make_dist("vendor-one", plugins={"one": plugin_source("oneaccel")})
    make_dist("vendor-two", plugins={"two": plugin_source("twoaccel")})
    host = new_host(autoload=False, requested=("vendor-two",))
    assert _record(host, "one").state == "disabled"
    assert _record(host, "two").state == "ok"
    assert _record(host, "builtin").state == "ok"
    by_entry_point = new_host(autoload=False, requested=("one",))
    assert _record(by_entry_point, "one").state == "ok"


def test_blocked_plugins_are_not_imported(
    make_dist: MakeDist, new_host: NewHost, plugin_source: Callable[..., str]
) -> None:
    prefix = make_dist("vendor-blocked", plugins={"blk": plugin_source("blkaccel")})
    host = new_host(blocked=("Vendor_Blocked",), requested=("vendor-blocked",))
    record = _record(host, "blk")
    assert (record.state, record.reason) == ("blocked", "named in TORCHPLUG_BLOCK_PLUGINS")
    assert f"{prefix}_blk" not in sys.modules


def test_a_module_on_sys_path_is_never_loaded_by_name(
    site_dir: Path, new_host: NewHost, tmp_path: Path, plugin_source: Callable[..., str]
) -> None:
    marker = tmp_path / "imported"
    code = f"open({str(marker)!r}, 'w').close()\n" + plugin_source("localaccel").replace("\n    ", "\n")
    (site_dir / "tp_test_local_plugin.py").write_text(code)
    host = new_host(requested=("tp_test_local_plugin",))
    record = _record(host, "tp_test_local_plugin")
    assert record.state == "broken"
    assert "TORCHPLUG_PLUGINS selects installed plugins only" in record.reason
    assert not marker.exists()
    assert "tp_test_local_plugin" not in sys.modules
    assert "localaccel" not in host.registry("accelerator")


def test_named_plugin_that_does_not_exist_is_broken_with_a_clear_reason(new_host: NewHost) -> None:
    record = _record(new_host(requested=("tp_nowhere",)), "tp_nowhere")
    assert record.state == "broken"
    assert (
        "TORCHPLUG_PLUGINS names 'tp_nowhere', but no installed plugin has that entry-point, distribution or "
        "module name." in record.reason
    )


def test_a_distribution_without_a_plugin_entry_point_is_named_as_such(new_host: NewHost) -> None:
    record = _record(new_host(requested=("pluggy",)), "pluggy")
    assert record.state == "broken"
    assert "The distribution pluggy is installed but declares no 'torchplug.plugins' entry point." in record.reason


def test_lightning_style_classmethod_registration(make_dist: MakeDist, new_host: NewHost) -> None:
    make_dist(
        "vendor-cls",
        entry_points={"cls": "PREFIX_accel:XAccelerator"},
        modules={
            "PREFIX_accel": """
        from torchplug.accelerators.cpu import CPUAccelerator

        class XAccelerator(CPUAccelerator):
            @classmethod
            def register_accelerators(cls, registry):
                registry.register("xcls", cls, description="registered by its classmethod")
    """
        },
    )
    host = new_host()
    assert _record(host, "cls").state == "ok"
    entry = host.registry("accelerator").resolve("xcls")
    assert entry.description == "registered by its classmethod"
    assert entry.provider.distribution == "vendor-cls"


def test_strict_mode_raises_on_any_failure(make_dist: MakeDist, new_host: NewHost) -> None:
    make_dist("vendor-strict", plugins={"bad": "raise ImportError('vendor library too old')\n"})
    host = new_host(strict=True)
    with pytest.raises(PluginLoadError, match=r"1 plugin\(s\) failed to load and TORCHPLUG_STRICT_PLUGINS=1") as info:
        host.registry("accelerator").get("cpu")
    assert "bad (vendor-strict 1.0): broken: ImportError: vendor library too old" in str(info.value)
    with pytest.raises(PluginLoadError):  # every later use raises too
        host.registry("accelerator").names()


def test_bad_environment_variable_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD", "maybe")
    with pytest.raises(PluginSettingsError, match="TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD='maybe' is not a boolean"):
        PluginSettings.from_env()
    monkeypatch.setenv("TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("TORCHPLUG_PREFER", "xpu")
    with pytest.raises(PluginSettingsError, match="'xpu', which is not NAME=PROVIDER"):
        PluginSettings.from_env()


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("TORCHPLUG_PLUGINS", "a, b")
    monkeypatch.setenv("TORCHPLUG_BLOCK_PLUGINS", "c")
    monkeypatch.setenv("TORCHPLUG_STRICT_PLUGINS", "yes")
    monkeypatch.setenv("TORCHPLUG_PREFER", "xpu=vendor-a, gpu = accel-cuda")
    settings = PluginSettings.from_env()
    assert settings == PluginSettings(
        autoload=False,
        requested=("a", "b"),
        blocked=("c",),
        strict=True,
        prefer={"xpu": "vendor-a", "gpu": "accel-cuda"},
        timeout=30.0,
    )


def test_discovery_runs_once_and_refresh_rescans(
    make_dist: MakeDist, new_host: NewHost, plugin_source: Callable[..., str]
) -> None:
    host = new_host()
    registry = host.registry("accelerator")
    assert "lateaccel" not in registry
    make_dist("vendor-late", plugins={"late": plugin_source("lateaccel")})
    assert "lateaccel" not in registry  # one scan per process
    host.refresh(PluginSettings(strict=False))
    assert "lateaccel" in registry  # same registry object, rescanned


def test_call_each_isolates_failing_implementations(make_dist: MakeDist, new_host: NewHost) -> None:
    make_dist("vendor-report-ok", plugins={"rok": "def torchplug_environment_report():\n    return {'x': 1}\n"})
    make_dist("vendor-report-bad", plugins={"rbad": "def torchplug_environment_report():\n    raise OSError('nvml')\n"})
    results = {r.name: (value, error) for r, value, error in new_host().call_each("torchplug_environment_report")}
    assert results["rok"] == ({"x": 1}, None)
    assert isinstance(results["rbad"][1], OSError)


def test_process_wide_host_is_a_singleton() -> None:
    assert plugin_host() is plugin_host()


def test_lightning_parameter_names_are_accepted(make_dist: MakeDist, new_host: NewHost) -> None:
    make_dist(
        "vendor-lit",
        entry_points={"lit": "PREFIX_accel:LitAccelerator", "litddp": "PREFIX_accel:LitStrategy"},
        modules={
            "PREFIX_accel": """
        from torchplug.accelerators.cpu import CPUAccelerator
        from torchplug.strategies.ddp import DDPStrategy

        class LitAccelerator(CPUAccelerator):
            @classmethod
            def register_accelerators(cls, accelerator_registry):
                accelerator_registry.register("lit", cls, description="Lightning's parameter name")

        class LitStrategy(DDPStrategy):
            @classmethod
            def register_strategies(cls, strategy_registry):
                strategy_registry.register("lit_ddp", cls, description="Lightning's parameter name")
    """
        },
    )
    host = new_host()
    assert {_record(host, "lit").state, _record(host, "litddp").state} == {"ok"}
    assert host.registry("accelerator").resolve("lit").provider.distribution == "vendor-lit"
    assert host.registry("strategy").resolve("lit_ddp").description == "Lightning's parameter name"


# -- deadlines: a plugin that blocks never hangs discovery -------------------------------------------

#: A loop that waits for a file to appear: the test releases the plugin once it was left behind.
WAIT = """
import os, time

def wait():
    while not os.path.exists({release!r}):
        time.sleep(0.01)
"""

BLOCKS_AT_IMPORT = (
    WAIT
    + """
wait()

def torchplug_register_accelerators(registry):
    registry.register("lateaccel", "torchplug.accelerators.cpu:CPUAccelerator")
"""
)

BLOCKS_IN_HOOK = (
    WAIT
    + """
def torchplug_register_accelerators(registry):
    registry.register("earlyaccel", "torchplug.accelerators.cpu:CPUAccelerator")
    wait()
    registry.register("lateaccel", "torchplug.accelerators.cpu:CPUAccelerator")
"""
)


def _join_workers() -> None:
    """Wait for abandoned plugin workers (released by the test) to finish what they were doing."""
    for thread in threading.enumerate():
        if thread.name == THREAD_NAME:
            thread.join(10)
            assert not thread.is_alive()


def test_a_plugin_that_blocks_at_import_is_left_behind_and_never_registers_late(
    make_dist: MakeDist, new_host: NewHost, tmp_path: Path, plugin_source: Callable[..., str]
) -> None:
    release = tmp_path / "release"
    make_dist("vendor-a-stuck", plugins={"stuck": BLOCKS_AT_IMPORT.format(release=str(release))})
    make_dist("vendor-b-good", plugins={"good": plugin_source("goodaccel")})
    host = new_host(timeout=0.3)
    start = time.monotonic()
    host.ensure_loaded()
    assert time.monotonic() - start < 5
    stuck = _record(host, "stuck")
    assert stuck.state == "broken"
    assert isinstance(stuck.error, PluginTimeoutError)
    assert stuck.reason.startswith(
        "PluginTimeoutError: plugin 'stuck' from vendor-a-stuck 1.0 did not finish importing within 0.3 s "
        "(TORCHPLUG_PLUGIN_TIMEOUT=0.3)"
    )
    assert _record(host, "good").state == "ok"
    release.touch()
    _join_workers()
    assert "lateaccel" not in host.registry("accelerator")
    assert host.plugin_manager.get_plugin(stuck.key) is None


def test_a_plugin_whose_hook_blocks_keeps_nothing_it_registered(
    make_dist: MakeDist, new_host: NewHost, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    make_dist("vendor-hook-stuck", plugins={"hookstuck": BLOCKS_IN_HOOK.format(release=str(release))})
    host = new_host(timeout=0.3)
    record = _record(host, "hookstuck")
    assert "did not finish running its torchplug_register_accelerators hook within 0.3 s" in record.reason
    with pytest.raises(PluginTimeoutError, match=r"from vendor-hook-stuck 1\.0 is broken: PluginTimeoutError"):
        host.registry("accelerator").get("earlyaccel")
    release.touch()
    _join_workers()
    assert "lateaccel" not in host.registry("accelerator")
    assert record.state == "broken"


def test_an_abandoned_plugin_never_keeps_the_process_alive(make_dist: MakeDist, site_dir: Path, tmp_path: Path) -> None:
    make_dist("vendor-forever", plugins={"forever": BLOCKS_AT_IMPORT.format(release=str(tmp_path / "never"))})
    code = (
        "import torchplug\n"
        "print(torchplug.AcceleratorRegistry.resolve('cpu').name)\n"
        "print([r.state for r in torchplug.plugin_host().records if r.name == 'forever'])\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHPLUG_")}
    env.update(PYTHONPATH=str(site_dir), TORCHPLUG_PLUGIN_TIMEOUT="0.5")
    start = time.monotonic()
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["cpu", "['broken']"]
    assert time.monotonic() - start < 30


def test_no_deadline_loads_plugins_in_the_calling_thread(
    make_dist: MakeDist, new_host: NewHost, plugin_source: Callable[..., str]
) -> None:
    make_dist("vendor-inline", plugins={"inline": plugin_source("inlineaccel")})
    host = new_host(timeout=0.0)
    threads = threading.active_count()
    assert _record(host, "inline").state == "ok"
    assert threading.active_count() == threads


# -- settings: checked before any registry is touched ---------------------------------------------


def test_a_bad_setting_leaves_the_registries_untouched_and_the_host_retryable(monkeypatch: pytest.MonkeyPatch) -> None:
    host = PluginHost()
    monkeypatch.setenv("TORCHPLUG_STRICT_PLUGINS", "maybe")
    for _ in range(2):  # the same error each time, never "Unknown accelerator 'cpu'. Installed: (none)"
        with pytest.raises(PluginSettingsError, match=r"TORCHPLUG_STRICT_PLUGINS='maybe' is not a boolean"):
            host.registry("accelerator").resolve("cpu")
    assert host.registry("accelerator")._entries == []
    monkeypatch.setenv("TORCHPLUG_STRICT_PLUGINS", "0")
    assert host.registry("accelerator").resolve("cpu").name == "cpu"


def test_a_discovery_that_fails_midway_leaves_nothing_half_built(
    monkeypatch: pytest.MonkeyPatch, new_host: NewHost
) -> None:
    host = new_host()

    def broken_scan(core: str) -> list[object]:
        raise OSError("site-packages went away")

    monkeypatch.setattr(torchplug._host, "scan", broken_scan)
    with pytest.raises(OSError, match="site-packages went away"):
        host.ensure_loaded()
    assert host.registry("accelerator")._entries == []  # the built-ins registered before the failure are gone
    monkeypatch.undo()
    assert host.registry("accelerator").resolve("cpu").provider.builtin


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("abc", "TORCHPLUG_PLUGIN_TIMEOUT='abc' is not valid. Allowed: a number >= 0."),
        ("-1", "TORCHPLUG_PLUGIN_TIMEOUT='-1' is not valid. Allowed: a number >= 0."),
        ("nan", "TORCHPLUG_PLUGIN_TIMEOUT='nan' is not valid. Allowed: a number >= 0."),
    ],
)
def test_a_bad_plugin_timeout_is_refused(monkeypatch: pytest.MonkeyPatch, value: str, message: str) -> None:
    monkeypatch.setenv("TORCHPLUG_PLUGIN_TIMEOUT", value)
    with pytest.raises(PluginSettingsError) as info:
        PluginSettings.from_env()
    assert str(info.value) == message


def test_plugin_timeout_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert PluginSettings.from_env({}).timeout == 30.0
    assert PluginSettings.from_env({"TORCHPLUG_PLUGIN_TIMEOUT": "2.5"}).timeout == 2.5
    assert PluginSettings.from_env({"TORCHPLUG_PLUGIN_TIMEOUT": "0"}).timeout == 0.0


def test_a_blocked_name_no_installed_plugin_answers_to_is_warned_about(
    make_dist: MakeDist, new_host: NewHost, plugin_source: Callable[..., str], recwarn: pytest.WarningsRecorder
) -> None:
    reset_warned()
    make_dist("vendor-real", plugins={"realaccel": plugin_source("realaccel")})
    host = new_host(blocked=("vendor-real", "nosuch"))
    host.ensure_loaded()
    messages = [str(w.message) for w in recwarn if "TORCHPLUG_BLOCK_PLUGINS" in str(w.message)]
    assert len(messages) == 1
    assert messages[0].startswith(
        "TORCHPLUG_BLOCK_PLUGINS='vendor-real,nosuch' names 'nosuch', which no installed plugin answers to"
    )
    assert "vendor-real" in messages[0].partition("Installed plugins: ")[2]  # what the name could have meant


def test_a_requested_plugin_that_is_not_installed_is_warned_about(
    new_host: NewHost, recwarn: pytest.WarningsRecorder
) -> None:
    reset_warned()
    new_host(requested=("nonexistent_mod",)).ensure_loaded()
    messages = [str(w.message) for w in recwarn if "TORCHPLUG_PLUGINS" in str(w.message)]
    assert messages and messages[0].startswith(
        "TORCHPLUG_PLUGINS='nonexistent_mod' names 'nonexistent_mod', which no installed plugin answers to"
    )
