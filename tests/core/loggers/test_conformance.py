"""The core's loggers pass the logger conformance suite (``core plugins verify csv``), as a vendor's would."""

from __future__ import annotations

import pytest

from torchplug.testing import LoggerSuite, check_names


class TestCSVConformance(LoggerSuite):
    plugin = "csv"


class TestTensorBoardConformance(LoggerSuite):
    plugin = "tensorboard"

    @pytest.fixture
    def plugin_setup(self) -> None:
        pytest.importorskip("tensorboard")


def test_the_logger_checks_are_the_shared_ones_and_their_own() -> None:
    assert check_names("logger") == ["registered", "listing_is_light", "logger_api", "pickle", "fit"]
    assert "describe" not in check_names("logger") and "checkpoint_resume" not in check_names("logger")
