"""Running a job: from the composed config to a status record.

:mod:`~ablate.run.train` is the job (``train.py`` calls its ``run``); :mod:`~ablate.run.preflight`
checks a config before any data is read and :mod:`~ablate.run.control` holds its run-control keys;
the rest is what a job needs around training: checkpoints and resuming (``checkpointing``,
``resume``, ``safe_load``), its directory (``lock``, ``status``), processes (``distributed``,
``sweep_stop``, ``killed_jobs``), the console (``console``, ``cli``), what a sweeper optimises
(``objective``) and the memory check (``memory``). ``config``, ``nn``, ``tasks`` and ``tracking``
do not import ``run`` (``tests/test_layers.py``).
"""
