"""``hydra/sweeper=tuned_lr`` (``tune=lr``): see :mod:`ablate.sweepers.tuned_lr`."""

from ablate.sweepers import tuned_lr


class TunedLRSweeper(tuned_lr.TunedLRSweeper):
    """Each variant at its own tuned learning rate (the ``_target_`` of conf/hydra/sweeper/tuned_lr.yaml)."""
