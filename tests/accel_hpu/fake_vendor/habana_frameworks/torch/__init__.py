"""habana_frameworks.torch: importing it loads the (fake) HPU bridge: ``hpu`` tensors live on the CPU."""

from __future__ import annotations

from habana_frameworks.torch import _fake

_fake.install()
