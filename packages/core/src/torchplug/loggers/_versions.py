"""What the file loggers share: ``version_<n>`` run directories and the ``hparams.yaml`` they write."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

_PREFIX = "version_"


def next_version(fs: Any, root: str) -> int:
    """One more than the highest ``version_<n>`` directory under ``root`` on ``fs`` (0 when there is none)."""
    try:
        names = [os.path.basename(p.rstrip("/")) for p in fs.ls(root, detail=False)]
    except FileNotFoundError:
        return 0
    numbers = [name[len(_PREFIX) :] for name in names if name.startswith(_PREFIX)]
    versions = [int(n) for n in numbers if n.isdigit()]
    return max(versions) + 1 if versions else 0


def version_folder(version: int | str) -> str:
    """The directory name of a run: ``version_<n>`` for a number, the string itself otherwise."""
    return version if isinstance(version, str) else f"{_PREFIX}{version}"


def write_hparams(fs: Any, directory: str, params: Mapping[str, Any]) -> None:
    """Write ``params`` to ``<directory>/hparams.yaml`` on ``fs`` (values YAML cannot represent as text)."""
    import yaml  # only a run that logs hyperparameters pays for it

    fs.makedirs(directory, exist_ok=True)
    plain = {
        k: v if isinstance(v, (bool, int, float, str, list, dict, type(None))) else repr(v) for k, v in params.items()
    }
    with fs.open(f"{directory}/hparams.yaml", "w") as stream:
        yaml.safe_dump(plain, stream, sort_keys=False)
