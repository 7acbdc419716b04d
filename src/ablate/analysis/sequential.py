"""Seeds to a decision: a group-sequential comparison of a variant with a baseline.

Instead of fixing the number of seeds in advance, add seeds in batches and look at the paired
differences (variant - baseline, same seed) after each batch: stop as soon as the result is
``better``, ``worse`` or ``equivalent (±δ)``, else go on up to ``n_max`` seeds and call it
``inconclusive``. Looking repeatedly at a fixed level would inflate the error rates (four looks
at 5% each give ~14% false positives); here the error is *spent* over the looks with an
alpha-spending function (Lan & DeMets 1983) evaluated at the information fraction t = n / n_max:

* ``obrien-fleming``: alpha(t) = 2 - 2 Phi(z_{1-alpha/2} / sqrt(t)), almost nothing early, most
  at the end (the fixed-n test is barely changed);
* ``pocock``: alpha(t) = alpha ln(1 + (e - 1) t), evenly spread (earlier stops, a stricter end);
* ``kim-demets`` (default): alpha(t) = alpha t^4 (Kim & DeMets 1987's power family, rho = 4):
  stricter than O'Brien-Fleming before the last look and closer to the fixed-n test at it. With
  seeds the early looks have few degrees of freedom, so the error O'Brien-Fleming spends there
  buys little: at looks of 3, 5, 7, 10 seeds its power at the fixed design's minimum detectable
  effect is 77%, this one's 78-79%, Pocock's 64% (measured, ``tests/analysis/test_sequential.py``).

**Exact boundaries.** Look k rejects when the paired t statistic passes a critical value c_k
chosen so that the probability of *first* crossing at look k, under no difference, is exactly
the increment alpha(t_k) - alpha(t_{k-1}) (the Lan-DeMets construction, Jennison & Turnbull 2000,
ch. 7). The looks are correlated (the seeds of look 1 are in look 2), which a union bound over the
looks ignores and pays for in power; the boundaries here account for it. For normal differences
the joint law of the t statistics at the looks does not depend on the seed-to-seed sd, so it is
computed once, by Monte Carlo over 1,000,000 simulated sweeps with a fixed seed
(:func:`boundaries`; alpha less three simulation standard errors is spent, so the true error
rate is within about 0.001 below alpha), for the
two-sided difference test and, the same way, for each one-sided test of TOST (equivalence within
±δ). ``tests/analysis/test_sequential.py`` measures, over 200,000 independent sweeps, false
better/worse at 4-5% when there is no difference and a power of >= 78% at the fixed design's
minimum detectable effect. Several variants against one baseline: pass alpha / m.

:func:`boundaries` is what :mod:`ablate.analysis.engine` applies, as each look's nominal level,
to the row's own test (crossed seed x block, or worst-rank with a diverged seed) on the seeds that
ran by that look; :func:`decide` and :func:`sequential_verdict` are the paired-t form on
differences, kept for designs on one passage.
:func:`decide` is vectorised over leading axes (the simulation tests run many sweeps at once);
:func:`seeds_for_precision` plans a fixed-n sweep instead: the seeds for a 95% interval of Δ of a
given half-width at a given seed-to-seed sd.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from ablate.analysis.stats import ALPHA

SPENDING = ("kim-demets", "obrien-fleming", "pocock")
DEFAULT_SPENDING = "kim-demets"
RHO = 4  # kim-demets: alpha t^RHO
CONTINUE, BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = 0, 1, 2, 3, 4
NAMES = {CONTINUE: "continue", BETTER: "better", WORSE: "worse", EQUIVALENT: "equivalent", INCONCLUSIVE: "inconclusive"}


def spent(t: np.ndarray | float, alpha: float = ALPHA, kind: str = DEFAULT_SPENDING) -> np.ndarray:
    """The error spent by information fraction ``t`` (0 < t <= 1; alpha at t = 1)."""
    t = np.clip(np.asarray(t, dtype=float), 1e-12, 1.0)
    if kind == "obrien-fleming":
        return 2 - 2 * scipy_stats.norm.cdf(scipy_stats.norm.ppf(1 - alpha / 2) / np.sqrt(t))
    if kind == "pocock":
        return alpha * np.log(1 + (math.e - 1) * t)
    if kind == "kim-demets":
        return alpha * np.power(t, RHO)
    raise ValueError(f"spending={kind!r}: use one of {', '.join(SPENDING)}")


def look_levels(looks: Sequence[int], alpha: float = ALPHA, kind: str = DEFAULT_SPENDING) -> np.ndarray:
    """The level of each look (``looks``: the numbers of seeds at which to look, increasing, the
    last one n_max): the increments of :func:`spent` at t = n_k / n_max; they sum to alpha."""
    n = np.asarray(looks, dtype=float)
    if len(n) == 0 or n[0] < 2 or np.any(np.diff(n) <= 0):
        raise ValueError(f"looks={list(looks)}: give increasing numbers of seeds, the first >= 2")
    cumulative = spent(n / n[-1], alpha, kind)
    return np.diff(np.concatenate([[0.0], cumulative]))


PATHS = 1_000_000  # simulated null sweeps behind the boundaries
_SEED = 20261127


def _null_t(looks: tuple[int, ...], paths: int = PATHS) -> np.ndarray:
    """t statistics of the mean of N(0, 1) differences at each look, (paths, looks): their law is
    the law of the paired t statistics under no difference, whatever the seed-to-seed sd."""
    rng = np.random.default_rng(_SEED)
    out = np.empty((paths, len(looks)))
    for start in range(0, paths, 50_000):  # chunks: bounded memory
        x = rng.standard_normal((min(50_000, paths - start), looks[-1]))
        total, squares = np.cumsum(x, axis=1), np.cumsum(x * x, axis=1)
        for k, n in enumerate(looks):
            mean = total[:, n - 1] / n
            var = (squares[:, n - 1] - n * mean * mean) / (n - 1)
            out[start : start + len(x), k] = mean / np.sqrt(var / n)
    return out


@functools.lru_cache(maxsize=64)
def boundaries(looks: tuple[int, ...], alpha: float = ALPHA, kind: str = DEFAULT_SPENDING, sides: int = 2):
    """Critical values of the t statistic at each look: two-sided (``sides=2``, reject when
    |t| > c_k) or one-sided (``sides=1``, reject when t > c_k), such that the chance of first
    crossing at look k under no difference is the k-th increment of the spending function
    (:func:`look_levels`); ``inf`` where a look spends nothing the simulation can resolve."""
    # spend alpha less three times the simulation's standard error, so that the true error rate
    # stays below alpha (by about 0.0007 at alpha = 0.05) rather than around it
    levels = look_levels(looks, alpha, kind) * (1 - 3 * math.sqrt((1 - alpha) / (alpha * PATHS)))
    t = _null_t(tuple(looks))
    stat = np.abs(t) if sides == 2 else t
    alive = np.ones(len(t), dtype=bool)
    crit = []
    for k, level in enumerate(levels):
        target = int(level * len(t))  # paths allowed to cross first here (rounded down)
        values = np.sort(stat[alive, k])[::-1]
        c = math.inf if target < 1 else float(values[min(target, len(values)) - 1])
        c = float(np.nextafter(c, math.inf)) if math.isfinite(c) else c  # strictly above the last allowed
        crit.append(c)
        alive &= ~(stat[:, k] > c)
    return tuple(crit)


@dataclass(frozen=True)
class Decision:
    """Where the sequential comparison stopped: ``verdict`` (better / worse / equivalent /
    inconclusive, or continue when the seeds given end before n_max), after ``seeds`` seeds, at
    look ``look`` (0-based) whose boundary amounts to the two-sided p-value ``level``."""

    verdict: str
    seeds: int
    look: int
    level: float


def _t_values(d: np.ndarray, margin: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The paired t statistic of mean(d) = 0, the two TOST statistics (mean + margin) / se and
    (mean - margin) / se, and mean(d), along the last axis (NaN where the seeds show no spread)."""
    n = d.shape[-1]
    mean = d.mean(-1)
    se = d.std(-1, ddof=1) / math.sqrt(n)
    bad = ~(se > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        t0, lower, upper = mean / se, (mean + margin) / se, (mean - margin) / se
    nan = np.nan
    return np.where(bad, nan, t0), np.where(bad, nan, lower), np.where(bad, nan, upper), mean


def decide(
    diffs: np.ndarray,
    margin: float,
    looks: Sequence[int],
    alpha: float = ALPHA,
    kind: str = DEFAULT_SPENDING,
    higher_is_better: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """The group-sequential verdict of paired differences ``diffs`` (variant - baseline per seed,
    in seed order, along the last axis; any leading shape). Returns ``(code, seeds)`` arrays: the
    verdict code (:data:`NAMES`) and the seeds it used. At each look with enough seeds: TOST first
    (``equivalent``: both one-sided statistics past the look's one-sided boundary, |Δ| < ``margin``),
    else the t-test (|t| past the two-sided boundary: ``better`` / ``worse`` by the metric's
    direction); ``inconclusive`` after the last look; ``continue`` when ``diffs`` has fewer seeds
    than the next look. Boundaries: :func:`boundaries`."""
    if not margin > 0:
        raise ValueError(f"margin {margin!r}: the smallest difference of interest must be > 0")
    d = np.asarray(diffs, dtype=float)
    looks = tuple(int(n) for n in looks)
    two, one = boundaries(looks, alpha, kind, 2), boundaries(looks, alpha, kind, 1)
    code = np.full(d.shape[:-1], CONTINUE)
    used = np.zeros(d.shape[:-1], dtype=int)
    for k, n in enumerate(looks):
        if d.shape[-1] < n:
            break
        t0, lower, upper, mean = _t_values(d[..., :n], margin)
        open_ = code == CONTINUE
        with np.errstate(invalid="ignore"):
            equivalent = open_ & (lower > one[k]) & (upper < -one[k])
            different = open_ & ~equivalent & (np.abs(t0) > two[k])
        good = (mean > 0) == higher_is_better
        code = np.where(equivalent, EQUIVALENT, code)
        code = np.where(different, np.where(good, BETTER, WORSE), code)
        if k == len(looks) - 1:
            code = np.where(code == CONTINUE, INCONCLUSIVE, code)
        used = np.where(open_, n, used)
    return code, used


def nominal_level(looks: Sequence[int], look: int, alpha: float = ALPHA, kind: str = DEFAULT_SPENDING) -> float:
    """The two-sided p-value threshold that look ``look`` (0-based) of :func:`decide` amounts to:
    2 P(T_{n-1} > c_k), for the report."""
    looks = tuple(int(n) for n in looks)
    c = boundaries(looks, alpha, kind, 2)[look]
    return float(2 * scipy_stats.t.sf(c, looks[look] - 1)) if math.isfinite(c) else 0.0


def sequential_verdict(
    diffs: Sequence[float],
    margin: float,
    looks: Sequence[int],
    alpha: float = ALPHA,
    kind: str = DEFAULT_SPENDING,
    higher_is_better: bool = False,
) -> Decision:
    """:func:`decide` for one comparison, as a :class:`Decision` (``equivalent (±δ)`` spelled out)."""
    code, seeds = decide(np.asarray(diffs, dtype=float)[None, :], margin, looks, alpha, kind, higher_is_better)
    c, n = int(code[0]), int(seeds[0])
    look = next((k for k, m in enumerate(looks) if m == n), -1)
    level = nominal_level(looks, look, alpha, kind) if look >= 0 else math.nan
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
