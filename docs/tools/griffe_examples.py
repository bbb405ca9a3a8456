"""A griffe extension: our docstrings' ``Example:`` sections render as examples.

torchplug's docstrings title a single example ``Example:`` (Google style allows both); griffe
knows only ``Examples:``, and would show the ``>>>`` lines of an ``Example:`` as plain text (where
a doctest's output such as ``[{'a': 0}]`` even reads as a Markdown link).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_SINGULAR = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Rename ``Example:`` to ``Examples:`` in every docstring before it is parsed."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _SINGULAR.sub(r"\1Examples:", obj.docstring.value)
