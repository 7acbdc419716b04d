"""Measurements beside the package, not installed (issue 51: the lab is not the product): they
import ``ablate``, never the reverse (tests/test_layers.py), and ``scripts/benchmark*.py`` and
``scripts/sweep_overhead.py`` put the checkout's root on the path to reach them. The verdict
simulations are :mod:`benchmarks.verdicts`.

The speed benchmark measures the training speed of the configured experiment, in one process, and
checks the budgets: the library part of ``scripts/benchmark.py`` (its entry point,
:func:`benchmarks.suite.main`).

    python scripts/benchmark.py                                 # the default experiment
    python scripts/benchmark.py model.n_layers=2 data.seq_len=64 benchmark.compile=true
    python scripts/benchmark.py trainer=gpu model=gpt2_small data.seq_len=1024 benchmark.compile=true

Config: ``conf/benchmark.yaml`` (it composes ``conf/train.yaml``: same groups, same overrides).
Output: a table on the console and ``benchmark.json`` in the Hydra output directory
(``benchmark.json_path``). ``experiments/benchmarks/README.md`` explains every number.

How variants are compared. A laptop-class CPU drifts 8-22% from run to run and another busy
process makes a step several times slower, so absolute times from separate runs cannot be
compared. Every variant of a group (e.g. our Lightning loop and a hand-written loop) is a
complete training loop running in its own thread; the main thread lets exactly one of them run
at a time, ``turn_steps`` steps per turn, round-robin, until each has done the group's ``steps``
steps of the round (the order rotates every round); each loop times its own steps: batch start
to next batch start, which holds one data fetch and one whole optimiser step, and never the time
it was paused. A ratio is the median over rounds of the ratio of two variants' mean step times
in the same round, so drift between rounds cancels and a disturbed round does not move the
median.

Modules (import from them; this package re-exports nothing):

- :mod:`~benchmarks.suite` -- the run: groups, rounds, ratios, headline, ``main``.
- :mod:`~benchmarks.budgets` -- the overhead budgets checked against the measurements.
- :mod:`~benchmarks.loops` -- one variant's training loop in its thread (hand-written or
  Lightning).
- :mod:`~benchmarks.machine` -- the machine, the interference from other processes, memory.
- :mod:`~benchmarks.report` -- the console tables, the Markdown summary, the JSON form.
"""
