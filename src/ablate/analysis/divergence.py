"""Divergence kept as an outcome: how often each side's seeds diverged, and a difference test
that keeps the diverged seeds instead of dropping them.

* :func:`divergence_test`: the divergence rates of variant and baseline, each with its
  Clopper-Pearson interval, compared by Boschloo's exact test (two-sided; an unconditional exact
  test, uniformly more powerful than Fisher's; ``scipy.stats.boschloo_exact``): descriptive;
* :func:`worst_rank_test`: when a seed diverged, the row's one difference test ranks every seed,
  a diverged run worst (Lachin 1999, "worst-rank score analysis"), and compares the ranks with an
  exact permutation test (:func:`rank_sum_distribution`): no seed is dropped before the
  comparison, and the row has one test in the one family (issue 34 item 5).

The seed-level tests, Holm and the verdict are in :mod:`~ablate.analysis.stats`;
:mod:`~ablate.analysis.tables` applies these to a sweep's diverged jobs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.analysis.stats import CONFIDENCE, finite


@dataclass(frozen=True)
class Rates:
    """Divergence of variant and baseline: k of n seeds each, each rate's Clopper-Pearson interval,
    and the two-sided p-value of Boschloo's exact test of equal rates (NaN when neither diverged)."""

    k: int
    n: int
    low: float
    high: float
    k_baseline: int
    n_baseline: int
    p: float

    @property
    def rate(self) -> float:
        return self.k / self.n if self.n else math.nan


def rate_interval(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Clopper-Pearson (exact) interval of a rate k/n (``scipy.stats.binomtest``); NaN for n = 0."""
    if n <= 0:
        return math.nan, math.nan
    ci = stats.binomtest(int(k), int(n)).proportion_ci(confidence, method="exact")
    return float(ci.low), float(ci.high)


def divergence_test(k: int, n: int, k_baseline: int, n_baseline: int, confidence: float = CONFIDENCE) -> Rates:
    """k of n variant seeds diverged, ``k_baseline`` of ``n_baseline`` baseline seeds: the variant's
    rate with its Clopper-Pearson interval, and Boschloo's exact two-sided test of equal rates
    (``scipy.stats.boschloo_exact``; 1/3 against 0/3 gives p = 0.55, 3/3 against 0/3 p = 0.031).
    Untested (NaN p) when neither side diverged or a side has no seeds."""
    low, high = rate_interval(k, n, confidence)
    p = math.nan
    if n > 0 and n_baseline > 0 and (k or k_baseline):
        table = [[int(k), int(n - k)], [int(k_baseline), int(n_baseline - k_baseline)]]
        p = min(1.0, float(stats.boschloo_exact(table, alternative="two-sided").pvalue))
    return Rates(int(k), int(n), low, high, int(k_baseline), int(n_baseline), p)


def rank_sum_distribution(ranks: np.ndarray, n: int) -> dict[int, int]:
    """The exact permutation distribution of the sum of ``n`` of the ``ranks`` (midranks allowed:
    they are doubled to integers): doubled sum -> how many of the C(len(ranks), n) subsets give
    it. A dynamic programme over the ranks (subsets by size and sum), so every sample size is
    exact and instant, where enumerating the assignments is not (10 vs 10 seeds: 184,756)."""
    doubled = np.rint(2 * np.asarray(ranks, dtype=float)).astype(int)
    table: list[dict[int, int]] = [{0: 1}] + [{} for _ in range(n)]
    for r in doubled:
        for size in range(min(n, len(table) - 1), 0, -1):
            below = table[size - 1]
            row = table[size]
            for total, count in below.items():
                row[total + r] = row.get(total + r, 0) + count
    return table[n]


def worst_rank_test(
    variant: Sequence[float | None],
    baseline: Sequence[float | None],
    variant_diverged: int,
    baseline_diverged: int,
    higher_is_better: bool,
) -> tuple[float, float]:
    """Every seed kept: each side's completed values plus its diverged runs, ranked together with
    a diverged run worst (below every value; Lachin 1999), the statistic the variant's mean rank
    minus the baseline's (ties share their average rank), its two-sided p-value from the exact
    permutation distribution over the seeds' assignment to the two sides (twice the smaller tail,
    as ``scipy.stats.permutation_test``; :func:`rank_sum_distribution`, exact at every size).
    Returns ``(p, shift)``, shift > 0 when the variant ranks towards larger values. With 3 seeds a
    side the smallest possible p is 0.1: three seeds cannot show much."""
    worst = -math.inf if higher_is_better else math.inf
    v = np.array([*finite(variant), *[worst] * variant_diverged])
    b = np.array([*finite(baseline), *[worst] * baseline_diverged])
    if len(v) < 2 or len(b) < 2:
        return math.nan, math.nan
    pooled = np.concatenate([v, b])
    ranks = stats.rankdata(pooled)
    n = len(v)
    observed = float(ranks[:n].mean() - ranks[n:].mean())
    if np.all(pooled == pooled[0]):
        return math.nan, 0.0
    counts = rank_sum_distribution(ranks, n)
    total = sum(counts.values())
    mine = int(np.rint(2 * ranks[:n].sum()))
    lower = sum(c for s, c in counts.items() if s <= mine) / total
    upper = sum(c for s, c in counts.items() if s >= mine) / total
    return min(1.0, 2 * min(lower, upper)), observed
