"""The fake's own state (not part of poptorch's API): what was called, and which model holds the IPUs.

The tests read it; it is reset whenever the tests forget the ``poptorch`` modules.
"""

from __future__ import annotations

import os
from typing import Any

#: Names of the fake functions called, in order (only those the tests look at).
calls: list[str] = []

#: Every compiled-model wrapper created (training and inference), in order.
executors: list[Any] = []

#: The compiled model that holds the IPUs now (only one can, as on real IPUs).
attached: Any = None

#: The tensor ``identity_loss`` marked last: a training model must return it.
loss: Any = None

#: How many times a ``poptorch.autocast`` region was entered.
autocast_regions = 0


def ipus() -> int:
    """How many IPUs this machine has (``FAKE_IPU_COUNT``, default 4)."""
    return int(os.environ.get("FAKE_IPU_COUNT", "4"))


def record(name: str) -> None:
    calls.append(name)


def claim(executor: Any) -> None:
    """Give the IPUs to ``executor``; fails, as Poplar does, when another model holds them."""
    global attached
    if attached is not None and attached is not executor:
        raise RuntimeError(
            "Failed to acquire 1 IPU(s): the IPUs are attached to another model. Call detachFromDevice() on it first."
        )
    attached = executor


def release(executor: Any) -> None:
    global attached
    if attached is executor:
        attached = None
