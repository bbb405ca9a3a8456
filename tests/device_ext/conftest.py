"""Fixtures for the tests of torchplug-testdevice (tests/fixtures/device-ext), the out-of-tree ``tpdev`` device.

Plain torch only: these tests prove the device itself, with no torchplug code involved. The device
is loaded in child interpreters (``tpdev`` runs snippets in a shared one, ``testdevice_site`` starts
fresh ones), never in the pytest process.
"""

from __future__ import annotations

from tests.device_ext_support import testdevice_site, testdevice_wheel_path, tpdev  # noqa: F401
