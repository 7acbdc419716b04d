"""The interaction contrast of a 2 x 2 design on paired seeds: does the effect of one factor
depend on the level of the other?

* :func:`interaction`: per seed, Δ_int = (y[a1,b1] - y[a1,b2]) - (y[a2,b1] - y[a2,b2])
  (:func:`interaction_contrasts`: a seed's own offset, shared by its four cells, cancels), its
  mean, the Student t interval and the one-sample t-test against 0 (``scipy.stats.ttest_1samp``)
  and, with a margin δ, the TOST p-value of |Δ_int| < δ (Schuirmann 1987; :func:`contrast_test`);
* :func:`interaction_verdict`: ``interaction`` / ``no interaction within ±δ`` / ``inconclusive``
  from the family-adjusted (Holm) p-values, in the order of :func:`ablate.analysis.stats.verdict`.

The simple effects use :func:`ablate.analysis.stats.compare`; :mod:`~ablate.analysis.interaction`
applies all this to the slices of a sweep.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy import stats

from ablate.analysis.stats import ALPHA, CONFIDENCE, INCONCLUSIVE, Comparison, compare

INTERACTION = "interaction"
NO_INTERACTION = "no interaction within"


@dataclass(frozen=True)
class Interaction:
    """A 2 x 2 design, factor A (levels a1, a2) x factor B (b1, b2), on the seeds run in all four
    cells. ``within_a1`` and ``within_a2`` are the simple effects of B, y[a, b1] - y[a, b2], as
    paired comparisons (:func:`compare`, unadjusted); the interaction contrast is, per seed,

        Δ_int = (y[a1, b1] - y[a1, b2]) - (y[a2, b1] - y[a2, b2]),

    the difference of the two simple effects (equally: of A's simple effects within b1 and b2),
    with its mean ``delta``, the ``confidence`` t interval (df = n - 1), the two-sided p-value of
    the one-sample t-test of the per-seed contrasts against 0 and, with a ``margin`` δ, the TOST
    p-value of |Δ_int| < δ (all unadjusted)."""

    seeds: tuple[int, ...]  # the seeds the contrast rests on: a finite value in every cell
    left_out: tuple[int, ...]  # seeds given with a non-finite value in some cell (e.g. diverged)
    means: tuple[float, ...]  # the four cell means over ``seeds``: a1b1, a1b2, a2b1, a2b2
    within_a1: Comparison
    within_a2: Comparison
    delta: float
    low: float
    high: float
    p: float
    se: float
    df: float
    margin: float = math.nan  # δ of the TOST (NaN: none)
    p_tost: float = math.nan

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def tested(self) -> bool:
        return math.isfinite(self.p)


def interaction_contrasts(a1b1: np.ndarray, a1b2: np.ndarray, a2b1: np.ndarray, a2b2: np.ndarray) -> np.ndarray:
    """Per seed (elementwise): (a1b1 - a1b2) - (a2b1 - a2b2), the effect of B within a1 minus
    its effect within a2. A seed's own offset, shared by its four cells (the same data order and
    initialisation), cancels, which is why the contrast is taken per seed."""
    return (a1b1 - a1b2) - (a2b1 - a2b2)


def contrast_test(contrasts: np.ndarray, margin: float | None = None) -> tuple[Any, np.ndarray | float]:
    """The one-sample t-test of per-seed contrasts against 0 along the last axis (vectorised over
    the others; ``scipy.stats.ttest_1samp``: ``pvalue``, ``df``, ``confidence_interval``) and,
    with a ``margin`` δ, the TOST p-value of |mean| < δ: the larger of the one-sided p-values of
    H0: Δ <= -δ and H0: Δ >= +δ (NaN without a margin)."""
    result = stats.ttest_1samp(contrasts, 0.0, axis=-1)
    if margin is None:
        return result, math.nan
    lower = stats.ttest_1samp(contrasts, -margin, axis=-1, alternative="greater").pvalue
    upper = stats.ttest_1samp(contrasts, margin, axis=-1, alternative="less").pvalue
    p_tost = np.maximum(lower, upper)
    return result, float(p_tost) if np.ndim(p_tost) == 0 else p_tost


def interaction(
    a1b1: Sequence[float],
    a1b2: Sequence[float],
    a2b1: Sequence[float],
    a2b2: Sequence[float],
    seeds: Sequence[int],
    margin: float | None = None,
    confidence: float = CONFIDENCE,
) -> Interaction:
    """The interaction contrast of four cells given per seed (``cell[i]`` is seed ``seeds[i]``'s
    value): a seed with a non-finite value in any cell (a diverged run) is left out of every
    statistic, since a contrast needs all four of its values. Untested (NaN p) with fewer than two
    seeds left or when the per-seed contrasts show no spread (t undefined)."""
    if margin is not None and not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin {margin!r}: the smallest difference of interest must be a positive number")
    if any(len(cell) != len(seeds) for cell in (a1b1, a1b2, a2b1, a2b2)):
        raise ValueError(f"each cell needs one value per seed ({len(seeds)} seeds)")
    cells = np.array([a1b1, a1b2, a2b1, a2b2], dtype=float).reshape(4, len(seeds))  # (4, 0) without seeds
    kept = np.isfinite(cells).all(axis=0)
    used = tuple(int(s) for s, k in zip(seeds, kept) if k)
    cells = cells[:, kept]
    contrasts = interaction_contrasts(*cells)
    se = float(contrasts.std(ddof=1) / math.sqrt(len(contrasts))) if len(contrasts) >= 2 else math.nan
    low = high = p = df = p_tost = math.nan
    if len(contrasts) >= 2 and not se > 1e-12 * np.abs(cells).max():  # identical contrasts up to rounding
        se = 0.0  # t is undefined: untested, as compare() does
    elif len(contrasts) >= 2:
        result, equivalence = contrast_test(contrasts, margin)
        ci = result.confidence_interval(confidence)
        low, high, p_tost = float(ci.low), float(ci.high), float(equivalence)
        p, df = float(result.pvalue), float(result.df)
    return Interaction(
        seeds=used,
        left_out=tuple(int(s) for s, k in zip(seeds, kept) if not k),
        means=tuple(float(c.mean()) if len(c) else math.nan for c in cells),
        within_a1=compare(list(cells[0]), list(cells[1]), used, used),
        within_a2=compare(list(cells[2]), list(cells[3]), used, used),
        delta=float(contrasts.mean()) if len(contrasts) else math.nan,
        low=low,
        high=high,
        p=p,
        se=se,
        df=df,
        margin=math.nan if margin is None else float(margin),
        p_tost=p_tost,
    )


def interaction_verdict(
    result: Interaction, p_adjusted: float, p_tost_adjusted: float = math.nan, alpha: float = ALPHA
) -> str:
    """The verdict on an interaction contrast from its family-adjusted (Holm) p-values, in the
    order of :func:`~ablate.analysis.stats.verdict`: ``not tested (...)`` without a test;
    ``no interaction within ±δ`` when the TOST p-value is below alpha (whatever the t-test says:
    any interaction is then smaller than δ); ``interaction`` when the t-test's is (its interval
    excludes 0); else ``inconclusive``, never "no interaction". A note ``(left out k/n)`` counts
    the seeds given with a non-finite value in some cell, as
    :func:`~ablate.analysis.stats.verdict` notes ``(diverged k/n)``."""
    given = result.n + len(result.left_out)
    note = f"left out {len(result.left_out)}/{given}" if result.left_out else ""
    if not result.tested:
        why = "no seed spread" if result.se == 0 else f"n = {result.n} < 2"
        return f"not tested ({why}" + (f"; {note})" if note else ")")
    if p_tost_adjusted < alpha:
        word = f"{NO_INTERACTION} ±{result.margin:g}"
    elif p_adjusted < alpha:
        word = INTERACTION
    else:
        word = INCONCLUSIVE
    return word + (f" ({note})" if note else "")
