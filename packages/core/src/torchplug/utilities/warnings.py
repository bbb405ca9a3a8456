"""The warning categories of likely mistakes: ``PossibleUserWarning``, to filter them as a group."""

__all__ = ["PossibleUserWarning"]


class PossibleUserWarning(UserWarning):
    """A setting or a piece of data that looks like a mistake, but may be what you meant.

    torchplug warns with it where it cannot be sure (an epoch shorter than ``log_every_n_steps``,
    modules left in eval mode when training starts, an epoch value logged without ``sync_dist``
    under several processes, data that every process reads whole...). When you meant it, silence
    them all at once::

        import warnings
        from torchplug.utilities.warnings import PossibleUserWarning

        warnings.filterwarnings("ignore", category=PossibleUserWarning)
    """
