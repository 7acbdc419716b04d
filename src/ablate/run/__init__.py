"""One training job, from the typed config to a status record.

:mod:`~ablate.run.train` is the job (``train.py`` calls its ``run``: check -> decide -> build -> fit
-> record): :mod:`~ablate.run.plan` says what the job will do (what Hydra knows of it, the checks
before any data is read, with :mod:`~ablate.run.memory` and :mod:`~ablate.run.distributed`'s batch
layout, and skip, resume or overwrite), :mod:`~ablate.run.assembly` builds it (data, task,
callbacks, loggers, Trainer) and :mod:`~ablate.run.record` records how it ended in its run record,
:mod:`~ablate.run.status` (``status.json``, ``csv/metrics.csv``, what a sweeper optimises). Only the
sweepers, the benchmark and the export import ``run``, and ``run`` imports no analysis: the two
meet at the files a job leaves (``tests/test_layers.py``).
"""
