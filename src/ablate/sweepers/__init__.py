"""Hydra sweepers of this project.

Hydra 1.3 instantiates a sweeper only from a class in the ``hydra_plugins`` namespace
(``hydra.core.plugins.Plugins._instantiate``), so each sweeper here has a one-line subclass under
``src/hydra_plugins/ablate_sweepers/`` that ``conf/hydra/sweeper/*.yaml`` names as ``_target_``;
the code and the tests live here.
"""
