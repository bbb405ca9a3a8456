"""A plugin that tries to drive the terminal: every ``core`` command shows its text with control characters escaped.

The hostile distribution is really installed (a ``.dist-info`` on ``PYTHONPATH``): its entry-point name
holds an escape sequence that retitles the terminal, its description one that also clears the screen
and starts a forged line, and a second plugin of it raises an error with the same text.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.core.test_cli_plugins import run_core

MakeDist = Callable[..., str]

#: Retitles the terminal (OSC 0 ... BEL), clears the screen (CSI 2J), then forges a line of our own output.
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\nFAKE: plugin 'cpu' verified OK"
FORGED = "FAKE: plugin 'cpu' verified OK"
#: An entry point is one line of entry_points.txt: its name can hold escapes but no newline.
HOSTILE_EP = "evil\x1b]0;pwned\x07\x1b[2J"

HOSTILE_PLUGIN = f"""
    from torchplug import hookimpl

    @hookimpl
    def torchplug_register_accelerators(registry):
        registry.register("hostile", "torchplug.accelerators.cpu:CPUAccelerator", description={HOSTILE!r})
"""

CRASHING_PLUGIN = f"""
    from torchplug import hookimpl

    @hookimpl
    def torchplug_register_accelerators(registry):
        registry.register("crashy", "torchplug.accelerators.cpu:CPUAccelerator", description="then it raises")
        raise RuntimeError({HOSTILE!r})
"""


@pytest.fixture
def hostile_site(make_dist: MakeDist, site_dir: Path) -> Path:
    make_dist(
        "vendor-hostile",
        modules={"PREFIX_evil": HOSTILE_PLUGIN, "PREFIX_crash": CRASHING_PLUGIN},
        entry_points={HOSTILE_EP: "PREFIX_evil", "crash": "PREFIX_crash"},
    )
    return site_dir


def assert_harmless(result: subprocess.CompletedProcess[str]) -> None:
    """No ESC or BEL byte reached either stream, and no line of output is the forged one."""
    for stream in (result.stdout, result.stderr):
        assert "\x1b" not in stream and "\x07" not in stream, stream
        assert not any(line.lstrip().startswith("FAKE:") for line in stream.splitlines()), stream


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(("plugins", "list"), id="list"),
        pytest.param(("plugins", "list", "-v"), id="list-verbose"),
        pytest.param(("plugins", "show", "hostile"), id="show-entry"),
        pytest.param(("plugins", "show", "crash"), id="show-broken-plugin"),
        pytest.param(("plugins", "show", "crashy"), id="show-broken-entry"),
        pytest.param(("plugins", "verify", "crashy"), id="verify-broken", marks=pytest.mark.slow),
        pytest.param(
            (
                "fit",
                "--model=tests.core.cli.tiny.TinyModel",
                "--data=tests.core.cli.tiny.TinyData",
                "--trainer.accelerator=crashy",
                "--trainer.max_epochs=1",
            ),
            id="fit-usage-error",
        ),
        pytest.param(("env",), id="env"),
    ],
)
def test_no_command_lets_a_plugin_drive_the_terminal(hostile_site: Path, args: tuple[str, ...]) -> None:
    result = run_core(*args, site=hostile_site)
    assert result.returncode in (0, 1, 2), result.stderr
    assert_harmless(result)
    output = result.stdout + result.stderr
    assert "\\x1b]0;pwned\\x07" in output, output  # shown, escaped: the user can see what the plugin holds


def test_the_listing_keeps_a_hostile_description_on_its_own_row(hostile_site: Path) -> None:
    result = run_core("plugins", "list", "--kind", "accelerator", site=hostile_site)
    row = next(line for line in result.stdout.splitlines() if line.startswith("hostile "))
    assert row.endswith("\\x1b]0;pwned\\x07\\x1b[2J\\nFAKE: plugin 'cpu' verified OK")


def test_json_keeps_the_text_as_the_plugin_gave_it(hostile_site: Path) -> None:
    import json

    result = run_core("plugins", "list", "--json", site=hostile_site)
    entry = next(e for e in json.loads(result.stdout)["entries"] if e["name"] == "hostile")
    assert entry["description"] == HOSTILE
    assert entry["provider"]["plugin"] == HOSTILE_EP


# -- text from a checkpoint -----------------------------------------------------------------------


def test_inspect_shows_a_checkpoints_keys_hyperparameters_and_path_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch

    from torchplug.cli._main import main

    path = tmp_path / "evil\x1b[2J\nFAKE.ckpt"
    state = {
        "state_dict": {HOSTILE: torch.zeros(2)},
        "hyper_parameters": {HOSTILE: HOSTILE},
        "epoch": 0,
        "global_step": 0,
        HOSTILE: 1,
    }
    torch.save(state, path)
    for args in (("--tensors",), ()):
        code = main(["checkpoint", "inspect", str(path), *args])
        assert code == 0
        assert_harmless(subprocess.CompletedProcess([], code, *capsys.readouterr()))
    code = main(["checkpoint", "inspect", str(tmp_path / "gone\x1b]0;pwned\x07\nFAKE: ok.ckpt")])
    assert code == 2
    assert_harmless(subprocess.CompletedProcess([], code, *capsys.readouterr()))
