"""Does each verdict keep its promise? Simulations of the verdict engine (:mod:`ablate.analysis.engine`)
on sweeps whose truth is known: :mod:`~benchmarks.verdicts.calibration` (the simulations) and
:mod:`~benchmarks.verdicts.simulate` (``python -m benchmarks.verdicts.simulate``: their tables, in
``benchmarks/verdicts/README.md``). Lab code beside the package: it imports ``ablate``, never the reverse."""
