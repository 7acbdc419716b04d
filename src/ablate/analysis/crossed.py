"""Two sources of uncertainty: a difference that generalises to a new seed *and* a new text.

A paired t-test over seeds treats the held-out text as fixed (Clark 1973, "The language-as-fixed-
effect fallacy"; issue 34: on one 55k-character block the ALiBi − sinusoidal difference changed
sign between quarters of the text). Here both are random effects of a crossed design (Baayen,
Davidson & Bates 2008), every seed pair scored on the same text units, the **held-out blocks**
(:func:`ablate.eval_units.text_groups`; runs of windows of one block covered 78-92%, issue 43):

    d[s, t] = Δ + a[s] + b[t] + e[s, t],      Var(mean) = (MS_seed + MS_text − MS_error) / (n_s n_t)

by the two-way ANOVA mean squares (Searle, Casella & McCulloch 1992, ch. 4) with Satterthwaite's
(1946) df; below max(MS_seed, MS_text) / (n_s n_t), where the true variance cannot be, that floor
with at most the seed df n_s − 1 (the larger mean square's df gave a 2-seed interval 89.5%).
**Seed SE** = sqrt(MS_seed / (n_s n_t)), **text SE** = sqrt(MS_text / (n_s n_t)). A metric is a
ratio (summed NLL over tokens or bytes), so each unit's difference is linearised around the seed's
overall D_s: z[s, t] = D_s + (A[s, t] − D_s W[t]) / mean(W). Calibration: ``python -m
benchmarks.verdicts.simulate`` and ``tests/analysis/test_crossed.py``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.eval_units import Units, text_groups


@dataclass(frozen=True)
class CrossedResult:
    """Variant - baseline with seeds and text both random (see the module docstring)."""

    diff: float
    low: float
    high: float
    p: float
    se: float
    df: float
    seed_se: float
    text_se: float
    text_se_unpaired: float  # the text SE if the two variants had been scored on independent texts
    n_seeds: int
    n_units: int
    seeds: tuple[int, ...]
    p_tost: float = math.nan
    margin: float = math.nan

    @property
    def half_width_unpaired(self) -> float:
        """The interval's half-width without per-window pairing (text SE unpaired)."""
        var = self.se**2 - self.text_se**2 + self.text_se_unpaired**2
        return float(stats.t.ppf(0.975, self.df) * math.sqrt(max(var, 0.0))) if self.df > 0 else math.nan


def anova(z: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mean, variance of the mean, df and the mean squares of ``z`` (..., n_s, n_t), vectorised."""
    n_s, n_t = z.shape[-2], z.shape[-1]
    grand = z.mean((-2, -1))
    rows = z.mean(-1)
    ms_s = n_t * ((rows - grand[..., None]) ** 2).sum(-1) / (n_s - 1)
    if n_t == 1:
        nan = np.full_like(grand, np.nan)
        return grand, ms_s / n_s, np.full_like(grand, n_s - 1.0), ms_s, nan, nan
    cols = z.mean(-2)
    ms_t = n_s * ((cols - grand[..., None]) ** 2).sum(-1) / (n_t - 1)
    resid = z - rows[..., :, None] - cols[..., None, :] + grand[..., None, None]
    df_s, df_t, df_e = n_s - 1, n_t - 1, (n_s - 1) * (n_t - 1)
    ms_e = (resid**2).sum((-2, -1)) / df_e
    combined = ms_s + ms_t - ms_e
    floor = np.maximum(ms_s, ms_t)
    use_floor = combined < floor
    with np.errstate(divide="ignore", invalid="ignore"):
        satterthwaite = combined**2 / (ms_s**2 / df_s + ms_t**2 / df_t + ms_e**2 / df_e)
    # the floor keeps the seed df: MS_seed's own df where it is the floor; the text floor never more than the seeds'
    df = np.where(use_floor, np.where(ms_s >= ms_t, float(df_s), float(min(df_s, df_t))), satterthwaite)
    var = np.where(use_floor, floor, combined) / (n_s * n_t)
    return grand, var, df, ms_s, ms_t, ms_e


def t_tests(
    mean: np.ndarray, var: np.ndarray, df: np.ndarray, margin: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Two-sided p of mean = 0 and the TOST p of |mean| < ``margin`` from mean, variance and df."""
    se = np.sqrt(var)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(se > 0, 2 * stats.t.sf(np.abs(mean) / se, df), np.nan)
        if margin is None:
            return p, np.full_like(p, np.nan)
        lower = stats.t.sf((mean + margin) / se, df)  # H0: Δ <= -δ
        upper = stats.t.cdf((mean - margin) / se, df)  # H0: Δ >= +δ
    return p, np.where(se > 0, np.maximum(lower, upper), np.nan)


def _check_same_text(runs: Mapping[int, Units], other: Mapping[int, Units]) -> Units:
    first = next(iter(runs.values()))
    for u in [*runs.values(), *other.values()]:
        if u.text != first.text or not np.array_equal(u.index, first.index):
            raise ValueError(
                f"the runs were scored on different texts or windows ({first.text} vs {u.text}): their units do not pair"
            )
    return first


def linearised(variant: Mapping[int, Units], baseline: Mapping[int, Units], metric: str, groups: np.ndarray):
    """The per-seed, per-unit differences z (n_s, n_t), and each arm's per-unit metric over seeds."""
    seeds = sorted(set(variant) & set(baseline))
    ref = next(iter(variant.values()))
    weights = np.bincount(groups, weights=ref.denominator(metric))
    w_bar = weights.mean()
    z: list[np.ndarray] = []
    arms: dict[str, list[np.ndarray]] = {"variant": [], "baseline": []}
    for s in seeds:
        nats = {
            k: np.bincount(groups, weights=u.nats.astype(float))
            for k, u in (("variant", variant[s]), ("baseline", baseline[s]))
        }
        a = nats["variant"] - nats["baseline"]
        d = a.sum() / weights.sum()
        z.append(d + (a - d * weights) / w_bar)
        for k, n in nats.items():
            level = n.sum() / weights.sum()
            arms[k].append(level + (n - level * weights) / w_bar)
    return np.array(z), {k: np.array(v).mean(0) for k, v in arms.items()}, tuple(seeds)


def crossed(
    variant: Mapping[int, Units],
    baseline: Mapping[int, Units],
    metric: str,
    margin: float | None = None,
) -> CrossedResult:
    """Variant - baseline on ``metric`` from each arm's per-unit losses, seeds and text random."""
    shared = sorted(set(variant) & set(baseline))
    if len(shared) < 2:
        raise ValueError(f"{len(shared)} seed(s) with per-unit losses on both sides: a crossed interval needs 2")
    v, b = {s: variant[s] for s in shared}, {s: baseline[s] for s in shared}
    ref = _check_same_text(v, b)
    groups, _ = text_groups(ref)
    z, arms, seeds = linearised(v, b, metric, groups)
    n_s, n_t = z.shape
    mean, var, df, ms_s, ms_t, _ = (float(x) for x in anova(z))
    p, p_tost = (float(x) for x in t_tests(np.array(mean), np.array(var), np.array(df), margin))
    se = math.sqrt(var)
    crit = stats.t.ppf(0.975, df)
    unpaired = math.sqrt((arms["variant"].var(ddof=1) + arms["baseline"].var(ddof=1)) / n_t) if n_t > 1 else math.nan
    low, high = mean - crit * se, mean + crit * se
    seed_se, text_se = math.sqrt(ms_s / (n_s * n_t)), math.sqrt(ms_t / (n_s * n_t)) if n_t > 1 else math.nan
    delta = math.nan if margin is None else float(margin)
    return CrossedResult(mean, low, high, p, se, df, seed_se, text_se, unpaired, n_s, n_t, seeds, p_tost, delta)
