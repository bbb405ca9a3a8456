"""The shared parser of ``TORCHPLUG_*`` variables: strict values, errors that name the variable and what is allowed."""

from __future__ import annotations

import re

import pytest

from torchplug import MisconfigurationError, SettingsError
from torchplug.utilities.env_vars import env_bool, env_choice, env_float, env_int, env_list
from torchplug.utilities.seed import seed_everything

NAME = "TORCHPLUG_TEST_VAR"


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("TRUE", True), (" yes ", True), ("on", True), ("0", False), ("false", False), ("Off", False)],
)
def test_bool_spellings(value: str, expected: bool) -> None:
    assert env_bool(NAME, None, environ={NAME: value}) is expected


@pytest.mark.parametrize("environ", [{}, {NAME: ""}, {NAME: "  "}], ids=["unset", "empty", "blank"])
def test_unset_or_blank_gives_the_default(environ: dict[str, str]) -> None:
    assert env_bool(NAME, None, environ=environ) is None
    assert env_bool(NAME, True, environ=environ) is True
    assert env_int(NAME, 7, environ=environ) == 7
    assert env_float(NAME, 1.5, environ=environ) == 1.5
    assert env_choice(NAME, ("a", "b"), "a", environ=environ) == "a"
    assert env_list(NAME, environ=environ) == ()


def test_bool_error_names_the_variable_the_value_and_the_spellings() -> None:
    with pytest.raises(SettingsError) as info:
        env_bool(NAME, None, environ={NAME: "maybe"})
    assert str(info.value) == (
        f"{NAME}='maybe' is not a boolean. Hint: use {NAME}=1 to turn it on or {NAME}=0 to turn it off "
        "(also accepted: true/yes/on and false/no/off). Leave it unset for the default."
    )
    assert isinstance(info.value, MisconfigurationError) and isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("value", "allowed"),
    [("abc", "an integer from 1 to 8"), ("0", "an integer from 1 to 8"), ("9", "an integer from 1 to 8")],
)
def test_int_range(value: str, allowed: str) -> None:
    assert env_int(NAME, None, minimum=1, maximum=8, environ={NAME: "8"}) == 8
    with pytest.raises(SettingsError, match=re.escape(f"{NAME}={value!r} is not valid. Allowed: {allowed}.")):
        env_int(NAME, None, minimum=1, maximum=8, environ={NAME: value})


@pytest.mark.parametrize("value", ["abc", "nan", "inf", "-0.5"])
def test_float_must_be_finite_and_in_range(value: str) -> None:
    assert env_float(NAME, None, minimum=0.0, environ={NAME: "2.5"}) == 2.5
    with pytest.raises(SettingsError, match=re.escape(f"{NAME}={value!r} is not valid. Allowed: a number >= 0.")):
        env_float(NAME, None, minimum=0.0, environ={NAME: value})


def test_choice_is_case_insensitive_and_lists_the_choices() -> None:
    assert env_choice(NAME, ("fork", "spawn"), None, environ={NAME: "SPAWN"}) == "spawn"
    with pytest.raises(SettingsError, match=re.escape(f"{NAME}='forkserver' is not valid. Allowed: fork, spawn.")):
        env_choice(NAME, ("fork", "spawn"), None, environ={NAME: "forkserver"})


def test_list_items_are_checked() -> None:
    assert env_list(NAME, environ={NAME: "slurm, mpi,,lsf"}) == ("slurm", "mpi", "lsf")
    with pytest.raises(SettingsError, match=r"has the item 'slurm;mpi', which is not a name .* separate items"):
        env_list(NAME, environ={NAME: "slurm;mpi"})


def test_global_seed_is_checked_where_it_is_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHPLUG_GLOBAL_SEED", "abc")
    with pytest.raises(SettingsError, match=r"TORCHPLUG_GLOBAL_SEED='abc' is not valid\. Allowed: an integer from 0"):
        seed_everything()
    monkeypatch.setenv("TORCHPLUG_GLOBAL_SEED", "11")
    assert seed_everything() == 11


def test_seed_everything_says_the_seed_unless_told_not_to(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.delenv("TORCHPLUG_GLOBAL_SEED", raising=False)
    monkeypatch.delenv("TORCHPLUG_SEED_WORKERS", raising=False)
    with caplog.at_level("INFO", logger="torchplug"):
        seed_everything(5)
        seed_everything(6, False, False)  # Lightning's order: seed, workers, verbose
    assert [r.getMessage() for r in caplog.records if r.getMessage().startswith("Seed set")] == ["Seed set to 5"]
