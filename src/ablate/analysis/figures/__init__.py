"""Figures of a sweep (PNG, matplotlib's Agg canvas): one colour per variant in every figure, seeds
aggregated (mean and band); :mod:`~ablate.analysis.figures.writing` writes each one independently.
What each shows: docs/analysis.md, "Analysing a sweep".
"""
