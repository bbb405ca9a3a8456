"""The ``devices=`` grammar shared by the accelerators, and the core's check against the device count.

``Trainer(devices=...)`` takes the same values as Lightning's:

* a positive count ``N`` (or its digits, ``"2"``): the first ``N`` devices, ids ``0 .. N-1``;
* ``-1`` (or ``"-1"``): every device there is;
* device ids in a string, separated by commas: ``"0,2"``, or ``"1,"`` for the one device 1;
* device ids in a list or tuple: ``[0, 2]``;
* ``"auto"``, which the Trainer replaces by the accelerator's ``auto_device_count()`` first.

:func:`parse_device_ids` turns any of these into the list of ids, checked against the number of
devices, with errors that quote the value given and that number. An accelerator plugin may use it
in its ``parse_devices``; the CPU accelerator does. Torch-free.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from torchplug._errors import MisconfigurationError

if TYPE_CHECKING:
    from torchplug.accelerators.accelerator import Accelerator

__all__ = ["check_device_count", "parse_device_ids"]


def parse_device_ids(devices: Any, available: int | None, accelerator: str = "this accelerator") -> list[int]:
    """The device ids ``devices=`` selects, checked against the ``available`` devices.

    Args:
        devices: The user's value: a count, ``-1``, ``"0,2"``, ``"1,"``, or a list of ids (see the
            module docstring). ``"auto"`` must be resolved by the caller first.
        available: How many devices there are (the accelerator's ``auto_device_count()``); None
            when devices are processes without a fixed number (the CPU): then only a positive
            count is accepted, and ``devices=N`` gives ``[0 .. N-1]``.
        accelerator: How error messages name the accelerator (``"the CPU accelerator"``,
            ``"accelerator='xpu'"``).

    Returns:
        The selected ids, in the order given, without duplicates.

    Raises:
        TypeError: ``devices`` is not an int, a string or a sequence of ints (``True``, ``2.0``...).
        ValueError: A count below 1 other than -1, more devices or an id beyond ``available``, a
            duplicated or negative id, or no device at all. The message quotes ``devices`` and
            ``available``.

    Example:
        >>> parse_device_ids("0,2", available=4)
        [0, 2]
        >>> parse_device_ids(-1, available=2)
        [0, 1]
    """
    where = f"devices={devices!r} is not valid with {accelerator}"
    if isinstance(devices, str):
        return _from_text(devices, available, where)
    if isinstance(devices, int) and not isinstance(devices, bool):
        return _from_count(devices, available, where)
    if isinstance(devices, Sequence) and all(isinstance(i, int) and not isinstance(i, bool) for i in devices):
        return _from_ids(list(devices), available, where)
    raise TypeError(f"{where}: {_grammar(available)}")


def _grammar(available: int | None) -> str:
    if available is None:
        return "give the number of processes, a positive int such as devices=2."
    return (
        f"give a number of devices from 1 to {available} (or -1 for all {available}), device ids as a list "
        "such as [0, 2] or a string such as '0,2'."
    )


def _from_text(text: str, available: int | None, where: str) -> list[int]:
    stripped = text.strip()
    if "," in stripped:
        parts = [part.strip() for part in stripped.split(",") if part.strip()]
        if available is None or not all(part.isdigit() for part in parts):
            raise ValueError(f"{where}: {_grammar(available)}")
        return _from_ids([int(part) for part in parts], available, where)
    if not stripped.lstrip("-").isdigit():
        raise ValueError(f"{where}: {_grammar(available)}")
    return _from_count(int(stripped), available, where)


def _from_count(count: int, available: int | None, where: str) -> list[int]:
    if available is None:
        if count < 1:
            raise ValueError(f"{where}: {_grammar(available)}")
        return list(range(count))
    if count == -1:
        if available < 1:
            raise ValueError(f"{where}: it asks for every device, but there is none on this machine.")
        return list(range(available))
    if count < 1:
        raise ValueError(f"{where}: {_grammar(available)}")
    if count > available:
        raise ValueError(
            f"{where}: it asks for {count} devices, but there are {available}. "
            f"Hint: devices={available} or devices=-1 uses all of them."
        )
    return list(range(count))


def _from_ids(ids: list[int], available: int | None, where: str) -> list[int]:
    if available is None:
        raise ValueError(f"{where}: {_grammar(available)}")
    if not ids:
        raise ValueError(f"{where}: it selects no device. {_grammar(available).capitalize()}")
    duplicated = sorted({i for i in ids if ids.count(i) > 1})
    if duplicated:
        raise ValueError(f"{where}: device {duplicated[0]} is listed twice. Give each id once.")
    beyond = [i for i in ids if not 0 <= i < available]
    if beyond:
        raise ValueError(
            f"{where}: there is no device {beyond[0]}; there are {available}, ids 0 to {available - 1}."
            if available
            else f"{where}: there is no device {beyond[0]}; there is none on this machine."
        )
    return ids


def check_device_count(accelerator: Accelerator, parsed: Any, devices: object) -> None:
    """Refuse ``devices=`` values that ask for more devices than ``accelerator.auto_device_count()`` reports.

    The core calls it for every value the user gave (not for ``"auto"``), after the accelerator's
    own ``parse_devices``, so that an accelerator that does not check is still held to its count.
    Accelerators whose devices are processes (``devices_are_processes``, the CPU) are not checked.

    Args:
        accelerator: The accelerator chosen.
        parsed: What its ``parse_devices`` returned: a count or a list of ids (other shapes are
            left to the accelerator).
        devices: The value the user gave, quoted in the message.

    Raises:
        MisconfigurationError: More devices, or a higher id, than the accelerator reports; the
            message quotes ``devices`` and the count.
    """
    if accelerator.devices_are_processes:
        return
    if isinstance(parsed, int) and not isinstance(parsed, bool):
        wanted, highest = parsed, parsed - 1
    elif isinstance(parsed, (list, tuple)) and parsed and all(isinstance(i, int) for i in parsed):
        wanted, highest = len(parsed), max(parsed)
    else:
        return
    count = int(accelerator.auto_device_count())
    if wanted <= count and highest < count:
        return
    name = type(accelerator).__name__
    asked = f"device {highest}" if wanted <= count else f"{wanted} devices"
    raise MisconfigurationError(
        f"devices={devices!r} asks for {asked}, but {name}.auto_device_count() reports {count} on this machine. "
        f"Hint: devices={count} (or -1) uses all of them; devices='auto' lets the accelerator choose."
        if count
        else f"devices={devices!r} asks for {asked}, but {name}.auto_device_count() reports none on this machine."
    )
