"""Settings shared by every test package."""

from __future__ import annotations

import os

# Our own suite must notice any plugin that fails to load, and must not depend on
# whatever plugins happen to be installed beside it beyond the ones it tests.
os.environ.setdefault("TORCHPLUG_STRICT_PLUGINS", "1")
