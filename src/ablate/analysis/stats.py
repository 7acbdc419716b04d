"""Seed statistics for comparing a variant with a baseline: is the difference real, and how large
a difference could the sweep have seen?

* :func:`interval`: mean, sample std, n and the Student t confidence interval of the mean
  (``scipy.stats.t``);
* :func:`compare`: the difference variant - baseline with its confidence interval and two-sided
  p-value: a **paired** t-test on the seeds both share when they share at least two (same seed =
  same data order and initialisation, so pairing removes that part of the seed noise;
  ``scipy.stats.ttest_rel``), else **Welch's** t-test, which does not assume equal variances
  (Welch 1947; ``scipy.stats.ttest_ind(equal_var=False)``);
* :func:`holm`: Holm's step-down correction of the p-values of all comparisons against the
  baseline, which keeps the family-wise error rate at alpha (Holm 1979);
* :func:`mde`: the minimum detectable effect: the smallest true difference that the same test,
  with the same standard error and degrees of freedom, detects with probability ``power``
  (default 80%) at level alpha (two-sided; power from the noncentral t, ``scipy.stats.nct``;
  Cohen 1988, ch. 2). Computed at the unadjusted alpha: with Holm over m comparisons the
  threshold is alpha/m .. alpha, so the MDE of a corrected comparison is somewhat larger;
* :func:`verdict`: better / worse / no detectable difference from the Holm-adjusted p-value
  and the metric's direction, where divergence counts as failure (see :func:`verdict`).

The functions take plain values (one per seed); :mod:`~ablate.analysis.tables` applies them to a
sweep's final metric.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize, stats

ALPHA = 0.05
CONFIDENCE = 0.95
POWER = 0.8

BETTER, WORSE, SAME = "better", "worse", "no detectable difference"


@dataclass(frozen=True)
class Interval:
    """Mean, sample std (n - 1), n and the ``confidence`` t interval of the mean (NaN for n < 2)."""

    mean: float
    std: float
    n: int
    low: float
    high: float


def finite(values: Sequence[float]) -> np.ndarray:
    return np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Interval:
    """Student t interval of the mean: mean ± t_{(1+c)/2, n-1} s / sqrt(n) (non-finite values left out)."""
    x = finite(values)
    n = len(x)
    if n == 0:
        return Interval(math.nan, math.nan, 0, math.nan, math.nan)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, 1, math.nan, math.nan)
    std = float(x.std(ddof=1))
    low, high = stats.t.interval(confidence, n - 1, loc=mean, scale=std / math.sqrt(n)) if std > 0 else (mean, mean)
    return Interval(mean, std, n, float(low), float(high))


@dataclass(frozen=True)
class Comparison:
    """Variant - baseline: the difference of the means (paired: the mean of the per-seed
    differences), its confidence interval, the two-sided p-value (unadjusted), the test used
    (``paired``, ``welch``, or ``""`` when there was none), its standard error and degrees of
    freedom, the minimum detectable effect, and how many values entered it."""

    diff: float
    low: float
    high: float
    p: float
    test: str
    se: float
    df: float
    mde: float
    n_variant: int
    n_baseline: int
    n_pairs: int = 0

    @property
    def tested(self) -> bool:
        return self.test != "" and math.isfinite(self.p)


def shared_seeds(variant_seeds: Sequence[int | None], baseline_seeds: Sequence[int | None]) -> list[int]:
    """Seeds that occur exactly once on each side (the pairs of a paired test), in order."""
    once = [s for s in variant_seeds if s is not None and list(variant_seeds).count(s) == 1]
    return [s for s in once if list(baseline_seeds).count(s) == 1]


def compare(variant: Sequence[float], baseline: Sequence[float], variant_seeds: Sequence[int | None] | None = None,
            baseline_seeds: Sequence[int | None] | None = None, confidence: float = CONFIDENCE,
            power: float = POWER) -> Comparison:
    """Paired t-test on the shared seeds when there are at least two, else Welch's t-test on all
    values (non-finite values, e.g. of a diverged seed, are left out before pairing). Untested
    (``test=""``, NaN p) when a side has fewer than two values or the seeds show no spread."""
    pairs = _finite_pairs(variant, baseline, variant_seeds, baseline_seeds)
    if len(pairs) >= 2:
        v, b = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
        se = float(np.std(v - b, ddof=1) / math.sqrt(len(v)))
        return _test("paired", v, b, se, confidence, power, n_pairs=len(v))
    v, b = finite(variant), finite(baseline)
    if len(v) < 2 or len(b) < 2:
        diff = float(v.mean() - b.mean()) if len(v) and len(b) else math.nan
        return Comparison(diff, math.nan, math.nan, math.nan, "", math.nan, math.nan, math.nan, len(v), len(b))
    se = math.sqrt(v.var(ddof=1) / len(v) + b.var(ddof=1) / len(b))
    return _test("welch", v, b, se, confidence, power)


def t_test(variant: np.ndarray, baseline: np.ndarray, paired: bool):
    """scipy's paired (``ttest_rel``) or Welch (``ttest_ind(equal_var=False)``) t-test of
    variant - baseline along the last axis (vectorised over the others); its result has
    ``pvalue``, ``df`` and ``confidence_interval(level)``."""
    if paired:
        return stats.ttest_rel(variant, baseline, axis=-1)
    return stats.ttest_ind(variant, baseline, equal_var=False, axis=-1)


def _finite_pairs(variant, baseline, variant_seeds, baseline_seeds) -> list[tuple[float, float]]:
    if variant_seeds is None or baseline_seeds is None:
        return []
    v = {s: x for s, x in zip(variant_seeds, variant) if s is not None and x is not None and math.isfinite(x)}
    b = {s: x for s, x in zip(baseline_seeds, baseline) if s is not None and x is not None and math.isfinite(x)}
    seeds = shared_seeds([s for s in variant_seeds if s in v], [s for s in baseline_seeds if s in b])
    return [(v[s], b[s]) for s in seeds]


def _test(name: str, v: np.ndarray, b: np.ndarray, se: float, confidence: float, power: float,
          n_pairs: int = 0) -> Comparison:
    diff = float(v.mean() - b.mean())
    if not se > 1e-12 * max(np.abs(v).max(), np.abs(b).max()):  # no spread beyond rounding: t is undefined
        return Comparison(diff, math.nan, math.nan, math.nan, "", 0.0, math.nan, math.nan, len(v), len(b), n_pairs)
    result = t_test(v, b, paired=name == "paired")
    ci = result.confidence_interval(confidence)
    df = float(result.df)
    return Comparison(diff, float(ci.low), float(ci.high), float(result.pvalue), name, se, df,
                      mde(se, df, 1 - confidence, power), len(v), len(b), n_pairs)


def power_t(effect_se: float, df: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided t-test at level ``alpha`` when the true difference is
    ``effect_se`` standard errors: P(|T| > t_{1-alpha/2}) for T ~ noncentral t(df, effect_se)."""
    crit = stats.t.ppf(1 - alpha / 2, df)
    # P(T < -crit) as P(T' > crit) with T' ~ nct(df, -effect): scipy's nct.cdf far in the lower tail is NaN
    return float(stats.nct.sf(crit, df, effect_se) + stats.nct.sf(crit, df, -effect_se))


def mde(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable effect (in the metric's units): ``se`` times the noncentrality at which
    :func:`power_t` reaches ``power``."""
    if not (se > 0 and df > 0):
        return math.nan
    high = 4.0
    while power_t(high, df, alpha) < power:  # bracket the root
        high *= 2
    effect = optimize.brentq(lambda d: power_t(d, df, alpha) - power, 0.0, high, xtol=1e-10)
    return float(effect * se)


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979): with the m finite p-values sorted
    ascending, p_adj(i) = max_{j <= i} min(1, (m - j + 1) p(j)). NaN entries (untested
    comparisons) stay NaN and do not count in m. Along the last axis (one family per row)."""
    p = np.asarray(p_values, dtype=float)
    tested = np.isfinite(p)
    m = tested.sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(tested, p, np.inf), axis=-1, kind="stable")  # untested last
    rank = np.arange(p.shape[-1])
    scaled = np.minimum(1.0, (m - rank) * np.take_along_axis(p, order, axis=-1))
    adjusted = np.empty_like(p)
    np.put_along_axis(adjusted, order, np.fmax.accumulate(scaled, axis=-1), axis=-1)  # fmax: NaNs (last) ignored
    return np.where(tested, adjusted, np.nan)


def direction(diff: float, higher_is_better: bool) -> str:
    """``better`` when the difference goes the metric's good way, else ``worse``."""
    return BETTER if (diff > 0) == higher_is_better else WORSE


def verdict(comparison: Comparison, p_adjusted: float, higher_is_better: bool, diverged: int = 0, seeds: int = 0,
            baseline_diverged: int = 0, baseline_seeds: int = 0, alpha: float = ALPHA) -> str:
    """The verdict against the baseline.

    Divergence is a failure, not a missing value: a variant that diverged on a larger fraction of
    its seeds than the baseline is ``worse (diverged k/n)`` whatever its surviving seeds scored
    (those still get their difference and p-value in the other columns); otherwise the t-test
    decides (``better``/``worse`` when the Holm-adjusted p < alpha, else ``no detectable
    difference``), with ``(diverged k/n)`` appended when some seed diverged. Too few values
    for a test: ``not tested (...)``.
    """
    note = f" (diverged {diverged}/{seeds})" if diverged else ""
    if diverged and diverged / max(seeds, 1) > baseline_diverged / max(baseline_seeds, 1):
        return WORSE + note
    if not comparison.tested:
        why = "no seed spread" if comparison.se == 0 else "n < 2"
        return f"not tested ({why})" + note
    if p_adjusted < alpha:
        return direction(comparison.diff, higher_is_better) + note
    return SAME + note
