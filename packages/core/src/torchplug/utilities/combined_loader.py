"""``CombinedLoader``: several dataloaders read as one, in one of four modes.

``Trainer.fit(model, train_dataloaders={"a": loader_a, "b": loader_b})`` (or a list) combines the
training loaders in the ``"max_size_cycle"`` mode; give a ``CombinedLoader`` to choose another.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any, Final

__all__ = ["MODES", "CombinedLoader"]

#: The modes, and what one step of iteration yields in each.
MODES: Final = {
    "max_size_cycle": "one batch of every loader, until the longest ends; the shorter ones start over",
    "max_size": "one batch of every loader (None for a loader that has ended), until the longest ends",
    "min_size": "one batch of every loader, until the shortest ends",
    "sequential": "every batch of the first loader, then of the second, and so on",
}


def _length(iterable: Any) -> float:
    if isinstance(iterable, Sized):
        try:
            return len(iterable)
        except (TypeError, NotImplementedError):
            return math.inf
    return math.inf


class CombinedLoader:
    """Several iterables (dataloaders) read as one.

    Iterating yields ``(batch, batch_idx, dataloader_idx)``; ``batch`` has the shape of the
    iterables given (a dict of batches for a dict, a list for a list) except in ``"sequential"``
    mode, where it is one loader's batch and ``dataloader_idx`` says which.

    Args:
        iterables: A dict or a list (or tuple) of iterables, or a single one.
        mode: ``"max_size_cycle"`` (default), ``"max_size"``, ``"min_size"`` or ``"sequential"``
            (see :data:`MODES`).

    Example:
        >>> loader = CombinedLoader({"a": range(3), "b": range(5)}, "min_size")
        >>> [batch for batch, _, _ in loader]
        [{'a': 0, 'b': 0}, {'a': 1, 'b': 1}, {'a': 2, 'b': 2}]
    """

    def __init__(self, iterables: Any, mode: str = "max_size_cycle") -> None:
        if mode not in MODES:
            raise ValueError(f"CombinedLoader(mode={mode!r}): choose one of {', '.join(map(repr, MODES))}.")
        self.mode = mode
        self.iterables = iterables
        if isinstance(iterables, Mapping):
            self._keys: list[Any] | None = list(iterables)
            self._flat = list(iterables.values())
        elif isinstance(iterables, (list, tuple)):
            self._keys = None
            self._flat = list(iterables)
        else:
            self._keys = None
            self._flat = [iterables]
            self.iterables = [iterables]
        for index, iterable in enumerate(self._flat):
            if not isinstance(iterable, Iterable):
                name = self._keys[index] if self._keys is not None else index
                raise TypeError(f"CombinedLoader: the iterable {name!r} is a {type(iterable).__name__}, not iterable.")

    @property
    def flattened(self) -> list[Any]:
        """The loaders, in order (assignable, to replace them with processed ones of the same number)."""
        return list(self._flat)

    @flattened.setter
    def flattened(self, loaders: list[Any]) -> None:
        if len(loaders) != len(self._flat):
            raise ValueError(f"CombinedLoader.flattened: expected {len(self._flat)} loaders, got {len(loaders)}.")
        self._flat = list(loaders)
        self.iterables = dict(zip(self._keys, loaders)) if self._keys is not None else list(loaders)

    def _shape(self, batches: list[Any]) -> Any:
        return dict(zip(self._keys, batches)) if self._keys is not None else batches

    def __len__(self) -> int:
        lengths = [_length(i) for i in self._flat]
        if not lengths:
            return 0
        if self.mode == "min_size":
            total = min(lengths)
        elif self.mode == "sequential":
            total = sum(lengths)
        else:
            total = max(lengths)
        if math.isinf(total):
            raise TypeError("CombinedLoader has no length: one of its loaders has none.")
        return int(total)

    def __iter__(self) -> Iterator[tuple[Any, int, int]]:
        if self.mode == "sequential":
            yield from self._sequential()
            return
        iterators = [iter(i) for i in self._flat]
        ended = [False] * len(iterators)
        batch_idx = 0
        while iterators:
            batches: list[Any] = []
            for index, iterable in enumerate(self._flat):
                batch, ended_now = self._next(iterators, index, iterable, ended)
                if ended_now is None:
                    return
                batches.append(batch)
            if all(ended):
                return
            yield self._shape(batches), batch_idx, 0
            batch_idx += 1

    def _next(self, iterators: list[Iterator[Any]], index: int, iterable: Any, ended: list[bool]) -> tuple[Any, Any]:
        """The next batch of loader ``index``, and False; (None, None) when the whole iteration ends."""
        if ended[index] and self.mode == "max_size":
            return None, False  # this loader has ended, the others go on
        try:
            return next(iterators[index]), False
        except StopIteration:
            if self.mode == "min_size":
                return None, None
            ended[index] = True
            if all(ended):
                return None, None
            if self.mode == "max_size":
                return None, False
            iterators[index] = iter(iterable)  # max_size_cycle: this one starts over while a longer one goes on
            try:
                return next(iterators[index]), False
            except StopIteration:  # an empty loader cannot cycle
                return None, None

    def _sequential(self) -> Iterator[tuple[Any, int, int]]:
        for dataloader_idx, iterable in enumerate(self._flat):
            for batch_idx, batch in enumerate(iterable):
                yield batch, batch_idx, dataloader_idx

    def batches(self) -> Iterator[Any]:
        """Iterate the batches alone (what ``training_step`` receives), without the indices."""
        for batch, _, _ in self:
            yield batch

    def __repr__(self) -> str:
        return f"CombinedLoader(mode={self.mode!r}, loaders={len(self._flat)})"
