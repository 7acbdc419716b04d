"""Experiment tracking: a CSV file always (``OUT/csv/metrics.csv``, what the summary tooling reads);
Weights & Biases, TensorBoard and MLflow dashboards on top, chosen with the ``logger`` config group
and combinable as a list (``logger=[wandb,tensorboard]``). This package re-exports nothing; it was
``ablate/logging.py`` until the old name shadowed the standard library's ``logging``.
"""
