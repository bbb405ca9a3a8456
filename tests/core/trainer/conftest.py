"""Fixtures for the Trainer's tests: a small real classifier and its data (see models.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from tests.core.trainer.models import BlobData, Classifier, quiet, weights


@pytest.fixture
def classifier() -> Callable[..., Classifier]:
    """Build a Classifier with a fixed seed."""

    def build(**kwargs: Any) -> Classifier:
        torch.manual_seed(0)
        return Classifier(**kwargs)

    return build


@pytest.fixture
def data() -> Callable[..., BlobData]:
    """Build the blob DataModule."""
    return BlobData


@pytest.fixture
def trainer_args() -> Callable[..., dict[str, Any]]:
    """The quiet Trainer arguments builder (see :func:`quiet`)."""
    return quiet


@pytest.fixture
def snapshot() -> Callable[[torch.nn.Module], dict[str, torch.Tensor]]:
    """The :func:`weights` helper as a fixture."""
    return weights
