"""Figures of a sweep (PNG, matplotlib's Agg canvas; no display needed).

Every figure draws one colour per variant (named by its axes, ``norm=post, lr=0.001``), the same
colour in every figure, and aggregates seeds: the mean and, with several seeds, a band of ± 1
standard deviation. The figures that compare numbers also write them beside the PNG as
``<name>.csv`` (:mod:`~ablate.analysis.series`). Each ``*_figure`` function returns the
:class:`~matplotlib.figure.Figure` (None when the sweep logged nothing it could draw);
:mod:`~ablate.analysis.figures.writing` lists them with their file names and writes each one
independently, so a figure that fails is reported and the others are still written. What each
figure shows: docs/analysis.md, "Analysing a sweep". This package re-exports nothing.
"""
