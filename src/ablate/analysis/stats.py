"""Seed statistics for comparing a variant with a baseline: is the difference real, is it too
small to matter, and how large a difference could the sweep have seen?

Paired t-test on shared seeds (same seed = same data order and initialisation), else Welch's
(Welch 1947); TOST equivalence within a margin δ (Schuirmann 1987); Holm's step-down correction
(Holm 1979) with Shaffer's (1986) logical constraint over a write-up's difference *and*
equivalence tests; the minimum detectable effect from the noncentral t (Cohen 1988, ch. 2), a
*design* quantity that plans the next sweep and says nothing about this one's true effect (the
post-hoc power fallacy, Hoenig & Heisey 2001; only TOST bounds it). The functions take plain
values, one per seed.
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

BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = "better", "worse", "equivalent", "inconclusive"
NOT_EQUIVALENT = "equivalence not shown"  # a margin was asked and neither test passed: never "rejected"
NOT_TRAINED = "not trained"  # most seeds of an arm never left the starting plateau: no verdict (issue 50)


def not_trained(stalled: int, completed: int, baseline_stalled: int = 0, baseline_completed: int = 0) -> str:
    """``not trained (stalled k/n)`` when most completed seeds of the variant (or the baseline) stalled,
    else ``""``: a majority, not any, says the recipe does not train the arm, and a difference
    between plateaus measures the recipe, not the component."""
    if completed and 2 * stalled > completed:
        return f"{NOT_TRAINED} (stalled {stalled}/{completed})"
    if baseline_completed and 2 * baseline_stalled > baseline_completed:
        return f"{NOT_TRAINED} (baseline stalled {baseline_stalled}/{baseline_completed})"
    return ""


@dataclass(frozen=True)
class Interval:
    """Mean, sample std (n - 1), n and the ``confidence`` t interval of the mean (NaN for n < 2)."""

    mean: float
    std: float
    n: int
    low: float
    high: float


def finite(values: Sequence[float | None]) -> np.ndarray:
    return np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)


def interval(values: Sequence[float]) -> Interval:
    """Student t interval of the mean: mean ± t_{(1+c)/2, n-1} s / sqrt(n) (non-finite values left out)."""
    x = finite(values)
    n = len(x)
    if n == 0:
        return Interval(math.nan, math.nan, 0, math.nan, math.nan)
    mean = float(x.mean())
    if n < 2:
        return Interval(mean, math.nan, 1, math.nan, math.nan)
    std = float(x.std(ddof=1))
    low, high = stats.t.interval(CONFIDENCE, n - 1, loc=mean, scale=std / math.sqrt(n)) if std > 0 else (mean, mean)
    return Interval(mean, std, n, float(low), float(high))


@dataclass(frozen=True)
class Comparison:
    """Variant - baseline: the difference of the means, its interval, the unadjusted two-sided p, the
    test (``paired``, ``welch``, ``crossed``, ``worst-rank``; ``""``: none), SE, df and counts."""

    diff: float
    low: float = math.nan
    high: float = math.nan
    p: float = math.nan
    test: str = ""
    se: float = math.nan
    df: float = math.nan
    n_variant: int = 0
    n_baseline: int = 0
    n_pairs: int = 0
    margin: float = math.nan  # δ of the equivalence test (NaN: none)
    p_tost: float = math.nan  # TOST p-value of |Δ| < δ (unadjusted; NaN without a margin or a test)
    seeds: tuple = ()  # the paired seeds (empty for Welch)
    shift: float = math.nan  # worst-rank: mean rank of the variant - the baseline's (> 0: larger values)

    @property
    def tested(self) -> bool:
        return self.test != "" and math.isfinite(self.p)


def compare(
    variant: Sequence[float],
    baseline: Sequence[float],
    variant_seeds: Sequence[int | None] | None = None,
    baseline_seeds: Sequence[int | None] | None = None,
    margin: float | None = None,
) -> Comparison:
    """Paired t-test on the shared seeds when there are at least two, else Welch's on all values
    (non-finite values left out before pairing); untested (``test=""``) with fewer than two values a
    side or no seed spread. ``margin`` (δ > 0): also the TOST p-value within ±δ, the same test."""
    if margin is not None and not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin {margin!r}: the smallest difference of interest must be a positive number")
    pairs = _finite_pairs(variant, baseline, variant_seeds, baseline_seeds)
    if len(pairs) >= 2:
        v, b = np.array([p[1] for p in pairs]), np.array([p[2] for p in pairs])
        se = float(np.std(v - b, ddof=1) / math.sqrt(len(v)))
        return _test("paired", v, b, se, n_pairs=len(v), margin=margin, seeds=tuple(p[0] for p in pairs))
    v, b = finite(variant), finite(baseline)
    if len(v) < 2 or len(b) < 2:
        diff = float(v.mean() - b.mean()) if len(v) and len(b) else math.nan
        return Comparison(diff, n_variant=len(v), n_baseline=len(b), margin=math.nan if margin is None else margin)
    se = math.sqrt(v.var(ddof=1) / len(v) + b.var(ddof=1) / len(b))
    return _test("welch", v, b, se, margin=margin)


def t_test(variant: np.ndarray, baseline: np.ndarray, paired: bool, alternative: str = "two-sided"):
    """scipy's paired or Welch t-test of variant - baseline along the last axis."""
    if paired:
        return stats.ttest_rel(variant, baseline, axis=-1, alternative=alternative)
    return stats.ttest_ind(variant, baseline, equal_var=False, axis=-1, alternative=alternative)


def _finite_pairs(variant, baseline, variant_seeds, baseline_seeds) -> list[tuple[int, float, float]]:
    if variant_seeds is None or baseline_seeds is None:
        return []
    v = {s: x for s, x in zip(variant_seeds, variant) if s is not None and x is not None and math.isfinite(x)}
    b = {s: x for s, x in zip(baseline_seeds, baseline) if s is not None and x is not None and math.isfinite(x)}
    mine, theirs = [s for s in variant_seeds if s in v], [s for s in baseline_seeds if s in b]
    # the pairs: seeds that occur exactly once on each side, in order
    return [(s, v[s], b[s]) for s in mine if mine.count(s) == 1 and theirs.count(s) == 1]


def _test(
    name: str, v: np.ndarray, b: np.ndarray, se: float, n_pairs: int = 0, margin: float | None = None, seeds: tuple = ()
) -> Comparison:
    diff = float(v.mean() - b.mean())
    delta = math.nan if margin is None else float(margin)
    if not se > 1e-12 * max(np.abs(v).max(), np.abs(b).max()):  # no spread beyond rounding: t is undefined
        return Comparison(diff, se=0.0, n_variant=len(v), n_baseline=len(b), n_pairs=n_pairs, margin=delta, seeds=seeds)
    paired = name == "paired"
    result = t_test(v, b, paired=paired)
    ci = result.confidence_interval(CONFIDENCE)
    df = float(result.df)
    p_tost = float(tost(v, b, delta, paired)) if margin is not None else math.nan
    low, high, p = float(ci.low), float(ci.high), float(result.pvalue)
    return Comparison(diff, low, high, p, name, se, df, len(v), len(b), n_pairs, delta, p_tost, seeds)


def tost(variant: np.ndarray, baseline: np.ndarray, margin: float, paired: bool) -> np.ndarray | float:
    """The TOST p-value of equivalence within ±``margin`` (Schuirmann 1987) along the last axis."""
    lower = t_test(variant + margin, baseline, paired, "greater").pvalue
    upper = t_test(variant - margin, baseline, paired, "less").pvalue
    p = np.maximum(lower, upper)
    return float(p) if np.ndim(p) == 0 else p


def power_t(effect_se: float, df: float, alpha: float = ALPHA) -> float:
    """Power of the two-sided t-test when the true difference is ``effect_se`` SEs (noncentral t)."""
    crit = stats.t.ppf(1 - alpha / 2, df)
    # P(T < -crit) as P(T' > crit) with T' ~ nct(df, -effect): scipy's nct.cdf far in the lower tail is NaN
    return float(stats.nct.sf(crit, df, effect_se) + stats.nct.sf(crit, df, -effect_se))


def mde(se: float, df: float, alpha: float = ALPHA, power: float = POWER) -> float:
    """Minimum detectable effect: ``se`` times the noncentrality at which :func:`power_t` is ``power``."""
    if not (se > 0 and df > 0):
        return math.nan
    high = 4.0
    while power_t(high, df, alpha) < power:  # bracket the root
        high *= 2
    effect = optimize.brentq(lambda d: power_t(d, df, alpha) - power, 0.0, high, xtol=1e-10)
    return float(effect * se)


def seeds_for(
    delta: float,
    seed_se: float,
    text_se: float,
    n_seeds: int,
    n_blocks: int = 1,
    alpha: float = ALPHA,
) -> int | None:
    """The planner of a fixed design: the fewest seeds (at least 3) whose test detects |Δ| = ``delta``
    with 80% power at ``alpha``, from a pilot's SEs at ``n_seeds`` seeds: the seed SE shrinks as
    1/sqrt(n), the text SE is held fixed (a little conservative), df by Satterthwaite. None when even
    1000 seeds leave the MDE above δ (the text alone is too noisy: hold out more blocks)."""
    least, most = 3, 1000

    def detects(n: int) -> bool:
        seed_var, text_var = seed_se**2 * n_seeds / n, text_se**2
        text_df = text_var**2 / (n_blocks - 1) if text_var > 0 and n_blocks > 1 else 0.0
        df = (seed_var + text_var) ** 2 / (seed_var**2 / (n - 1) + text_df)
        return bool(mde(math.sqrt(seed_var + text_var), df, alpha) <= delta)

    if not (delta > 0 and seed_se > 0 and n_seeds >= 2) or not detects(most):
        return None
    low, high = least - 1, most  # detects(high) holds; find the first n that does (MDE falls with n)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if detects(mid) else (mid, high)
    return max(high, least)


def holm(p_values: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjusted p-values (Holm 1979), p_adj(i) = max_{j <= i} min(1, (m - j + 1) p(j)),
    along the last axis; NaN entries (untested) stay NaN and do not count in m."""
    p = np.asarray(p_values, dtype=float)
    tested = np.isfinite(p)
    m = tested.sum(axis=-1, keepdims=True)
    order = np.argsort(np.where(tested, p, np.inf), axis=-1, kind="stable")  # untested last
    rank = np.arange(p.shape[-1])
    scaled = np.minimum(1.0, (m - rank) * np.take_along_axis(p, order, axis=-1))
    adjusted = np.empty_like(p)
    np.put_along_axis(adjusted, order, np.fmax.accumulate(scaled, axis=-1), axis=-1)  # fmax: NaNs (last) ignored
    return np.where(tested, adjusted, np.nan)


def family_adjusted(
    p: Sequence[float] | np.ndarray, p_tost: Sequence[float] | np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Adjusted p-values of the difference tests ``p`` and equivalence tests ``p_tost`` of m rows
    (along the last axis; NaN: not tested), one family: Holm's step-down (Holm 1979) where step j
    divides alpha by t_j, the number of *rows* with a hypothesis not yet rejected (Shaffer 1986,
    procedure S1). Valid because a row's two nulls, Δ = 0 and |Δ| >= δ, exclude each other: at most
    t_j true nulls remain at step j, so the chance of any false ``better``, ``worse`` or
    ``equivalent`` is at most alpha (strong control)."""
    p0, pe = np.asarray(p, dtype=float), np.asarray(p_tost, dtype=float)
    m = p0.shape[-1]
    both = np.concatenate([p0, pe], axis=-1)
    tested = np.isfinite(both)
    order = np.argsort(np.where(tested, both, np.inf), axis=-1, kind="stable")
    position = np.where(tested, np.argsort(order, axis=-1, kind="stable"), -1)  # each one's place in the order
    last = np.maximum(position[..., :m], position[..., m:])  # the last place of each row's tested hypotheses
    steps = np.arange(2 * m)
    open_rows = (last[..., None, :] >= steps[:, None]).sum(-1)  # t_j: rows with a hypothesis at place >= j
    ranked = np.take_along_axis(np.where(tested, both, np.nan), order, axis=-1)
    scaled = np.minimum(1.0, open_rows * ranked)
    adjusted = np.empty_like(both)
    np.put_along_axis(adjusted, order, np.fmax.accumulate(scaled, axis=-1), axis=-1)
    adjusted = np.where(tested, adjusted, np.nan)
    return adjusted[..., :m], adjusted[..., m:]


def verdict(
    comparison: Comparison,
    p_adjusted: float,
    higher_is_better: bool,
    diverged: int = 0,
    seeds: int = 0,
    baseline_diverged: int = 0,
    baseline_seeds: int = 0,
    alpha: float = ALPHA,
    p_tost_adjusted: float = math.nan,
    stalled: int = 0,
    completed: int | None = None,
) -> str:
    """The verdict against the baseline, from the family-adjusted p-values (:func:`family_adjusted`):

    1. too few values for a test: ``not tested (...)`` (``inconclusive (...)`` when seeds diverged);
    2. ``equivalent (±δ)`` when the TOST p-value is below alpha; ``equivalent (±δ), and different
       (better)`` when the difference test passes too (a real difference smaller than δ). Never
       when a seed diverged: a diverged run is not within δ of anything;
    3. ``better`` / ``worse`` when the difference test's p-value is below alpha (by the rank shift
       for the worst-rank test); a variant whose every seed diverged and whose seeds cannot give a
       p below alpha says how small a p they could give;
    4. else ``equivalence not shown`` (with a margin) or ``inconclusive``: never "no difference".

    Notes in brackets: diverged seeds (ranked worst by the worst-rank test, not in Δ's mean) and
    stalled ones (in the test)."""
    notes = [f"diverged {diverged}/{seeds}"] if diverged else []
    notes += [f"stalled {stalled}/{completed if completed is not None else seeds}"] if stalled else []
    if not comparison.tested:
        why = "no seed spread" if comparison.se == 0 else "n < 2"
        return (INCONCLUSIVE if diverged else "not tested") + f" ({'; '.join([why, *notes])})"
    equivalent = p_tost_adjusted < alpha and not (diverged or baseline_diverged)
    different = p_adjusted < alpha
    if diverged and diverged == seeds and not different and comparison.test == "worst-rank":
        floor = min(1.0, 2 / math.comb(seeds + baseline_seeds, seeds))  # the rank test's smallest p (no ties)
        notes += [f"{seeds} vs {baseline_seeds} seeds: p >= {floor:.2g}"] if floor >= alpha else []
    note = f" ({'; '.join(notes)})" if notes else ""
    head = f"{EQUIVALENT} (±{comparison.margin:g})" if equivalent else ""
    if different:
        up = comparison.shift > 0 if comparison.test == "worst-rank" else comparison.diff > 0
        name = BETTER if up == higher_is_better else WORSE
        return (f"{head}, and different ({name})" if equivalent else name) + note
    if equivalent:
        return head + note
    return (NOT_EQUIVALENT if math.isfinite(comparison.margin) else INCONCLUSIVE) + note


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; NaN for fewer than two values), NaNs ignored."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan, math.nan
    return float(np.mean(finite)), float(np.std(finite, ddof=1)) if len(finite) > 1 else math.nan
