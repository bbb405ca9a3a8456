"""The digits data: 1,797 real 8x8 images of handwritten digits that ship inside scikit-learn (no download)."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

import torchplug

__all__ = ["DigitsDataModule"]


def load_digits() -> tuple[torch.Tensor, torch.Tensor]:
    """The images as 64 pixel intensities (0 to 16) each, and their labels (0 to 9)."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError as exc:
        raise ImportError("The digits example needs scikit-learn. Hint: pip install scikit-learn") from exc
    images, labels = sklearn_digits(return_X_y=True)
    return torch.tensor(images, dtype=torch.float32), torch.tensor(labels, dtype=torch.long)


class DigitsDataModule(torchplug.DataModule):
    """Train, validation and test splits of the digits, standardised with the training split's statistics.

    Args:
        batch_size: Images per training batch.
        val_fraction: Share of the images held out for validation.
        test_fraction: Share of the images held out for testing (and predicting).
        split_seed: Seed of the split, the same in every process whatever ``--seed_everything`` says.
        num_workers: DataLoader worker processes.
    """

    def __init__(
        self,
        batch_size: int = 64,
        val_fraction: float = 0.15,
        test_fraction: float = 0.15,
        split_seed: int = 0,
        num_workers: int = 0,
    ) -> None:
        self.save_hyperparameters()
        self.batch_size = batch_size
        self.val_fraction = val_fraction
        self.test_fraction = test_fraction
        self.split_seed = split_seed
        self.num_workers = num_workers

    def setup(self, stage: str) -> None:
        images, labels = load_digits()
        order = torch.randperm(len(images), generator=torch.Generator().manual_seed(self.split_seed))
        n_test = int(len(images) * self.test_fraction)
        n_val = int(len(images) * self.val_fraction)
        test, val, train = order[:n_test], order[n_test : n_test + n_val], order[n_test + n_val :]
        mean = images[train].mean(0)
        std = images[train].std(0).clamp_min(1.0)  # pixels that are (almost) always blank stay near 0
        images = (images - mean) / std
        self.train_set = TensorDataset(images[train], labels[train])
        self.val_set = TensorDataset(images[val], labels[val])
        self.test_set = TensorDataset(images[test], labels[test])

    def _loader(self, dataset: TensorDataset, shuffle: bool = False, batch_size: int = 256) -> DataLoader[Any]:
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=self.num_workers)

    def train_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.train_set, shuffle=True, batch_size=self.batch_size)

    def val_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.val_set)

    def test_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.test_set)

    def predict_dataloader(self) -> DataLoader[Any]:
        return self._loader(self.test_set)
