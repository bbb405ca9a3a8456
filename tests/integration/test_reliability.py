"""Nothing hangs, nothing is read from the current directory, no setting is half-read: with real wheels.

``vendor-stall`` (``tests/fixtures/vendor-stall``) never returns where ``VENDOR_STALL`` says: at
import, in its registration hook, or in ``is_available()``; or its ``is_available()`` raises.
``vendor-lightning`` is an accelerator class named directly by its entry point, Lightning style,
whose module imports torch. Every command runs with ``TORCHPLUG_PLUGIN_TIMEOUT=2`` and must finish
(process exit included) well within :data:`BOUND` seconds, naming the plugin.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
from tests.integration.conftest import REPO_ROOT, PluginSet, Scenario, run

pytestmark = pytest.mark.slow

TIMEOUT = {"TORCHPLUG_PLUGIN_TIMEOUT": "2"}

#: Seconds a command may take here: a Python start with torch (about 2 s, more on a busy machine)
#: plus one or two 2 s deadlines; a command that waited on a stalled plugin would take forever.
BOUND = 60.0

TRAINER = """
import json, time, torchplug
start = time.perf_counter()
trainer = torchplug.Trainer(accelerator={accelerator!r}, logger=False, enable_checkpointing=False,
                            enable_progress_bar=False)
records = {{r.distribution: [r.state, r.reason] for r in torchplug.plugin_host().records if not r.builtin}}
print(json.dumps({{"accelerator": type(trainer.accelerator).__name__, "plugins": records,
                  "seconds": time.perf_counter() - start}}))
"""

TINY = REPO_ROOT / "tests" / "core" / "cli" / "tiny.py"


@pytest.fixture(scope="module")
def stall(plugin_set: PluginSet) -> Scenario:
    """The core and vendor-stall."""
    return plugin_set("vendor-stall")


def stalled(mode: str) -> dict[str, str]:
    return {**TIMEOUT, "VENDOR_STALL": mode}


# -- a plugin that blocks never hangs the Trainer, the listing or accelerator="auto" ----------------


def test_a_plugin_stuck_at_import_does_not_hang_a_cpu_trainer(stall: Scenario) -> None:
    start = time.monotonic()
    report = stall.python_json(TRAINER.format(accelerator="cpu"), env=stalled("import"))
    assert time.monotonic() - start < BOUND  # the abandoned thread did not keep the process alive either
    assert report["accelerator"] == "CPUAccelerator"
    state, reason = report["plugins"]["vendor-stall"]
    assert state == "broken"
    assert reason.startswith(
        "PluginTimeoutError: plugin 'stall' from vendor-stall 0.3.0 did not finish importing within 2 s "
        "(TORCHPLUG_PLUGIN_TIMEOUT=2); it was left behind"
    )


@pytest.mark.parametrize(
    ("mode", "what"),
    [("import", "importing"), ("hook", "running its torchplug_register_accelerators hook")],
)
def test_a_stuck_plugin_is_listed_broken_and_the_listing_exits_1(stall: Scenario, mode: str, what: str) -> None:
    start = time.monotonic()
    result = stall.core("plugins", "list", env=stalled(mode))
    assert time.monotonic() - start < BOUND, str(result)
    assert result.returncode == 1, str(result)
    assert f"did not finish {what} within 2 s (TORCHPLUG_PLUGIN_TIMEOUT=2)" in result.stdout, str(result)
    assert "stall            broken       vendor-stall==0.3.0" in result.stdout


def test_auto_passes_over_an_is_available_that_blocks(stall: Scenario) -> None:
    working = stall.python_json(TRAINER.format(accelerator="auto"))
    assert working["accelerator"] == "StallAccelerator"  # priority 20 beats the CPU when it answers
    start = time.monotonic()
    report = stall.python_json(TRAINER.format(accelerator="auto"), env=stalled("available"))
    assert time.monotonic() - start < BOUND
    assert report["accelerator"] == "CPUAccelerator"


def test_check_reports_an_is_available_that_blocks(stall: Scenario) -> None:
    start = time.monotonic()
    result = stall.core("plugins", "list", "--check", "--kind", "accelerator", "--json", env=stalled("available"))
    assert time.monotonic() - start < BOUND, str(result)
    assert result.returncode == 1, str(result)
    entry = next(e for e in result.json()["entries"] if e["name"] == "stall")
    assert entry["status"] == "broken"
    assert entry["reason"].startswith(
        "PluginTimeoutError: Accelerator 'stall' from vendor-stall 0.3.0 did not finish running is_available() "
        "within 2 s (TORCHPLUG_PLUGIN_TIMEOUT=2)."
    )


def test_an_is_available_that_raises_is_a_torchplug_error_naming_the_provider(stall: Scenario) -> None:
    expected = (
        "Accelerator 'stall' from vendor-stall 0.3.0: is_available() raised RuntimeError: "
        "stall runtime exploded (error 0x57)"
    )
    error = stall.python_json(
        """
import json, torchplug
try:
    torchplug.Trainer(accelerator="stall", logger=False)
except torchplug.BrokenPluginError as exc:
    print(json.dumps([type(exc).__name__, str(exc), type(exc.__cause__).__name__]))
""",
        env=stalled("raise"),
    )
    assert error == ["BrokenPluginError", expected, "RuntimeError"]
    listed = stall.core("plugins", "list", "--check", "--kind", "accelerator", "--json", env=stalled("raise"))
    assert listed.returncode == 1, str(listed)
    entry = next(e for e in listed.json()["entries"] if e["name"] == "stall")
    assert (entry["status"], entry["reason"]) == ("broken", f"BrokenPluginError: {expected}")
    auto = stall.python_json(TRAINER.format(accelerator="auto"), env=stalled("raise"))
    assert auto["accelerator"] == "CPUAccelerator"


# -- Lightning style: a class named by its entry point --------------------------------------------


def test_a_lightning_style_class_registers_and_its_torch_import_is_flagged(plugin_set: PluginSet) -> None:
    lit = plugin_set("vendor-lightning")
    listing = lit.listing()
    assert listing.plugin("vendor-lightning")["state"] == "ok"
    assert listing.entry("lit")["status"] == "ok"
    assert listing.plugin("vendor-lightning")["imports_torch"] is True
    table = lit.core("plugins", "list")
    assert table.returncode == 0, str(table)
    assert "Plugins that imported torch while listing (a plugin module must not):" in table.stdout
    flagged = next(line for line in table.stdout.splitlines() if line.startswith("  lit "))
    assert "vendor-lightning==2.1.0  loading it took " in flagged and flagged.endswith(" s")
    trainer = lit.python_json(TRAINER.format(accelerator="lit"))
    assert trainer["accelerator"] == "LitAccelerator"


# -- the current directory is the user's, never a plugin's or a library's ------------------------


@pytest.fixture
def bait(tmp_path: Path) -> tuple[Path, Path]:
    """A project folder holding the user's model, and files that must never be imported from it."""
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(TINY, project / "tiny_model.py")
    marker = tmp_path / "imported-from-cwd"
    code = f"open({str(marker)!r}, 'a').write(__name__ + '\\n')\n"
    for module in ("torch.py", "vendor_stall.py", "cwd_plugin.py"):
        (project / module).write_text(code)
    info = project / "cwd_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cwd-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[torchplug.plugins]\ncwd = cwd_plugin\n")
    return project, marker


def test_nothing_is_imported_from_the_current_directory(
    stall: Scenario, bait: tuple[Path, Path], tmp_path: Path
) -> None:
    project, marker = bait
    env = stall.env({"TORCHPLUG_PLUGINS": "cwd_plugin"})
    for command in (
        [stall.venv.script("core"), "plugins", "list", "--json"],
        [stall.venv.python, "-m", "torchplug", "plugins", "list", "--json"],
    ):
        result = run(command, env, cwd=project)
        assert result.returncode == 1, str(result)  # the name in TORCHPLUG_PLUGINS is reported
        states = {p["name"]: (p["distribution"], p["state"]) for p in result.json()["plugins"]}
        assert states["cwd_plugin"] == (None, "broken")
        assert states["stall"] == ("vendor-stall", "ok")  # the installed one, not ./vendor_stall.py
        assert "cwd" not in states
        assert "TORCHPLUG_PLUGINS selects installed plugins only" in json.dumps(result.json())
    for launcher in ([stall.venv.script("core")], [stall.venv.python, "-m", "torchplug"]):
        fit = run(
            [
                *launcher,
                "fit",
                "--model=tiny_model.TinyModel",
                "--data=tiny_model.TinyData",
                "--trainer.accelerator=cpu",
                "--trainer.max_epochs=1",
                "--trainer.enable_progress_bar=false",
                f"--trainer.default_root_dir={tmp_path / 'logs'}",
            ],
            stall.env(),
            cwd=project,
        )
        assert fit.returncode == 0, str(fit)  # the user's own module is found in the current directory
        assert "fit: 1 epoch(s), 4 step(s)" in fit.stdout
    assert not marker.exists(), marker.read_text()


# -- settings: refused where read, never half-applied ----------------------------------------------


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"TORCHPLUG_PLUGIN_TIMEOUT": "soon"}, "TORCHPLUG_PLUGIN_TIMEOUT='soon' is not valid. Allowed: a number >= 0."),
        ({"TORCHPLUG_STRICT_PLUGINS": "maybe"}, "TORCHPLUG_STRICT_PLUGINS='maybe' is not a boolean."),
        ({"TORCHPLUG_PROGRESS_BAR": "maybe"}, "TORCHPLUG_PROGRESS_BAR='maybe' is not a boolean."),
    ],
    ids=["plugin-timeout", "strict", "progress-bar"],
)
def test_core_fit_refuses_a_bad_variable_as_a_usage_error(
    stall: Scenario, tmp_path: Path, env: dict[str, str], message: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(TINY, project / "tiny_model.py")
    result = run(
        [
            stall.venv.script("core"),
            "fit",
            "--model=tiny_model.TinyModel",
            "--data=tiny_model.TinyData",
            "--trainer.max_epochs=1",
            f"--trainer.default_root_dir={tmp_path / 'logs'}",
        ],
        stall.env(env),
        cwd=project,
    )
    assert result.returncode == 2, str(result)
    assert f": error: {message}" in result.stderr, str(result)
    assert "Traceback" not in result.stderr


def test_a_bad_setting_is_raised_again_until_fixed_never_an_empty_registry(stall: Scenario) -> None:
    outcome = stall.python_json(
        """
import json, os, torchplug
seen = []
for _ in range(2):
    try:
        torchplug.Trainer(accelerator="cpu", logger=False)
    except torchplug.SettingsError as exc:
        seen.append(str(exc).split(".")[0])
os.environ["TORCHPLUG_STRICT_PLUGINS"] = "0"
trainer = torchplug.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
seen.append(type(trainer.accelerator).__name__)
print(json.dumps(seen))
""",
        env={"TORCHPLUG_STRICT_PLUGINS": "maybe"},
    )
    assert outcome == [
        "TORCHPLUG_STRICT_PLUGINS='maybe' is not a boolean",
        "TORCHPLUG_STRICT_PLUGINS='maybe' is not a boolean",
        "CPUAccelerator",
    ]
