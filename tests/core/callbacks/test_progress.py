"""TQDMProgressBar (the default bar): quiet unless someone watches, informative when shown, and cheap per step."""

from __future__ import annotations

import io
import time

import pytest
import torch
from torch.utils.data import DataLoader

from torchplug import SettingsError
from torchplug.callbacks import ProgressBar, TQDMProgressBar
from torchplug.loggers.csv_logs import CSVLogger
from torchplug.utilities.table import format_results, format_table, print_results


class Terminal(io.StringIO):
    """A captured stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def run_everything(make_trainer, tiny_model, data, bar, **kwargs):
    trainer = make_trainer(max_epochs=2, enable_progress_bar=True, callbacks=[bar], **kwargs)
    model = tiny_model()
    trainer.fit(model, data(), data())
    trainer.validate(model, data())
    trainer.test(model, data())
    trainer.predict(model, DataLoader(torch.randn(12, 4), batch_size=4))
    return trainer


def test_quiet_when_the_stream_is_not_a_terminal(make_trainer, tiny_model, data, capsys, monkeypatch):
    monkeypatch.delenv("TORCHPLUG_PROGRESS_BAR", raising=False)
    stream = io.StringIO()
    trainer = make_trainer(
        max_epochs=2, enable_progress_bar=True, num_sanity_val_steps=2, callbacks=[TQDMProgressBar(stream=stream)]
    )
    trainer.fit(tiny_model(), data(), data())

    assert stream.getvalue() == ""
    assert capsys.readouterr() == ("", "")


def test_a_bar_hidden_because_the_output_is_no_terminal_is_said_once(
    make_trainer, tiny_model, data, monkeypatch, caplog
):
    from torchplug.callbacks import progress

    monkeypatch.delenv("TORCHPLUG_PROGRESS_BAR", raising=False)
    monkeypatch.setattr(progress, "_ANNOUNCED", set())
    with caplog.at_level("INFO", logger="torchplug"):
        for _ in range(2):  # a second fit in the same process says nothing new
            bar = TQDMProgressBar(stream=io.StringIO())
            make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[bar]).fit(tiny_model(), data())
    said = [r.getMessage() for r in caplog.records if "no progress bar" in r.getMessage()]
    assert said == [
        "TQDMProgressBar: no progress bar, the output is not a terminal. Set TORCHPLUG_PROGRESS_BAR=1 (or "
        "TQDMProgressBar(force=True)) to draw it anyway, or enable_progress_bar=False to say it is not wanted."
    ]


def test_the_default_bar_is_quiet_under_a_captured_stdout(make_trainer, tiny_model, data, capsys, monkeypatch):
    monkeypatch.delenv("TORCHPLUG_PROGRESS_BAR", raising=False)
    trainer = make_trainer(max_epochs=1, enable_progress_bar=None)
    trainer.fit(tiny_model(), data(), data())

    assert isinstance(trainer.progress_bar_callback, TQDMProgressBar)
    assert isinstance(trainer.progress_bar_callback, ProgressBar)
    assert not trainer.progress_bar_callback.is_enabled
    assert capsys.readouterr() == ("", "")


def test_forced_bar_shows_speed_version_and_prog_bar_metrics(tmp_path, make_trainer, tiny_model, data):
    stream = io.StringIO()
    run_everything(
        make_trainer,
        tiny_model,
        data,
        TQDMProgressBar(force=True, stream=stream),
        num_sanity_val_steps=1,
        logger=CSVLogger(tmp_path),
    )
    out = stream.getvalue()

    for text in (
        "Epoch 0",
        "Epoch 1",
        "8/8",
        "it/s",
        "v_num=0",
        "train_loss_step=",
        "Sanity Checking",
        "Validation",
        "Testing",
        "Predicting",
    ):
        assert text in out, text
    assert "it/s, loss=" not in out  # no loss of the bar's own: the model's prog_bar metrics say it


@pytest.mark.parametrize(
    ("setting", "stream_class", "shown"),
    [("1", io.StringIO, True), ("0", Terminal, False), ("", Terminal, True)],
    ids=["env-1-forces", "env-0-hides", "terminal"],
)
def test_environment_variable_and_terminal(make_trainer, tiny_model, data, monkeypatch, setting, stream_class, shown):
    monkeypatch.setenv("TORCHPLUG_PROGRESS_BAR", setting)
    stream = stream_class()
    trainer = make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[TQDMProgressBar(stream=stream)])
    trainer.fit(tiny_model(), data())
    assert ("Epoch 0" in stream.getvalue()) is shown


def test_a_bad_environment_variable_is_an_error_naming_it(make_trainer, tiny_model, data, monkeypatch):
    monkeypatch.setenv("TORCHPLUG_PROGRESS_BAR", "maybe")
    trainer = make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[TQDMProgressBar(stream=Terminal())])
    with pytest.raises(SettingsError, match=r"TORCHPLUG_PROGRESS_BAR='maybe' is not a boolean\. Hint: use"):
        trainer.fit(tiny_model(), data())


def test_force_false_and_refresh_rate_0_hide_the_bar(make_trainer, tiny_model, data):
    for bar in (TQDMProgressBar(force=False, stream=Terminal()), TQDMProgressBar(refresh_rate=0, stream=Terminal())):
        make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[bar]).fit(tiny_model(), data())
        assert bar.stream.getvalue() == ""


def test_leave_keeps_one_bar_per_epoch(make_trainer, tiny_model, data):
    bar = TQDMProgressBar(force=True, leave=True, stream=io.StringIO())
    make_trainer(max_epochs=3, enable_progress_bar=True, callbacks=[bar]).fit(tiny_model(), data())
    lines = [line for line in bar.stream.getvalue().split("\n") if line.strip()]
    assert [any(f"Epoch {e}" in line for line in lines) for e in range(3)] == [True, True, True]


def test_results_table_after_validate_and_test_even_when_quiet(make_trainer, tiny_model, data, capsys):
    bar = TQDMProgressBar(stream=io.StringIO())
    trainer = make_trainer(enable_progress_bar=True, callbacks=[bar])
    model = tiny_model()
    trainer.validate(model, data())
    trainer.test(model, [data(), data(seed=1)])
    out = capsys.readouterr().out

    assert bar.stream.getvalue() == ""
    assert "Validate metric" in out
    assert "val_loss" in out
    assert "Test metric" in out
    assert "DataLoader 1" in out
    assert out.count("test_loss") == 1  # one row, one column per dataloader


def test_results_table_layout():
    text = format_results(
        [{"loss/dataloader_idx_0": 0.5, "acc/dataloader_idx_0": 1.0}, {"loss/dataloader_idx_1": torch.tensor(0.25)}],
        "test",
    )
    lines = text.split("\n")
    assert lines[1].split() == ["Test", "metric", "DataLoader", "0", "DataLoader", "1"]
    assert lines[3].split() == ["acc", "1"]
    assert lines[4].split() == ["loss", "0.5", "0.25"]
    assert lines[0] == lines[2] == lines[-1] == "─" * len(lines[1])
    assert format_results({}, "test") == ""
    assert format_table(["a", "b"], [["x"]], rule="-").split("\n")[3] == "x"


def test_results_table_falls_back_to_ascii():
    class Ascii(io.StringIO):
        encoding = "ascii"

    stream = Ascii()
    print_results({"val_loss": 0.125}, "validate", stream=stream)
    assert stream.getvalue().startswith("-" * 10)
    assert "0.125" in stream.getvalue()


def test_per_step_cost_of_the_batch_hook(make_trainer, tiny_model, data, capsys):
    """Benchmark-like: prints the cost of 3000 ``on_train_batch_end`` calls, quiet and shown (no assertion)."""
    trainer = make_trainer(max_epochs=1, enable_progress_bar=False)
    model = tiny_model()
    trainer.fit(model, data())
    calls = 3000

    def per_call(bar: TQDMProgressBar) -> float:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for index in range(calls):
                bar.on_train_batch_end(trainer, model, None, None, index)
            best = min(best, (time.perf_counter() - start) / calls)
        return best * 1e6

    quiet = TQDMProgressBar(stream=io.StringIO())
    shown = TQDMProgressBar(force=True, stream=io.StringIO())
    shown.train_bar = shown._new_bar(
        "Epoch 0", calls * 5, leave=True, position=0, postfix=lambda: shown.get_metrics(trainer, model)
    )
    quiet_us, shown_us = per_call(quiet), per_call(shown)
    shown.train_bar.close()
    with capsys.disabled():
        print(f"\nTQDMProgressBar.on_train_batch_end: quiet {quiet_us:.2f} µs/step, shown {shown_us:.2f} µs/step")


@pytest.mark.parametrize(
    ("bar_kwargs", "shown"),
    [({"force": True, "stream": io.StringIO()}, True), ({"stream": io.StringIO()}, False)],
    ids=["shown", "hidden"],
)
def test_the_training_bar_stays_readable_after_fit(make_trainer, tiny_model, data, bar_kwargs, shown):
    """As in Lightning: ``train_progress_bar`` is a tqdm bar after fit, at the last epoch's count."""
    from tqdm import tqdm

    bar = TQDMProgressBar(**bar_kwargs)
    trainer = make_trainer(max_epochs=2, enable_progress_bar=True, callbacks=[bar])
    trainer.fit(tiny_model(), data())

    assert trainer.progress_bar_callback is bar
    assert isinstance(bar.train_progress_bar, tqdm)
    assert (bar.train_progress_bar.n, bar.train_progress_bar.total) == (8, 8)
    assert bool(bar.stream.getvalue()) is shown
    assert bar.train_bar is None  # nothing left open


def test_a_silent_training_bar_takes_what_user_code_does_to_a_bar(make_trainer, tiny_model, data):
    class Describes(TQDMProgressBar):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.train_progress_bar.set_description(f"batch {batch_idx}")
            self.train_progress_bar.set_postfix({"lr": 0.1})

    bar = Describes(stream=io.StringIO())
    make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[bar]).fit(tiny_model(), data())
    assert bar.stream.getvalue() == ""


def test_the_bar_pickles_after_fit(make_trainer, tiny_model, data):
    """ddp_spawn pickles the callbacks: the bars (which cannot be pickled) are left out."""
    import pickle

    bar = TQDMProgressBar(force=True, stream=io.StringIO())
    make_trainer(max_epochs=1, enable_progress_bar=True, callbacks=[bar]).fit(tiny_model(), data())

    assert pickle.loads(pickle.dumps(bar)).train_progress_bar is None
