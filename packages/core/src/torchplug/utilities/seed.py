"""Seeding every random number generator, and capturing/restoring their states for exact resumes."""

from __future__ import annotations

import hashlib
import os
import random
from typing import Any

import torch

from torchplug.utilities.env_vars import env_int

__all__ = ["capture_rng_states", "restore_rng_states", "seed_everything", "worker_init_function", "workers_seeded"]


def seed_everything(seed: int | None = None, workers: bool = False, verbose: bool = True) -> int:
    """Seed Python's ``random``, NumPy (when installed) and torch, and export ``TORCHPLUG_GLOBAL_SEED``.

    Args:
        seed: The seed; None reads ``TORCHPLUG_GLOBAL_SEED``, else picks one from the OS.
        workers: Also export ``TORCHPLUG_SEED_WORKERS=1``: the Trainer then gives every DataLoader
            with workers and no ``worker_init_fn`` :func:`worker_init_function`, so that the workers
            of every process get distinct, reproducible seeds (torch alone gives the workers of all
            ranks the same ones).
        verbose: Log ``Seed set to N`` (an info message of the ``torchplug`` logger, global rank 0).

    Raises:
        ValueError: ``seed`` is not an int from 0 to 2**32 - 1.
        SettingsError: ``TORCHPLUG_GLOBAL_SEED`` is set to something else.

    Returns:
        The seed used.
    """
    if seed is None:
        env_seed = env_int("TORCHPLUG_GLOBAL_SEED", None, minimum=0, maximum=2**32 - 1)
        seed = env_seed if env_seed is not None else random.SystemRandom().randint(0, 2**31 - 1)
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError(f"seed={seed!r} is not valid: give an int between 0 and 2**32 - 1.")
    os.environ["TORCHPLUG_GLOBAL_SEED"] = str(seed)
    os.environ["TORCHPLUG_SEED_WORKERS"] = "1" if workers else "0"
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:
        pass
    torch.manual_seed(seed)  # also seeds every accelerator generator torch knows about
    if verbose:
        from torchplug.utilities.rank_zero import rank_zero_info

        rank_zero_info(f"Seed set to {seed}")
    return seed


def workers_seeded() -> bool:
    """Whether :func:`seed_everything` was asked to seed dataloader workers (``workers=True``)."""
    from torchplug.utilities.env_vars import env_bool

    return env_bool("TORCHPLUG_SEED_WORKERS", False)


def worker_init_function(worker_id: int, rank: int | None = None) -> None:
    """Seed a dataloader worker from its loader's base seed, its id and the process's global rank.

    The Trainer gives it to every DataLoader with workers and no ``worker_init_fn`` of its own after
    ``seed_everything(workers=True)``. torch alone seeds a worker with ``base_seed + worker_id``, and
    ``base_seed`` is drawn from the global generator, which ``seed_everything`` seeds alike in every
    process: the workers of all ranks would then draw the same random augmentations. Here the global
    rank enters the seed, so each process's workers differ, and the run stays reproducible.

    Args:
        worker_id: The worker's index within its loader (what the DataLoader passes).
        rank: The global rank of the process; None reads ``RANK`` (0 when unset).
    """
    if rank is None:
        rank = env_int("RANK", 0, minimum=0)
    base = torch.initial_seed() - worker_id  # torch seeded this worker with base_seed + worker_id
    digest = hashlib.sha256(f"{base}:{worker_id}:{rank}".encode()).digest()
    seed = int.from_bytes(digest[:8], "little")
    torch.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed % 2**32)
    except ImportError:
        pass


def capture_rng_states() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's global generators, as ``weights_only``-safe data."""
    version, internal, gauss = random.getstate()
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "python": [version, torch.tensor(internal, dtype=torch.int64), gauss],  # one tensor, not 625 ints
    }
    try:
        import numpy as np

        state = np.random.get_state(legacy=True)
        assert isinstance(state, tuple), "the global RandomState is an MT19937, whose legacy state is a tuple"
        kind, keys, pos, has_gauss, cached = state
        words = np.asarray(keys, dtype="int64")  # uint32 as int64: a torch-native, weights_only-safe tensor
        states["numpy"] = [kind, torch.from_numpy(words), int(pos), int(has_gauss), float(cached)]
    except ImportError:
        pass
    return states


def restore_rng_states(states: dict[str, Any]) -> None:
    """Restore what :func:`capture_rng_states` returned."""
    torch.set_rng_state(states["torch"])
    version, internal, gauss = states["python"]
    words = internal.tolist() if isinstance(internal, torch.Tensor) else internal
    random.setstate((version, tuple(words), gauss))
    if "numpy" in states:
        try:
            import numpy as np
        except ImportError:
            return
        kind, keys, pos, has_gauss, cached = states["numpy"]
        np.random.set_state((kind, keys.numpy().astype("uint32"), pos, has_gauss, cached))
