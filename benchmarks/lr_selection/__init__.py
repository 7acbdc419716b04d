"""Simulations and replays of ``tune=lr``'s learning-rate selection: :mod:`~benchmarks.lr_selection.simulate`
(``python benchmarks/lr_selection/simulate.py``) and :mod:`~benchmarks.lr_selection.halving_replay`
(``scripts/halving_replay.py``). Lab code beside the package: it imports ``ablate``, never the reverse."""
