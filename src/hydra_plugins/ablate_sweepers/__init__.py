"""Hydra plugins of the ablate package.

Hydra 1.3 instantiates sweepers, launchers and search-path plugins only from classes in the
``hydra_plugins`` namespace (``hydra.core.plugins.Plugins._instantiate``), which it scans at start-up.
The code lives in :mod:`ablate.sweepers` and :mod:`ablate.config.store`; each module here only gives
a class its ``hydra_plugins.`` name.
"""
