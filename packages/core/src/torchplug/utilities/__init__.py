"""Small helpers shared by the Trainer and the built-in plugins.

``rank_zero_only`` (a decorator), ``rank_zero_info`` and ``rank_zero_warn`` are importable from
here, as Lightning users expect (``from torchplug.utilities import rank_zero_only``).
"""

from torchplug.utilities.rank_zero import rank_zero_info, rank_zero_only, rank_zero_warn

__all__ = ["rank_zero_info", "rank_zero_only", "rank_zero_warn"]
