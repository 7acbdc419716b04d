"""One training job, from the typed config to a status record.

:mod:`~ablate.run.train` is the job (check -> decide -> build -> fit -> record): :mod:`~ablate.run.plan`
says what it will do, :mod:`~ablate.run.assembly` builds it and :mod:`~ablate.run.record` records
how it ended (:mod:`~ablate.run.status`). ``run`` imports no analysis: the two meet at the files a
job leaves (``tests/test_layers.py``).
"""
