"""RichProgressBar: rich bars for every stage, quiet unless someone watches, cheap per step, an error without rich."""

from __future__ import annotations

import io
import sys
import time
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from torchplug.callbacks import ProgressBar, RichProgressBar, RichProgressBarTheme, TQDMProgressBar
from torchplug.loggers.csv_logs import CSVLogger


def terminal_bar(**kwargs: Any) -> RichProgressBar:
    """A bar drawing on a captured console that says it is a terminal."""
    console = {"file": io.StringIO(), "force_terminal": True, "width": 160, "color_system": None}
    return RichProgressBar(console_kwargs=console, **kwargs)


def drawn(bar: RichProgressBar) -> str:
    return bar.console.file.getvalue()  # type: ignore[no-any-return]


def run_everything(make_trainer, tiny_model, data, bar, **kwargs):
    trainer = make_trainer(max_epochs=2, enable_progress_bar=True, callbacks=[bar], **kwargs)
    model = tiny_model()
    trainer.fit(model, data(), data())
    trainer.validate(model, data())
    trainer.test(model, data())
    trainer.predict(model, DataLoader(torch.randn(12, 4), batch_size=4))
    return trainer


def test_draws_every_stage_with_counts_speed_and_metrics(tmp_path, make_trainer, tiny_model, data):
    bar = terminal_bar(leave=True)
    trainer = run_everything(make_trainer, tiny_model, data, bar, num_sanity_val_steps=1, logger=CSVLogger(tmp_path))
    out = drawn(bar)

    assert trainer.progress_bar_callback is bar
    assert not any(isinstance(c, TQDMProgressBar) for c in trainer.callbacks)  # it replaced the default bar
    for text in ("Epoch 0", "Epoch 1", "8/8", "it/s", "v_num: 0", "train_loss_step: ", "Sanity Checking",
                 "Validation", "Testing", "Predicting", "3/3"):  # fmt: skip
        assert text in out, text


def test_quiet_when_the_console_is_not_a_terminal(make_trainer, tiny_model, data, monkeypatch):
    monkeypatch.delenv("TORCHPLUG_PROGRESS_BAR", raising=False)
    bar = RichProgressBar(console_kwargs={"file": io.StringIO(), "force_terminal": False})
    make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[bar]).fit(tiny_model(), data(), data())

    assert drawn(bar) == ""
    assert not bar.is_enabled


@pytest.mark.parametrize(
    ("make", "shown"),
    [
        (lambda: RichProgressBar(force=True, console_kwargs={"file": io.StringIO()}), True),
        (lambda: terminal_bar(force=False), False),
        (lambda: terminal_bar(refresh_rate=0), False),
    ],
    ids=["force-True-draws-off-terminal", "force-False-hides", "refresh-rate-0-hides"],
)
def test_force_and_refresh_rate(make_trainer, tiny_model, data, make, shown):
    bar = make()
    make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[bar]).fit(tiny_model(), data())
    assert ("Epoch 0" in drawn(bar)) is shown


def test_disable_and_enable(make_trainer, tiny_model, data):
    bar = terminal_bar()
    trainer = make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[bar])
    bar.disable()
    trainer.fit(tiny_model(), data())
    assert drawn(bar) == ""

    bar.enable()
    trainer.validate(trainer.lightning_module, data())
    assert "Validation" in drawn(bar)
    assert bar.is_enabled


def test_theme_and_metric_format(tmp_path, make_trainer, tiny_model, data):
    bar = terminal_bar(theme=RichProgressBarTheme(metrics_format=".1e", metrics_text_delimiter=" | "))
    trainer = make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[bar], logger=CSVLogger(tmp_path))
    trainer.fit(tiny_model(), data())  # two items to delimit: v_num and train_loss_step
    assert " | " in drawn(bar)


def test_is_a_progress_bar_and_refuses_bad_arguments():
    assert isinstance(terminal_bar(), ProgressBar)
    with pytest.raises(ValueError, match=r"RichProgressBar\(refresh_rate=-1\)"):
        RichProgressBar(refresh_rate=-1)


def test_without_rich_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "rich", None)  # as if rich were not installed
    with pytest.raises(ModuleNotFoundError, match=r"RichProgressBar .*rich.* pip install 'core\[rich\]'"):
        RichProgressBar()


def test_per_step_cost_of_the_batch_hook(make_trainer, tiny_model, data, capsys):
    """Benchmark-like: prints the cost of 3000 ``on_train_batch_end`` calls while drawing (no assertion)."""
    bar = terminal_bar(refresh_rate=1)
    trainer = make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[bar])
    model = tiny_model()
    trainer.fit(model, data())
    bar._shown = True
    bar.total_train_batches = lambda trainer: 10**9  # a long epoch: the last batch (always drawn) is far away
    bar.on_train_epoch_start(trainer, model)
    calls = 3000
    start = time.perf_counter()
    for index in range(calls):
        bar.on_train_batch_end(trainer, model, None, None, index)
    per_call = (time.perf_counter() - start) / calls * 1e6
    bar.teardown(trainer, model, "fit")
    with capsys.disabled():
        print(f"\nRichProgressBar.on_train_batch_end: {per_call:.2f} µs/step while drawing (at most 10 draws a second)")
