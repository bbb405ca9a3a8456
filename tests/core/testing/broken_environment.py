"""A cluster environment whose detection writes to the environment (detection must only read); torch-free."""

from __future__ import annotations

import os

from torchplug.environments.cluster_environment import Evidence
from torchplug.environments.local import LocalEnvironment


class WritingEnvironment(LocalEnvironment):
    """Its detection exports a variable."""

    detect_priority = -1

    @classmethod
    def evidence(cls) -> Evidence:
        os.environ["TORCHPLUG_TEST_DETECTED"] = "1"
        return Evidence.absent("TORCHPLUG_TEST_JOB not set")
