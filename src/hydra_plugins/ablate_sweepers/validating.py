"""``hydra/sweeper=validating`` (the default of conf/train.yaml): see :mod:`ablate.sweepers.validating`."""

from ablate.sweepers import validating


class ValidatingSweeper(validating.ValidatingSweeper):
    """Hydra's basic sweeper that checks every job's config first (conf/hydra/sweeper/validating.yaml)."""
