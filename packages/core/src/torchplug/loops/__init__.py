"""The loops of a run: fitting, evaluation and prediction, the optimization step, and their checks.

Each loop receives the run's configuration, its state and the collaborators it uses (hooks,
logging, data, strategy); none holds the Trainer. The Trainer builds them once and exposes
Lightning's loop surface (``trainer.fit_loop``, ``fit_loop.epoch_loop``...) from them.
"""
