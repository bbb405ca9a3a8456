"""What the file loggers share: ``version_<n>`` run directories and the ``hparams.yaml`` they write."""

from __future__ import annotations

import enum
import os
from collections.abc import Mapping
from typing import Any, Final

_PREFIX = "version_"
_PLAIN: Final = (bool, int, float, str)  # written as they are


def next_version(fs: Any, root: str) -> int:
    """One more than the highest ``version_<n>`` directory under ``root`` on ``fs`` (0 when there is none)."""
    versions = [int(name[len(_PREFIX) :]) for name in numbered_versions(fs, root)]
    return max(versions) + 1 if versions else 0


def numbered_versions(fs: Any, root: str) -> list[str]:
    """The ``version_<n>`` directory names under ``root`` on ``fs`` (none when it does not exist)."""
    try:
        entries = fs.ls(root, detail=True)
    except FileNotFoundError:
        return []
    names = [os.path.basename(e["name"].rstrip("/")) for e in entries if e.get("type") == "directory"]
    return [name for name in names if name.startswith(_PREFIX) and name[len(_PREFIX) :].isdigit()]


def check_version(owner: str, version: Any) -> None:
    """Refuse a run version that names no directory this layout can find again (a negative, a float...).

    Raises:
        MisconfigurationError: ``version`` is not None, an int >= 0 or a non-empty string.
    """
    if version is None or (isinstance(version, str) and version):
        return
    if isinstance(version, int) and not isinstance(version, bool) and version >= 0:
        return
    from torchplug._errors import MisconfigurationError

    raise MisconfigurationError(
        f"{owner}(version={version!r}) is not valid: give None (the next free version_<n>), an int >= 0 "
        "(version_<n>) or a non-empty string (the directory's name)."
    )


def check_save_dir(owner: str, save_dir: Any) -> str:
    """``save_dir`` as a string; refused by name when it is not a path or URL, or is an existing local file.

    Raises:
        MisconfigurationError: ``save_dir`` is not a str or ``os.PathLike``, is empty, or names a file.
    """
    from torchplug._errors import MisconfigurationError

    text = os.fspath(save_dir) if isinstance(save_dir, (str, os.PathLike)) else None
    if not isinstance(text, str) or not text:
        raise MisconfigurationError(
            f"{owner}(save_dir={save_dir!r}) is not valid: give a directory, as a local path (str or pathlib.Path) "
            "or an fsspec URL."
        )
    if "://" not in text and os.path.isfile(text):
        raise MisconfigurationError(
            f"{owner}(save_dir={text!r}) is a file, and the logger writes its runs in a directory there. Hint: "
            "give a directory, or remove the file."
        )
    return text


def version_folder(version: int | str) -> str:
    """The directory name of a run: ``version_<n>`` for a number, the string itself otherwise."""
    return version if isinstance(version, str) else f"{_PREFIX}{version}"


def write_hparams(fs: Any, directory: str, params: Mapping[str, Any]) -> None:
    """Write ``params`` to ``<directory>/hparams.yaml`` on ``fs`` (see :func:`yaml_value` for what is written)."""
    import yaml  # only a run that logs hyperparameters pays for it

    fs.makedirs(directory, exist_ok=True)
    plain = {_yaml_key(k): yaml_value(v) for k, v in params.items()}
    with fs.open(f"{directory}/hparams.yaml", "w") as stream:
        yaml.safe_dump(plain, stream, sort_keys=False)


def yaml_value(value: Any) -> Any:
    """``value`` as plain data for ``yaml.safe_dump``, at any depth of dicts, lists and tuples.

    Numbers of other libraries (NumPy scalars, one-element tensors and arrays) become Python
    numbers, enum members their value, other subclasses of ``int``/``float``/``str`` their plain
    value, tuples lists; anything else YAML cannot represent is written as text (its ``repr``).
    """
    if value is None or type(value) in _PLAIN:
        return value
    if isinstance(value, Mapping):
        return {_yaml_key(k): yaml_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [yaml_value(v) for v in value]
    if isinstance(value, enum.Enum):
        return yaml_value(value.value)
    item = getattr(value, "item", None)
    if callable(item):  # NumPy scalars, tensors and arrays of one element
        try:
            number = item()
        except (TypeError, ValueError, RuntimeError):  # more than one element
            number = None
        if type(number) in _PLAIN:
            return number
    for base in (bool, int, float, str):
        if isinstance(value, base):
            return base.__str__(value) if base is str else base(value)
    return repr(value)


def _yaml_key(key: Any) -> Any:
    return key if key is None or type(key) in _PLAIN else str(key)
