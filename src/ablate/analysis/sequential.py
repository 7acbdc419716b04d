"""Seeds to a decision: a group-sequential comparison of a variant with a baseline.

Instead of fixing the number of seeds in advance, add seeds in batches and look at the paired
differences (variant - baseline, same seed) after each batch: stop as soon as the result is
``better``, ``worse`` or ``equivalent (±δ)``, else go on up to ``n_max`` seeds and call it
``inconclusive``. Looking repeatedly at a fixed level would inflate the error rates (five looks
at 5% each give ~14% false positives); here the error is *spent* over the looks with an
alpha-spending function (Lan & DeMets 1983) evaluated at the information fraction t = n / n_max:

* ``obrien-fleming``: alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)), almost nothing early, most
  at the end (the fixed-n test is barely changed);
* ``pocock``: alpha(t) = alpha ln(1 + (e - 1) t), evenly spread (earlier stops, a stricter end).

Look k tests at the level alpha(t_k) - alpha(t_{k-1}) (the increment), each look's tests being
the ordinary exact ones of :mod:`~ablate.analysis.stats` on the seeds so far: the paired t-test
for a difference (two-sided) and TOST for equivalence within ±δ. The increments sum to alpha, so
by the union bound the chance of a false ``better``/``worse`` when there is no difference, and
of a false ``equivalent`` when |Δ| = δ, is at most alpha whatever the correlation between the
looks (Bonferroni over the looks: conservative, since the looks are positively correlated, but
valid for t statistics at any n without the normal-theory boundary tables). Several variants
against one baseline: pass alpha / m (Bonferroni over the comparisons).

:func:`decide` is vectorised over leading axes (the simulation tests run thousands of sweeps at
once); :func:`seeds_for_precision` plans a fixed-n sweep instead: the seeds for a 95% interval
of Δ of a given half-width at a given seed-to-seed sd.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from ablate.analysis.stats import ALPHA

SPENDING = ("obrien-fleming", "pocock")
CONTINUE, BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = 0, 1, 2, 3, 4
NAMES = {CONTINUE: "continue", BETTER: "better", WORSE: "worse", EQUIVALENT: "equivalent", INCONCLUSIVE: "inconclusive"}


def spent(t: np.ndarray | float, alpha: float = ALPHA, kind: str = "obrien-fleming") -> np.ndarray:
    """The error spent by information fraction ``t`` (0 < t <= 1; alpha at t = 1)."""
    t = np.clip(np.asarray(t, dtype=float), 1e-12, 1.0)
    if kind == "obrien-fleming":
        return 2 - 2 * scipy_stats.norm.cdf(scipy_stats.norm.ppf(1 - alpha / 2) / np.sqrt(t))
    if kind == "pocock":
        return alpha * np.log(1 + (math.e - 1) * t)
    raise ValueError(f"spending={kind!r}: use one of {', '.join(SPENDING)}")


def look_levels(looks: Sequence[int], alpha: float = ALPHA, kind: str = "obrien-fleming") -> np.ndarray:
    """The level of each look (``looks``: the numbers of seeds at which to look, increasing, the
    last one n_max): the increments of :func:`spent` at t = n_k / n_max; they sum to alpha."""
    n = np.asarray(looks, dtype=float)
    if len(n) == 0 or n[0] < 2 or np.any(np.diff(n) <= 0):
        raise ValueError(f"looks={list(looks)}: give increasing numbers of seeds, the first >= 2")
    cumulative = spent(n / n[-1], alpha, kind)
    return np.diff(np.concatenate([[0.0], cumulative]))


@dataclass(frozen=True)
class Decision:
    """Where the sequential comparison stopped: ``verdict`` (better / worse / equivalent /
    inconclusive, or continue when the seeds given end before n_max), after ``seeds`` seeds, at
    look ``look`` (0-based) whose level was ``level``."""

    verdict: str
    seeds: int
    look: int
    level: float


def _p_values(d: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two-sided paired t-test p of mean(d) = 0, TOST p of |mean(d)| < margin, and mean(d), along
    the last axis (NaN p where the seeds show no spread)."""
    n = d.shape[-1]
    mean = d.mean(-1)
    se = d.std(-1, ddof=1) / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        t0 = mean / se
        p = 2 * scipy_stats.t.sf(np.abs(t0), n - 1)
        lower = scipy_stats.t.sf((mean + margin) / se, n - 1)
        upper = scipy_stats.t.cdf((mean - margin) / se, n - 1)
    bad = ~(se > 0)
    return np.where(bad, np.nan, p), np.where(bad, np.nan, np.maximum(lower, upper)), mean


def decide(
    diffs: np.ndarray,
    margin: float,
    looks: Sequence[int],
    alpha: float = ALPHA,
    kind: str = "obrien-fleming",
    higher_is_better: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The group-sequential verdict of paired differences ``diffs`` (variant - baseline per seed,
    in seed order, along the last axis; any leading shape). Returns ``(code, seeds)`` arrays: the
    verdict code (:data:`NAMES`) and the seeds it used. At each look with enough seeds: TOST at
    the look's level first (``equivalent``: |Δ| < ``margin``), else the t-test (``better`` /
    ``worse`` by the metric's direction); ``inconclusive`` after the last look; ``continue`` when
    ``diffs`` has fewer seeds than the next look."""
    if not margin > 0:
        raise ValueError(f"margin {margin!r}: the smallest difference of interest must be > 0")
    d = np.asarray(diffs, dtype=float)
    levels = look_levels(looks, alpha, kind)
    code = np.full(d.shape[:-1], CONTINUE)
    used = np.zeros(d.shape[:-1], dtype=int)
    for k, (n, level) in enumerate(zip(looks, levels, strict=True)):
        if d.shape[-1] < n:
            break
        p, p_tost, mean = _p_values(d[..., :n], margin)
        open_ = code == CONTINUE
        equivalent = open_ & (p_tost < level)
        different = open_ & ~equivalent & (p < level)
        good = (mean > 0) == higher_is_better
        code = np.where(equivalent, EQUIVALENT, code)
        code = np.where(different, np.where(good, BETTER, WORSE), code)
        if k == len(looks) - 1:
            code = np.where(code == CONTINUE, INCONCLUSIVE, code)
        used = np.where(open_, n, used)
    return code, used


def sequential_verdict(
    diffs: Sequence[float],
    margin: float,
    looks: Sequence[int],
    alpha: float = ALPHA,
    kind: str = "obrien-fleming",
    higher_is_better: bool = False,
) -> Decision:
    """:func:`decide` for one comparison, as a :class:`Decision` (``equivalent (±δ)`` spelled out)."""
    code, seeds = decide(np.asarray(diffs, dtype=float)[None, :], margin, looks, alpha, kind, higher_is_better)
    c, n = int(code[0]), int(seeds[0])
    look = next((k for k, m in enumerate(looks) if m == n), -1)
    level = float(look_levels(looks, alpha, kind)[look]) if look >= 0 else math.nan
    name = f"equivalent (±{margin:g})" if c == EQUIVALENT else NAMES[c]
    return Decision(name, n, look, level)


def seeds_for_precision(sd: float, half_width: float, confidence: float = 0.95, n_max: int = 1000) -> int:
    """The fewest seeds n >= 2 whose t interval of a mean has half-width t_{(1+c)/2, n-1} sd / sqrt(n)
    <= ``half_width`` (``sd``: the seed-to-seed sd of the paired differences, from a pilot)."""
    if not (sd > 0 and half_width > 0):
        raise ValueError("sd and half_width must be > 0")
    for n in range(2, n_max + 1):
        if scipy_stats.t.ppf((1 + confidence) / 2, n - 1) * sd / math.sqrt(n) <= half_width:
            return n
    raise ValueError(f"more than {n_max} seeds for a half-width of {half_width:g} at sd {sd:g}")
