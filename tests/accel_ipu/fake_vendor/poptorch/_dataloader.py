"""poptorch.DataLoader: batches of ``batch_size x device_iterations x replicas x accumulation`` samples."""

from __future__ import annotations

from typing import Any

import torch

from poptorch import _fake
from poptorch._options import Options


class DataLoader(torch.utils.data.DataLoader):  # type: ignore[type-arg]
    def __init__(
        self,
        options: Options,
        dataset: Any,
        batch_size: int = 1,
        shuffle: bool = False,
        num_workers: int = 0,
        drop_last: bool = True,
        persistent_workers: bool | None = None,
        **kwargs: Any,
    ) -> None:
        assert isinstance(options, Options), f"options must be poptorch.Options, not {type(options).__name__}"
        _fake.record("DataLoader")
        options._freeze()
        if persistent_workers is None:
            persistent_workers = num_workers > 0
        self._combined_batch_size = (
            batch_size * options.device_iterations * options.replication_factor * options.Training.gradient_accumulation
        )
        self._options = options
        self.micro_batch_size = batch_size
        super().__init__(
            dataset,
            batch_size=self._combined_batch_size,
            shuffle=shuffle,
            num_workers=num_workers,
            drop_last=drop_last,
            persistent_workers=persistent_workers,
            **kwargs,
        )

    @property
    def combinedBatchSize(self) -> int:
        return self._combined_batch_size

    @property
    def options(self) -> Options:
        return self._options
