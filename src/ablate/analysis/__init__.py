"""Turning a sweep (a Hydra multirun directory or a W&B group) into tables and figures.

* :mod:`~ablate.analysis.job`: one job read from its directory (status, overrides, config, metrics);
* :mod:`~ablate.analysis.runs`: load a sweep's jobs and find the ablation axes, i.e. the
  overrides that vary across the sweep; the jobs at a ``tune=lr`` sweep's tuned rates;
* :mod:`~ablate.analysis.wandb_group`: the same jobs read from a W&B group through ``wandb.Api``;
* :mod:`~ablate.analysis.paper`: the ``paper.yaml`` format for a paper's reported numbers;
* :mod:`~ablate.analysis.tables`: the per-configuration summary table (mean ± std over seeds);
* :mod:`~ablate.analysis.comparison`: each row's statistics against a baseline row;
* :mod:`~ablate.analysis.specs`: the ``--baseline`` / ``--where`` specs (``axis=value,...``);
* :mod:`~ablate.analysis.interaction`: the 2 x 2 interaction contrast of two axes (``--interaction``);
* :mod:`~ablate.analysis.series`: the numbers behind the comparison figures (perplexity against
  evaluation length, a metric against a numeric axis, ours against a paper, Spearman's rho);
* :mod:`~ablate.analysis.figures`: validation curves, gradient norms and residual RMS by depth,
  and the comparison figures;
* :mod:`~ablate.analysis.attention`: attention weights of a trained model, and their heat maps.

``scripts/summarize.py``, ``scripts/plot.py`` and ``scripts/attention_maps.py`` are thin
command-line wrappers around these modules.
"""
