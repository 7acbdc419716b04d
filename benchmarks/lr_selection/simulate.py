"""How often does ``tune=lr`` call two *identical* variants different? (issue 50 item 5)

    python benchmarks/lr_selection/simulate.py                  # 20,000 sweeps per cell, about a minute
    python benchmarks/lr_selection/simulate.py --sweeps 2000    # quicker, coarser

The sweeps are simulated, the verdict is the package's. Every sweep's stage-2 numbers get the
paired t-test, vectorised (``scipy.stats.ttest_rel``), and the package's Holm adjustment
(:func:`ablate.analysis.stats.family_adjusted`); the first ``--checked`` sweeps of every cell also
go through the whole path of ``summarize.py --baseline`` for one compared row
(:func:`ablate.analysis.engine.analyse`, ``family_adjusted``, :func:`ablate.analysis.stats.verdict`),
and the run stops if that verdict is not the one counted. So the count is the package's verdict,
computed faster (the engine spends about 5 ms a sweep, mostly on its MDE's power solve).

The model. Both arms have the same true final loss ``c * (x - u)**2`` in ``x = log2(lr)`` measured
in grid steps (the default grid: ``hydra.sweeper.num_lrs=5`` rates ``lr_factor=2`` apart, centred
on the configured rate), with the optimum ``u`` uniform within one step of the centre, so ``c`` is
the loss a one-step miss costs, in units of a run's noise: each run's final loss adds ``N(0, 1)``,
its seed's and its read split's noise together (a part shared by both arms on the same seed cancels
in the paired difference and in the ranking of one seed's rates, so it is left out; the selection
reads validation, the verdict test, each one run's noise). The selection is
:func:`ablate.sweepers.lr_selection.select_lr`'s rule (lowest final validation loss). Procedures:

* ``shared`` (``hydra.sweeper.selection=shared``, the rule before issue 50): one stage-1 grid per arm
  on the selection seed, every verdict seed trained at that arm's one chosen rate;
* ``several``: the same, the grid averaged over as many selection seeds as verdict seeds;
* ``nested`` (``hydra.sweeper.selection=nested``, the default): every verdict seed's rate chosen by a
  grid of its own on its own selection seed, so that the selection's noise is in the between-seed
  variance the paired interval estimates.

A ``better`` or ``worse`` is false: the arms are the same. Prints the false rate per curvature
``c`` and verdict-seed count, with its Monte-Carlo standard error.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import numpy as np
from scipy import stats as scipy_stats

from ablate.analysis import engine, stats

GRID = np.arange(5) - 2.0  # the default grid in steps of log2(lr): 5 rates a factor 2 apart
PROCEDURES = ("shared", "several", "nested")
METRIC = "test/loss"


def chosen(rng: np.random.Generator, c: float, u: np.ndarray, k: int) -> np.ndarray:
    """The grid index of the rate chosen for each of ``u``'s optima (any shape): the lowest mean
    validation loss over ``k`` selection seeds (ties: the first, the smaller rate, as ``select_lr``)."""
    values = c * (GRID - u[..., None]) ** 2 + rng.normal(0, 1, (*u.shape, k, GRID.size)).mean(-2)
    return GRID[values.argmin(-1)]


def stage2(rng: np.random.Generator, procedure: str, c: float, seeds: int, sweeps: int) -> np.ndarray:
    """Each sweep's stage-2 test losses, (sweeps, 2 arms, seeds), under ``procedure``."""
    u = rng.uniform(-1, 1, (sweeps, 1, 1))  # the optimum, the same for both arms
    if procedure == "nested":  # a grid per verdict seed and arm
        rate = chosen(rng, c, np.broadcast_to(u, (sweeps, 2, seeds)), 1)
    else:  # one rate per arm, for every verdict seed
        k = seeds if procedure == "several" else 1
        rate = chosen(rng, c, np.broadcast_to(u, (sweeps, 2, 1)), k)
    return c * (rate - u) ** 2 + rng.normal(0, 1, (sweeps, 2, seeds))


def verdict(values: np.ndarray) -> str:
    """The package's verdict for arm 1 against arm 0 (the baseline), one seed per column, paired by
    seed, no margin (the fixed design's difference test), one row in its Holm family."""
    seeds = list(range(1, values.shape[-1] + 1))

    def arm(row: np.ndarray) -> list[engine.Outcome]:
        return [engine.Outcome(s, "completed", float(x)) for s, x in zip(seeds, row)]

    c = engine.analyse(arm(values[1]), arm(values[0]), METRIC, False, None, per_window=False).comparison
    p, p_tost = stats.family_adjusted([c.p], [c.p_tost])
    return stats.verdict(c, float(p[0]), False, p_tost_adjusted=float(p_tost[0]))


def false_rate(
    procedure: str, c: float, seeds: int, sweeps: int, rng: np.random.Generator, checked: int = 200
) -> float:
    """The share of ``sweeps`` simulated sweeps of identical arms whose verdict is ``better`` or
    ``worse``, the first ``checked`` of them confirmed by :func:`verdict` (AssertionError if it differs)."""
    data = stage2(rng, procedure, c, seeds, sweeps)
    p = scipy_stats.ttest_rel(data[:, 1], data[:, 0], axis=-1).pvalue
    p_adjusted, _ = stats.family_adjusted(p[:, None], np.full((sweeps, 1), np.nan))
    called = p_adjusted[:, 0] < stats.ALPHA
    for values, counted in zip(data[:checked], called[:checked]):
        words = verdict(values)
        assert (words.split(" (")[0] in (stats.BETTER, stats.WORSE)) == counted, (words, values)
    return float(called.mean())


def table(
    sweeps: int,
    curvatures: Sequence[float],
    seed_counts: Sequence[int],
    procedures: Sequence[str] = PROCEDURES,
    seed: int = 0,
    checked: int = 200,
) -> str:
    """The false better/worse rate of each procedure per curvature and verdict-seed count, as markdown."""
    rng = np.random.default_rng(seed)
    se = math.sqrt(0.05 * 0.95 / sweeps)
    head = "| procedure | verdict seeds | " + " | ".join(f"c={c:g}" for c in curvatures) + " | worst |"
    rows = [head, "|" + " --- |" * (len(curvatures) + 3)]
    for procedure in procedures:
        for n in seed_counts:
            rates = [false_rate(procedure, c, n, sweeps, rng, checked) for c in curvatures]
            rows.append(f"| {procedure} | {n} | " + " | ".join(f"{r:.1%}" for r in rates) + f" | {max(rates):.1%} |")
    return "\n".join(rows) + (
        f"\n\n{sweeps} sweeps per cell, the first {min(checked, sweeps)} through the whole verdict path "
        f"(Monte-Carlo SE at 5%: {se:.2%}); c: the loss of a one-step miss, in units of a run's noise SD"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweeps", type=int, default=20_000, help="simulated sweeps per cell (default 20000)")
    parser.add_argument("--checked", type=int, default=200, help="of them, judged by the whole verdict path (200)")
    parser.add_argument("--curvatures", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[5, 10], help="verdict seeds (default 5 10)")
    parser.add_argument("--procedures", nargs="+", choices=PROCEDURES, default=list(PROCEDURES))
    parser.add_argument("--rng-seed", type=int, default=0, help="the simulation's random seed (default 0)")
    args = parser.parse_args(argv)
    print(table(args.sweeps, args.curvatures, args.seeds, args.procedures, args.rng_seed, args.checked))


if __name__ == "__main__":
    main()
