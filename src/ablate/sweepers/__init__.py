"""Hydra sweepers of this project.

Hydra 1.3 instantiates a sweeper only from a class in the ``hydra_plugins`` namespace
(``hydra.core.plugins.Plugins._instantiate``), so each sweeper here has a one-line subclass under
``src/hydra_plugins/ablate_sweepers/`` that ``conf/hydra/sweeper/*.yaml`` names as ``_target_``;
the code and the tests live here.

* :mod:`ablate.sweepers.validating` -- the default (``hydra/sweeper=validating``): Hydra's basic
  grid sweeper that checks every job's config before the first job starts.
* :mod:`ablate.sweepers.tuned_lr` -- ``tune=lr`` (``hydra/sweeper=tuned_lr``): each variant at its
  own tuned learning rate, in one command. Its grid and selection rule are in
  :mod:`ablate.sweepers.lr_selection`; its successive-halving stage 1
  (``hydra.sweeper.halving.rungs``) in :mod:`ablate.sweepers.halving`, and the replay of it on a
  finished grid in :mod:`ablate.sweepers.halving_replay`; its stage 2 (the declared plan, the
  fixed verdict seeds) in :mod:`ablate.sweepers.tuning_stage2`; its tables and ``lr_tuning.json``
  record in :mod:`ablate.sweepers.tuning_report`.

And the end of every sweep: :mod:`ablate.sweepers.sweep_report` (the table of this command's jobs,
the exit code), :mod:`ablate.sweepers.killed_jobs` (a worker process the system killed) and
:mod:`ablate.sweepers.sweep_stop` (Ctrl-C in a sweep whose jobs run in worker processes).
"""
