"""Handwritten digits (scikit-learn's 8x8 images): a DataModule and a classifier that reaches over 95%.

Train it from the repository root::

    core fit --config examples/digits/config.yaml
"""

from examples.digits.data import DigitsDataModule
from examples.digits.model import DigitsClassifier

__all__ = ["DigitsClassifier", "DigitsDataModule"]
