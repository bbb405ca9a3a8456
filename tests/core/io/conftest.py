"""Fixtures of the checkpoint IO tests: the shared filesystem roots."""

from tests.checkpoint_io_support import memory_root, root

__all__ = ["memory_root", "root"]
