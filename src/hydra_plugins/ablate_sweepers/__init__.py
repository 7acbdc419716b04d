"""Hydra plugins of the ablate package.

Hydra 1.3 instantiates sweepers and launchers only from classes in the ``hydra_plugins`` namespace
(``hydra.core.plugins.Plugins._instantiate``), which it scans at start-up. The code lives in
:mod:`ablate.sweepers`; each module here only gives a class its ``hydra_plugins.`` name. Hydra
imports this package when it scans, before it composes: the import registers the architecture
groups and the run config's schemas in its ConfigStore (:mod:`ablate.config.store`,
:mod:`ablate.run.config`).
"""

# the imports register: the architecture groups (ablate.config.store), schema/optim (ablate.run.config)
import ablate.config.store
import ablate.run.config  # noqa: F401
