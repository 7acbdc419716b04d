"""Hydra plugins of the ablate package: Hydra 1.3 instantiates plugins only from the ``hydra_plugins``
namespace, so each module here gives a class of :mod:`ablate.sweepers` or :mod:`ablate.config.store` that name."""
