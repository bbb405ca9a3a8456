"""``printable``: text from outside shown on a terminal with its control characters escaped."""

from __future__ import annotations

import pytest

from torchplug.utilities.printable import printable, printable_lines


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param("plain text, ünïcode ✓", "plain text, ünïcode ✓", id="printable-unchanged"),
        pytest.param("\x1b]0;pwned\x07", "\\x1b]0;pwned\\x07", id="osc-title"),
        pytest.param("a\nb\rc\td", "a\\nb\\rc\\td", id="line-breaks"),
        pytest.param("\x7f\x9b2J", "\\x7f\\x9b2J", id="del-and-c1-csi"),
        pytest.param("abc\u202edef", "abc\\u202edef", id="bidi-override"),
        pytest.param("a\u2028b", "a\\u2028b", id="unicode-line-separator"),
        pytest.param(3, "3", id="not-a-string"),
    ],
)
def test_printable_escapes_what_a_terminal_would_act_on(text: object, shown: str) -> None:
    assert printable(text) == shown


def test_printable_is_idempotent() -> None:
    once = printable("\x1b[2J\n")
    assert printable(once) == once


def test_printable_lines_keeps_the_lines_and_escapes_each() -> None:
    assert printable_lines("Traceback:\n  raise X('\x1b[2J')\nX: boom") == [
        "Traceback:",
        "  raise X('\\x1b[2J')",
        "X: boom",
    ]
