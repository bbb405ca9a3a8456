"""Where ``strategy="ddp"`` can re-run the program (a script, ``-c``, ``-m``) and where it cannot (stdin, a REPL).

The ``ddp`` launcher starts the other ranks by running this process's command line again
(``sys.orig_argv``). Without a command line to re-run, the error must point to ``ddp_fork``.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

import torchplug
from tests.core.strategies.runner import SCRIPTS, linux_only, rank_records, records, run

ROOT = Path(__file__).parents[3]


def program(out: Path, *args: str) -> str:
    """Python source that trains like ``train.py`` (imported from the scripts folder)."""
    argv = ["--out", str(out), *args]
    return f"import sys; sys.path.insert(0, {str(SCRIPTS)!r}); import train; train.main({argv!r})"


@pytest.mark.slow
@linux_only
@pytest.mark.parametrize("how", ["-c", "-m"])
def test_ddp_works_from_python_dash_c_and_dash_m(tmp_path: Path, how: str) -> None:
    if how == "-c":
        command = [sys.executable, "-c", program(tmp_path, "--strategy", "ddp")]
    else:  # run from the repository root, as `python -m` is
        command = [sys.executable, "-m", "tests.core.strategies.scripts.train", "--out", str(tmp_path)]
    result = run(command, tmp_path / "output.log", cwd=ROOT)
    assert result.returncode == 0, result.tail()
    ranks = rank_records(tmp_path)
    assert sorted(ranks) == [0, 1]
    assert ranks[0]["hash"] == ranks[1]["hash"]
    started = records(tmp_path, "started_rank")
    assert started["1"]["ppid"] == started["0"]["pid"]  # rank 1 is the same command run again by rank 0
    assert not result.leftovers


@pytest.mark.slow
@linux_only
def test_ddp_from_stdin_fails_and_suggests_ddp_fork(tmp_path: Path) -> None:
    result = run([sys.executable, "-"], tmp_path / "output.log", stdin=program(tmp_path, "--strategy", "ddp") + "\n")
    assert result.returncode != 0
    assert "this process has no script (an interactive session or stdin)" in result.output
    assert "Hint: use strategy='ddp_fork' or 'ddp_spawn', or launch with torchrun." in result.output
    assert not result.leftovers


@pytest.mark.slow
@linux_only
def test_in_an_interactive_session_ddp_is_refused_and_auto_trains_with_fork(tmp_path: Path) -> None:
    code = "\n".join(
        [
            f"import sys; sys.path.insert(0, {str(SCRIPTS)!r})",
            "import common, torchplug",
            "try:",
            "    torchplug.Trainer(accelerator='cpu', devices=2, strategy='ddp', logger=False)",
            "except torchplug.MisconfigurationError as exc:",
            "    print('REFUSED:', exc)",
            "trainer = torchplug.Trainer(accelerator='cpu', devices=2, logger=False, enable_checkpointing=False,",
            "                            enable_progress_bar=False, max_epochs=2, num_sanity_val_steps=0,",
            f"                            callbacks=[common.Recorder({str(tmp_path)!r})])",
            "print('STRATEGY:', trainer.strategy)",
            "model = common.Regressor()",
            "trainer.fit(model, common.loader())",
            f"common.write_main({str(tmp_path)!r}, trainer, model)",
        ]
    )
    # `python -i -c CODE` runs CODE as an interactive session would (sys.flags.interactive), then
    # reads the REPL's input, which is empty.
    result = run([sys.executable, "-i", "-c", code], tmp_path / "output.log", stdin="")
    assert result.returncode == 0, result.tail()
    assert "REFUSED:" in result.output and "Hint: use strategy='ddp_fork'" in result.output
    assert "STRATEGY: DDPStrategy(start_method='fork'" in result.output
    ranks = rank_records(tmp_path)
    assert sorted(ranks) == [0, 1] and ranks[0]["hash"] == ranks[1]["hash"]
    assert [m["hash"] for m in records(tmp_path, "main_").values()] == [ranks[0]["hash"]]
    assert not result.leftovers


@pytest.fixture
def notebook(monkeypatch: pytest.MonkeyPatch) -> None:
    """Look like a Jupyter kernel (what the Trainer checks to know it cannot re-run a script)."""
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))


@pytest.mark.usefixtures("notebook")
@pytest.mark.parametrize("strategy", ["ddp", "ddp_spawn"])
def test_in_a_notebook_relaunching_strategies_are_refused_with_a_hint(strategy: str) -> None:
    with pytest.raises(torchplug.MisconfigurationError, match=r"Hint: use strategy='ddp_fork' \(or 'ddp_notebook'\)"):
        torchplug.Trainer(accelerator="cpu", devices=2, strategy=strategy, logger=False)


@pytest.mark.usefixtures("notebook")
@pytest.mark.parametrize("strategy", ["auto", "ddp_fork", "ddp_notebook"])
def test_in_a_notebook_fork_is_chosen_or_accepted(strategy: str) -> None:
    trainer = torchplug.Trainer(accelerator="cpu", devices=2, strategy=strategy, logger=False)
    assert repr(trainer.strategy) == "DDPStrategy(start_method='fork', find_unused_parameters=False)"
