"""Accelerator checks that need no training: availability, capabilities, ``parse_devices`` and the device itself.

The ``devices=`` rules checked here follow :meth:`torchplug.Accelerator.parse_devices`: every
value is either accepted, meaning the devices :meth:`~torchplug.Accelerator.get_parallel_devices`
then returns (one per process), or refused with ``ValueError``/``TypeError`` quoting the value.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from torchplug.testing._check import CheckFailed, check
from torchplug.testing._context import Context

_FIX_REFUSE: Final = (
    "refuse values you do not accept with ValueError or TypeError whose message quotes them, as in "
    "raise ValueError(f'devices={devices!r} is not valid with accelerator=...: give ...')"
)


class _Refused:
    """``parse_devices`` raised the allowed error; the message is kept."""

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _accelerator(context: Context) -> Any:
    context.subject.require_available()
    return context.subject.load()


def _parse(cls: Any, value: Any) -> Any:
    """What ``parse_devices(value)`` gives: the devices it accepted, or :class:`_Refused`; other errors fail."""
    try:
        parsed = cls.parse_devices(value)
    except (ValueError, TypeError) as exc:
        return _Refused(exc)
    except Exception as exc:
        raise CheckFailed(
            f"parse_devices({value!r}) raised {type(exc).__name__}: {exc}; only ValueError and TypeError are allowed"
        ) from exc
    return parsed


def _quotes(error: BaseException, value: Any) -> bool:
    text = str(error)
    return repr(value) in text or (isinstance(value, str) and value in text) or str(value) in text


def _devices(cls: Any, value: Any, parsed: Any) -> list[Any]:
    """``get_parallel_devices(parsed)``, checked to be a list of ``torch.device`` of the accelerator's type."""
    import torch

    try:
        devices = list(cls.get_parallel_devices(parsed))
    except Exception as exc:
        raise CheckFailed(
            f"parse_devices({value!r}) returned {parsed!r}, which get_parallel_devices() rejects: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    wrong = [d for d in devices if not isinstance(d, torch.device) or d.type != cls.device_type]
    if wrong:
        raise CheckFailed(
            f"get_parallel_devices({parsed!r}) (from devices={value!r}) returned {wrong!r}: expected torch.device "
            f"objects of the accelerator's device_type {cls.device_type!r}, one per process"
        )
    return devices


def _must_refuse(cls: Any, values: list[Any], why: str) -> str:
    for value in values:
        result = _parse(cls, value)
        if not isinstance(result, _Refused):
            raise CheckFailed(f"parse_devices({value!r}) returned {result!r}; {why}")
        if not _quotes(result.error, value):
            raise CheckFailed(f"parse_devices({value!r}) raised {result.error!r}, which does not quote {value!r}")
    return f"refused {', '.join(repr(v) for v in values)} with the value quoted"


@check(
    "accelerator",
    "availability",
    summary="is_available(), unavailable_reason() and the probe never raise, agree, and give a reason when unavailable",
    fix="make is_available() return a bool without raising (catch the vendor library's errors), and "
    "unavailable_reason() return None exactly when is_available() is True, else words a user can act on",
)
def availability(context: Context) -> str:
    subject = context.subject
    cls = subject.load()
    probe = subject.entry.run_probe()
    answers = [cls.is_available() for _ in range(2)]
    reason = cls.unavailable_reason()
    if not all(isinstance(a, bool) for a in answers):
        raise CheckFailed(f"is_available() returned {answers[0]!r}, not a bool")
    if answers[0] != answers[1]:
        raise CheckFailed(f"is_available() answered {answers[0]} then {answers[1]}: it must be stable")
    if answers[0] and reason is not None:
        raise CheckFailed(f"is_available() is True but unavailable_reason() says {reason!r}")
    if not answers[0] and not (isinstance(reason, str) and reason.strip()):
        raise CheckFailed(f"is_available() is False but unavailable_reason() returned {reason!r}: say why, with a hint")
    if probe is not None and answers[0]:
        raise CheckFailed(f"the registered probe says {probe!r}, but is_available() is True")
    return "available" if answers[0] else f"unavailable: {reason}"


@check(
    "accelerator",
    "capabilities",
    summary="the class attributes name a real device type and installed strategies/precisions; default_strategy() too",
    fix="set device_type to a torch device type, auto_priority to an int, and name only registered plugins in "
    "default_precision, supported_precisions, single_device_strategy, parallel_strategy and default_strategy()",
)
def capabilities(context: Context) -> str:
    import torch

    subject = context.subject
    cls = subject.load()
    problems = []
    try:
        torch.device(cls.device_type)
    except (RuntimeError, TypeError) as exc:
        problems.append(f"device_type={cls.device_type!r} is not a torch device type ({exc})")
    for attribute, types in (("auto_priority", int), ("process_group_backend", str)):
        value = getattr(cls, attribute)
        if not isinstance(value, types) or isinstance(value, bool):
            problems.append(f"{attribute}={value!r} is not a {types.__name__}")
    if cls.autocast_device_type is not None and not isinstance(cls.autocast_device_type, str):
        problems.append(f"autocast_device_type={cls.autocast_device_type!r} is not a str or None")
    problems += _unknown(subject, "strategy", {cls.single_device_strategy, cls.parallel_strategy}, "strategies")
    declared = set(cls.supported_precisions or ())
    problems += _unknown(subject, "precision", declared | {cls.default_precision}, "precisions")
    instance = subject.create()
    for devices in (1, 2):
        name = instance.default_strategy(devices, 1, False)
        problems += _unknown(subject, "strategy", {name}, f"default_strategy({devices}, 1, False)")
    mapped = instance.precision_for(cls.default_precision)
    if not instance.supports_precision(mapped):
        problems.append(f"default_precision={cls.default_precision!r} (as {mapped!r}) is not among its supported ones")
    if problems:
        raise CheckFailed("; ".join(problems))
    io = cls.default_checkpoint_io
    note = (
        f"; default_checkpoint_io {io!r} is not installed: the core's 'torch' IO is used"
        if io and io not in (subject.host.registry("checkpoint_io"))
        else ""
    )
    strategies = f"{cls.single_device_strategy!r}/{cls.parallel_strategy!r}"
    return f"device_type {cls.device_type!r}, priority {cls.auto_priority}, strategies {strategies}{note}"


def _unknown(context_subject: Any, kind: str, names: set[str], what: str) -> list[str]:
    registry = context_subject.host.registry(kind)
    missing = sorted(n for n in names if n not in registry)
    return (
        [f"{what} names {', '.join(repr(n) for n in missing)}, which no installed plugin registers"] if missing else []
    )


@check(
    "accelerator",
    "auto_device_count",
    summary="auto_device_count() is an int of at least 1 where the accelerator is available",
    fix="return the number of usable devices as an int; when there is none, is_available() must say False",
)
def auto_device_count(context: Context) -> str:
    cls = _accelerator(context)
    count = cls.auto_device_count()
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise CheckFailed(f"auto_device_count() returned {count!r} although is_available() is True")
    return f"{count} device(s)"


@check(
    "accelerator",
    "parse_devices_count",
    summary="devices=1 and devices=auto_device_count() are accepted and give that many devices",
    fix="accept a positive number of devices up to auto_device_count(), and have get_parallel_devices() return "
    "one torch.device of device_type per process",
)
def parse_devices_count(context: Context) -> str:
    cls = _accelerator(context)
    count = cls.auto_device_count()
    found = []
    for value in dict.fromkeys((1, count)):
        parsed = _parse(cls, value)
        if isinstance(parsed, _Refused):
            raise CheckFailed(f"parse_devices({value!r}) refused it: {parsed.error}")
        devices = _devices(cls, value, parsed)
        if len(devices) != value:
            raise CheckFailed(f"devices={value!r} gave {len(devices)} device(s): {devices}")
        found.append(f"{value} -> {[str(d) for d in devices]}")
    return "; ".join(found)


def _accepted_or_quoted(cls: Any, value: Any, expect: Callable[[list[Any]], str | None]) -> str:
    parsed = _parse(cls, value)
    if isinstance(parsed, _Refused):
        if not _quotes(parsed.error, value):
            raise CheckFailed(f"parse_devices({value!r}) raised {parsed.error!r}, which does not quote {value!r}")
        return f"{value!r} refused"
    problem = expect(_devices(cls, value, parsed))
    if problem:
        raise CheckFailed(f"devices={value!r}: {problem}")
    return f"{value!r} accepted"


@check(
    "accelerator",
    "parse_devices_all",
    summary="devices=-1 (and '-1') means every device, or is refused quoting the value",
    fix="treat -1 as all auto_device_count() devices (as Lightning does), or refuse it with a message quoting it",
)
def parse_devices_all(context: Context) -> str:
    cls = _accelerator(context)
    count = cls.auto_device_count()

    def every(devices: list[Any]) -> str | None:
        return None if len(devices) == count else f"gave {len(devices)} device(s), but auto_device_count() is {count}"

    return ", ".join(_accepted_or_quoted(cls, value, every) for value in (-1, "-1"))


@check(
    "accelerator",
    "parse_devices_strings",
    summary="devices='1' means what devices=1 means; '0,1'-style strings are accepted as ids or refused quoting",
    fix="parse strings of digits as the same number, and comma-separated ids as a list of ids (or refuse them "
    "with a message quoting the value)",
)
def parse_devices_strings(context: Context) -> str:
    cls = _accelerator(context)
    one = _devices(cls, 1, _parse(cls, 1))

    def same_as_one(devices: list[Any]) -> str | None:
        return None if devices == one else f"gave {devices}, but devices=1 gives {one}"

    def ids(wanted: int) -> Callable[[list[Any]], str | None]:
        def check_ids(devices: list[Any]) -> str | None:
            return None if len(devices) == wanted else f"gave {len(devices)} device(s) for {wanted} id(s)"

        return check_ids

    parts = [_accepted_or_quoted(cls, "1", same_as_one), _accepted_or_quoted(cls, "0,", ids(1))]
    if cls.auto_device_count() >= 2:
        parts.append(_accepted_or_quoted(cls, "0,1", ids(2)))
    return ", ".join(parts)


@check(
    "accelerator",
    "parse_devices_lists",
    summary="lists of device ids give one device per id (with that index), or are refused quoting the value",
    fix="return one device per listed id from get_parallel_devices() (torch.device(type, id)), or refuse lists "
    "with a message quoting them",
)
def parse_devices_lists(context: Context) -> str:
    cls = _accelerator(context)

    def indexed(ids: list[int]) -> Callable[[list[Any]], str | None]:
        def check_ids(devices: list[Any]) -> str | None:
            if len(devices) != len(ids):
                return f"gave {len(devices)} device(s) for ids {ids}"
            indices = [d.index for d in devices]
            if any(i is not None for i in indices) and indices != ids:
                return f"gave devices {[str(d) for d in devices]} for ids {ids}"
            return None

        return check_ids

    values = [[0]] + ([[0, 1], [1]] if cls.auto_device_count() >= 2 else [])
    return ", ".join(_accepted_or_quoted(cls, v, indexed(list(v))) for v in values)


@check(
    "accelerator",
    "parse_devices_duplicates",
    summary="a device id given twice ([0, 0], '0,0') is refused, quoting the value",
    fix="refuse repeated ids: raise ValueError(f'devices={devices!r} names device 0 twice ...')",
)
def parse_devices_duplicates(context: Context) -> str:
    cls = _accelerator(context)
    return _must_refuse(cls, [[0, 0], "0,0"], "a device cannot run two processes; refuse repeated ids")


@check(
    "accelerator",
    "parse_devices_too_many",
    summary="more devices (or a higher id) than auto_device_count() is refused, quoting the value",
    fix="compare the request with auto_device_count() and refuse what is not there, naming what is",
)
def parse_devices_too_many(context: Context) -> str:
    cls = _accelerator(context)
    count = cls.auto_device_count()
    parts = []
    parsed = _parse(cls, count + 1)
    if isinstance(parsed, _Refused):
        if not _quotes(parsed.error, count + 1):
            raise CheckFailed(f"parse_devices({count + 1}) raised {parsed.error!r}, which does not quote {count + 1}")
        parts.append(f"{count + 1} refused")
    else:
        devices = _devices(cls, count + 1, parsed)
        # Devices without an index are processes on one device (the CPU's): more of them than
        # auto_device_count() is a legitimate request. Indexed devices must exist.
        if any(d.index is not None for d in devices) or len(devices) != count + 1:
            raise CheckFailed(
                f"parse_devices({count + 1}) accepted a request for {count + 1} devices, but "
                f"auto_device_count() is {count}; it gave {[str(d) for d in devices]}"
            )
        parts.append(f"{count + 1} accepted as {count + 1} processes")
    parts.append(_must_refuse(cls, [[count]], f"device id {count} does not exist (auto_device_count() is {count})"))
    return "; ".join(parts)


@check(
    "accelerator",
    "parse_devices_bools",
    summary="devices=True and devices=False are refused, quoting the value",
    fix="test isinstance(devices, bool) before int (a bool is an int in Python) and raise TypeError quoting it",
)
def parse_devices_bools(context: Context) -> str:
    cls = _accelerator(context)
    return _must_refuse(cls, [True, False], "a bool says nothing about devices")


#: Values no accelerator can make sense of.
JUNK: Final = ("abc", "", 1.5, "1.5", -2, None, {"devices": 1}, b"1")


@check(
    "accelerator",
    "parse_devices_junk",
    summary="junk (strings that are not numbers, floats, -2, None, dicts, bytes) is refused, quoting the value",
    fix=_FIX_REFUSE,
)
def parse_devices_junk(context: Context) -> str:
    cls = _accelerator(context)
    return _must_refuse(cls, list(JUNK), "it is not a number of devices or a list of ids")


@check(
    "accelerator",
    "device",
    summary="setup_device() on the first device, get_device_stats() (a dict of str keys) and teardown() work",
    fix="make setup_device() select the given device, get_device_stats() return a dict keyed by str "
    "(empty when there is nothing to report), and teardown() safe to call once setup_device() ran",
)
def device(context: Context) -> str:
    cls = _accelerator(context)
    first = _devices(cls, 1, _parse(cls, 1))[0]
    accelerator = context.subject.create()
    accelerator.setup_device(first)
    stats = accelerator.get_device_stats(first)
    if not isinstance(stats, dict) or not all(isinstance(k, str) for k in stats):
        raise CheckFailed(f"get_device_stats({first}) returned {stats!r}; expected a dict with str keys")
    accelerator.teardown()
    return f"{first}: {len(stats)} statistic(s)" + (f" ({', '.join(sorted(stats)[:4])}...)" if stats else "")


@check(
    "accelerator",
    "rng_state",
    summary="get_rng_state() survives torch.save/torch.load(weights_only=True) and set_rng_state() restores it",
    fix="return only tensors, numbers, strings, lists and dicts from get_rng_state() (None when the device has no "
    "generator of its own), and accept exactly that in set_rng_state()",
)
def rng_state(context: Context) -> str:
    import io

    import torch

    cls = _accelerator(context)
    accelerator = context.subject.create()
    accelerator.setup_device(_devices(cls, 1, _parse(cls, 1))[0])
    state = accelerator.get_rng_state()
    buffer = io.BytesIO()
    torch.save({"rng": state}, buffer)
    buffer.seek(0)
    try:
        loaded = torch.load(buffer, weights_only=True)["rng"]
    except Exception as exc:
        raise CheckFailed(
            f"get_rng_state() returned data that torch.load(weights_only=True) refuses: {unpickling_error(exc)}"
        ) from exc
    accelerator.set_rng_state(loaded)
    again = accelerator.get_rng_state()
    if not _same(state, again):
        raise CheckFailed(f"after set_rng_state(state), get_rng_state() returned {again!r} instead of {state!r}")
    accelerator.teardown()
    if state is None:
        return "None: no generator of its own (the core saves torch's CPU generator itself)"
    return f"{type(state).__name__} round-tripped"


def unpickling_error(error: BaseException) -> str:
    """The line of a ``weights_only`` load error that names what was refused (torch's message is long)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    refused = [line for line in lines if "Unsupported global" in line or "WeightsUnpickler error" in line]
    return (refused or lines or [type(error).__name__])[0]


def _same(left: Any, right: Any) -> bool:
    import torch

    if isinstance(left, torch.Tensor) and isinstance(right, torch.Tensor):
        return left.shape == right.shape and bool(torch.equal(left.cpu(), right.cpu()))
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, (list, tuple)) and isinstance(right, (list, tuple)):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right))
    return bool(left == right)
