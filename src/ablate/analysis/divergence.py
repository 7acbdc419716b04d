"""Divergence kept as an outcome: how often each side's seeds diverged (Clopper-Pearson intervals,
Boschloo's exact test: descriptive), and the row's one difference test when a seed diverged, which
ranks every seed with a diverged run worst (Lachin 1999, "worst-rank score analysis") instead of
dropping it (issue 34 item 5).
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
    """Divergence k of n per side, the rate's Clopper-Pearson interval and Boschloo's p."""

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


def divergence_test(k: int, n: int, k_baseline: int, n_baseline: int) -> Rates:
    """The variant's divergence rate with its Clopper-Pearson interval, and Boschloo's exact two-sided
    test of equal rates (more powerful than Fisher's; 3/3 against 0/3: p = 0.031); NaN p without one."""
    low = high = p = math.nan
    if n > 0:
        ci = stats.binomtest(int(k), int(n)).proportion_ci(CONFIDENCE, method="exact")
        low, high = float(ci.low), float(ci.high)
    if n > 0 and n_baseline > 0 and (k or k_baseline):
        table = [[int(k), int(n - k)], [int(k_baseline), int(n_baseline - k_baseline)]]
        p = min(1.0, float(stats.boschloo_exact(table, alternative="two-sided").pvalue))
    return Rates(int(k), int(n), low, high, int(k_baseline), int(n_baseline), p)


def rank_sum_distribution(ranks: np.ndarray, n: int) -> dict[int, int]:
    """The exact permutation distribution of the sum of ``n`` of the ``ranks`` (midranks doubled to
    integers): doubled sum -> how many of the C(len(ranks), n) subsets give it, by a dynamic programme
    over the ranks (exact and instant where enumerating 10 vs 10 seeds' 184,756 assignments is not)."""
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
    """Every seed kept, a diverged run ranked worst: ``(p, shift)``, the two-sided exact permutation p
    (twice the smaller tail) of the variant's mean rank minus the baseline's, shift > 0 towards larger
    values. With 3 seeds a side the smallest possible p is 0.1."""
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
