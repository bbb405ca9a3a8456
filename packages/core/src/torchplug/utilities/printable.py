"""Text from outside torchplug shown safely on a terminal: control characters escaped.

A plugin's description, an entry-point or distribution name, a plugin's error, a checkpoint's keys
and hyperparameters, a config's values: any of them may hold escape sequences that retitle the
terminal, clear it, or start a line that looks like torchplug's own output. Every ``core`` command
prints such text through :func:`printable` (one line) or :func:`printable_lines` (a traceback); the
``--json`` documents keep the text as given, escaped by JSON.
"""

from __future__ import annotations

__all__ = ["printable", "printable_lines"]


def printable(text: object) -> str:
    r"""``text`` as one line of terminal output: every character Python does not print is shown escaped.

    Newlines, carriage returns, tabs, ESC, BEL, DEL, the C1 controls and the invisible format
    characters (bidirectional overrides, zero-width spaces) become their Python escapes (``\n``,
    ``\x1b``, ``\u202e``), so the text can neither drive the terminal nor start a line of its own.

    Args:
        text: Anything; it is shown as ``str(text)``.

    Returns:
        The text, unchanged when it was printable already.
    """
    value = str(text)
    if value.isprintable():
        return value
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in value)


def printable_lines(text: object) -> list[str]:
    """The lines of a multi-line ``text`` (a traceback, a report), each made :func:`printable`."""
    return [printable(line) for line in str(text).splitlines()]
