"""Divergence kept as an outcome: how often each side's seeds diverged, and a difference test
that keeps the diverged seeds instead of dropping them.

* :func:`divergence_test`: the divergence rates of variant and baseline, each with its
  Clopper-Pearson interval, compared by Boschloo's exact test (two-sided; an unconditional exact
  test, uniformly more powerful than Fisher's; ``scipy.stats.boschloo_exact``): descriptive;
* :func:`worst_rank_test`: when a seed diverged, the row's one difference test ranks every seed,
  a diverged run worst (Lachin 1999, "worst-rank score analysis"), and compares the ranks with an
  exact permutation test: no seed is dropped before the comparison, and the row has one test in
  the one Holm family (issue 34 item 5).

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

    @property
    def baseline_rate(self) -> float:
        return self.k_baseline / self.n_baseline if self.n_baseline else math.nan


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
    permutation distribution over the seeds' assignment to the two sides
    (``scipy.stats.permutation_test``; Monte Carlo with 20,000 draws, fixed seed, beyond 20,000
    assignments). Returns ``(p, shift)``, shift > 0 when the variant ranks towards larger values.
    With 3 seeds a side the smallest possible p is 0.1: three seeds cannot show much."""
    worst = -math.inf if higher_is_better else math.inf
    v = np.array([*finite(variant), *[worst] * variant_diverged])
    b = np.array([*finite(baseline), *[worst] * baseline_diverged])
    if len(v) < 2 or len(b) < 2:
        return math.nan, math.nan

    def shift(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        ranks = stats.rankdata(np.concatenate([x, y], axis=axis), axis=axis)
        n = x.shape[axis]
        return ranks[..., :n].mean(axis=-1) - ranks[..., n:].mean(axis=-1)

    observed = float(shift(v, b))
    if np.all(np.concatenate([v, b]) == v[0]):
        return math.nan, 0.0
    exact = math.comb(len(v) + len(b), len(v)) <= 20_000
    result = stats.permutation_test(
        (v, b),
        shift,
        permutation_type="independent",
        vectorized=True,
        n_resamples=math.inf if exact else 20_000,
        alternative="two-sided",
        random_state=0,
    )
    return min(1.0, float(result.pvalue)), observed
