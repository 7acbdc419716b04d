"""Figures of a sweep (PNG, matplotlib's Agg canvas; no display needed).

Every figure draws one colour per variant (named by its axes, ``norm=post, lr=0.001``), the same
colour in every figure, and aggregates seeds: a line for the mean and, with several seeds, a
band of ± 1 standard deviation. What each figure shows:

* ``val_curves.png``: validation metrics against the optimiser step (or training tokens or
  time: ``x``, :func:`~ablate.analysis.series.job_x`);
* ``lr_loss_warmup.png``: learning rate and training loss against the step, the warmup shaded
  (Post-LN needs the warmup, Xiong et al. 2020, Sec. 3). The learning rate is drawn at every
  step, recomputed from each job's ``optim`` config (:func:`~ablate.analysis.series.lr_schedule`),
  with the logged ``train/lr`` (every ``trainer.log_every_n_steps``) as dots on the line;
* ``grad_norm_depth.png``: per-layer gradient norm (all the layer's parameters, before clipping)
  against depth, at the first logged step (initialisation) and at the last one; Xiong et al.
  2020, Fig. 3, show it growing towards the output for Post-LN and flat for Pre-LN;
* ``grad_norm_heatmap.png``: the same per layer over training, one panel per variant, one colour
  scale for all panels; columns evenly spaced (:func:`~ablate.analysis.figures.depth.uniform_steps`: the logging interval that
  covers most of the run, so the every-step logging of the warmup is thinned to it);
* ``resid_rms_depth.png``: the residual stream's RMS against depth (when ``resid_rms/...`` was
  logged);
* ``ppl_vs_length.png``: test perplexity against the evaluation length, the training length
  marked (when ``eval.seq_lens`` logged ``test/ppl@<len>``; Press et al. 2022, Fig. 1);
* ``metric_vs_<axis>.png`` and ``train_loss_by_<axis>.png``, for each numeric axis
  (``model.n_layers``, ``optim.lr``): the final metric against the axis, one line per value of
  the other axes, diverged and stuck jobs marked (log x when the values span 10x or more); and the
  training loss, one panel per axis value;
* ``loss_vs_lr.png`` (when ``optim.lr`` is a numeric axis): the learning-rate tuning curve, final
  ``val/loss`` against the learning rate (log x), one line per value of the other axes, mean ± 1
  std over seeds, diverged points marked and each line's best rate starred;
* ``paper_vs_ours.png`` (with a paper file): our metric per variant beside the paper's, in the
  paper's order, with Spearman's rank correlation;
* ``compute_multiplier.png`` (``scripts/compute_multiplier.py``): final loss against training
  compute per variant with its power-law fit and asymptote, and each variant's effective compute
  multiplier over the baseline drawn as the horizontal step to the baseline's curve.

``ppl_vs_length``, ``metric_vs_<axis>``, ``loss_vs_lr`` and ``paper_vs_ours`` also write the
numbers they draw (:mod:`~ablate.analysis.series`) beside the PNG as ``<name>.csv``.

Each ``*_figure`` function returns the :class:`~matplotlib.figure.Figure` (None when the sweep
logged nothing it could draw); :func:`~ablate.analysis.figures.writing.plot_sweep` lists them with
their file names (:func:`~ablate.analysis.figures.writing.sweep_plots`) and writes each one
independently (:func:`~ablate.analysis.figures.writing.write_plots`): a figure that fails is
reported with its reason and the others are still written.

Translation runs log ``grad_norm/enc_layer_XX/...`` and ``grad_norm/dec_layer_XX/...``: each
stack gets its own row of panels.

Modules (import from them; this package re-exports nothing):

- :mod:`~ablate.analysis.figures.common` -- variants and colours, the mean over seeds, labels, the
  PNG writer;
- :mod:`~ablate.analysis.figures.curves` -- ``val_curves``, ``lr_loss_warmup``, ``train_loss_by_<axis>``;
- :mod:`~ablate.analysis.figures.depth` -- ``grad_norm_depth``, ``grad_norm_heatmap``, ``resid_rms_depth``;
- :mod:`~ablate.analysis.figures.comparisons` -- ``ppl_vs_length``, ``metric_vs_<axis>``,
  ``loss_vs_lr``, ``paper_vs_ours``, ``compute_multiplier``;
- :mod:`~ablate.analysis.figures.writing` -- the list of a sweep's figures and writing them.
"""
