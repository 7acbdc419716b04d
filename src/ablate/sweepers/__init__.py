"""Hydra sweepers of this project; each has a one-line subclass under ``src/hydra_plugins/ablate_sweepers/``
(Hydra 1.3 instantiates plugins only from that namespace), the ``_target_`` of ``conf/hydra/sweeper/*.yaml``."""
