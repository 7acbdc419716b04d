"""Experiment tracking: a CSV file always; Weights & Biases, TensorBoard and MLflow when selected.

The CSV logger needs no account and is what the summary tooling reads; the others are dashboards on
top, chosen with the ``logger`` config group and combinable as a list (``logger=[wandb,tensorboard]``:
each ``conf/logger/<name>.yaml`` sets only its own ``logger.<name>`` node).

One concept per module (import from the module itself; this package re-exports nothing):

- :mod:`~ablate.tracking.loggers` -- :func:`~ablate.tracking.loggers.build_loggers`, the job's
  logger list, and the TensorBoard and MLflow loggers.
- :mod:`~ablate.tracking.options` -- the ``logger.*`` config nodes as dataclasses, and the check
  that a selected logger's package is installed.
- :mod:`~ablate.tracking.wandb_mode` -- online, offline or disabled: W&B credentials and a
  bounded network probe, decided *before* ``wandb.init`` runs, because wandb left to itself
  either prompts for an API key, raises, or blocks for minutes without network.
- :mod:`~ablate.tracking.wandb_run` -- starting, summarising and finishing the job's W&B run
  (under a Hydra multirun each job must end its run with ``finish_wandb``, or the next job logs
  into the previous run), and the metric names its panels plot against.
- :mod:`~ablate.tracking.csv_logger` -- the CSV logger that appends when a job resumes.
- :mod:`~ablate.tracking.hparams` -- what each logger records as hyper-parameters.
- :mod:`~ablate.tracking.naming` -- what identifies a run in every logger
  (:class:`~ablate.tracking.naming.RunLabels`): its name (the swept keys and the seed in a sweep),
  its group (the sweep), its job type (``train``, or ``sweep`` in a multirun), its tags (the
  top-level ``tags`` list, ``experiment:<name>`` and ``<axis>:<value>`` for every ablation axis)
  and its axes as flat ``axis_<name>`` keys beside the nested resolved config.

Files of one job, for ``output_dir=OUT``:

- ``OUT/csv/metrics.csv`` (Lightning 2.6 ``CSVLogger`` with ``name="csv"`` and
  ``version=""``: its log_dir is ``OUT/csv/``) and ``OUT/csv/hparams.yaml`` (the run config, as W&B gets it).
- ``OUT/wandb/offline-run-<time>-<id>/`` (or ``run-<time>-<id>/`` online),
  holding the ``run-<id>.wandb`` transaction log that
  :mod:`ablate.tracking.wandb_reader` reads back.
- ``OUT/tensorboard/events.out.tfevents.*`` (``logger.tensorboard``) and its ``hparams.yaml``.
- MLflow (``logger.mlflow``) writes to one store shared by all jobs,
  ``logger.mlflow.tracking_uri`` (default ``file:<paths.log_dir>/mlruns``); a job's run carries
  the tag ``ablate.output_dir=OUT``, which is how a resumed job finds its run again.

The package was ``ablate/logging.py`` until it was split; the old name shadowed the standard
library's ``logging`` inside the package.
"""
