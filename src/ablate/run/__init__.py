"""One training job, from the composed config to a status record.

:mod:`~ablate.run.train` is the job (``train.py`` calls its ``run``: check -> decide -> build -> fit
-> record). Around it: :mod:`~ablate.run.job` (what Hydra knows of the job) and
:mod:`~ablate.run.control` (its run-control keys), :mod:`~ablate.run.preflight` (every check before
any data is read, with :mod:`~ablate.run.memory` and :mod:`~ablate.run.distributed`'s batch
layout), :mod:`~ablate.run.lifecycle` (skip, resume, overwrite, interrupt: what the job does with
its directory, and the record it leaves), :mod:`~ablate.run.assembly` (data, task, callbacks,
loggers, Trainer), :mod:`~ablate.run.status` (``status.json``), :mod:`~ablate.run.lock` (one process
per run directory) and :mod:`~ablate.run.objective` (what a sweeper optimises, read back from the
run record by :mod:`~ablate.run.record`). Only the sweepers, the benchmark and the export import
``run``, and ``run`` imports no analysis: the two meet at the files a job leaves
(``tests/test_layers.py``).
"""
