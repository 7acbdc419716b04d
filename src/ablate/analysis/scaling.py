"""Effective compute multiplier: how much training compute a variant is worth, from loss-vs-compute curves.

Each variant is trained at several sizes (the *scale* axis of the sweep, e.g. ``model=tiny,small,base``
or ``model.d_model=64,128,256``) with several seeds. Per variant, the final loss against the
training compute C is fitted with a saturating power law (Kaplan et al. 2020; Hoffmann et al.
2022, Eq. 2, in compute only)::

    L(C) = E + A * C^(-alpha)          (E: irreducible loss, the asymptote; alpha > 0)

by least squares over every (scale, seed) point, with bounds 0 <= E <= min L, A > 0,
0.001 <= alpha <= 5, in log-compute (x = ln(C / C0), C0 the geometric mean of the compute, so
that A and alpha are well conditioned). The fit is a *variable projection* (Golub & Pereyra
1973): for a given alpha the model is linear in (E, a), solved in closed form within the bounds,
so the least squares is a one-dimensional search over alpha (a log-spaced grid, then golden
section around its best point), vectorised over many data sets at once (:func:`fit_power_laws`):
a bootstrap refits thousands of curves in well under a second. ``shared_E``: both curves of a
comparison share the asymptote (one E, a search over it around the per-curve fits), for ladders
too short to pin E per curve.

The **effective compute multiplier** of a variant over the baseline at compute C: the compute the
baseline needs to reach the variant's (fitted) loss at C, divided by C::

    m(C) = C_b / C,   C_b = (A_b / (L_v(C) - E_b))^(1/alpha_b)

reported at the largest compute the variant was measured at (a multiplier of 2 means the change
is worth doubling the compute there; it varies with C unless the two alphas agree). When the
variant's loss is at or below the baseline's asymptote E_b no amount of compute gets the baseline
there: the multiplier is infinite, and reported as such. A power law with three parameters needs
at least three scales per curve.

Confidence interval: a percentile bootstrap of the whole pipeline (Efron & Tibshirani 1993,
ch. 13 and 6.5), every replicate refitting both curves and recomputing the multiplier; the
interval is the (alpha/2, 1 - alpha/2) quantiles of the replicates (infinite ones kept as
infinite). Two kinds (``method``):

* ``parametric`` (default): replicate data = the fitted curves at the measured computes plus
  Gaussian noise whose sd is each curve's seed-to-seed sd pooled over its scales (df = sum of
  seeds - 1 per scale), itself drawn per replicate from its sampling distribution
  (s·sqrt(df / chi2_df)), so that an sd estimated from 3 seeds widens the interval as a t
  quantile would. With three scales and three parameters the fit has no residual degrees of
  freedom: the seeds are the only estimate of the noise. With one seed per scale the residual
  sd of the fit (df = points - 3) is used, and with neither no interval is given.
* ``seeds``: the seeds resampled *jointly* (one draw of seed ids with replacement, each drawn
  seed bringing its points at every scale and in both curves: same seed, same data order), a
  weighted refit. With 3 seeds there are only 10 distinct resamples: too few for a 95% interval,
  hence not the default.

Calibration (``tests/analysis/test_stats.py``): at the shape of the GLU ladder (3 sizes x 3 seeds, noise
sd 0.008, true multiplier 1) the parametric 95% interval covers the truth in >= 93% of 200
simulated sweeps.

Extrapolation: the multiplier at C* asks for the compute at which the *baseline's* curve reaches
a loss; when that compute (or the interval's end) lies beyond the baseline's largest measured
compute, the answer rests on the fitted law outside the data: :attr:`Multiplier.extrapolation`
says so, and ``compute_multiplier.py`` prints it (``--no-extrapolation`` refuses such rows).

Compute per job (:func:`ablate.analysis.compute.job_compute`): training FLOPs per token times tokens seen, tokens =
optimiser steps x ``data.batch_size`` (sequences per step, all devices) x ``data.seq_len`` for a
language model; for translation ``data.batch_size`` x ``data.max_tokens`` (the padded token
budget of a batch, an upper bound). FLOPs per token: ``6N+attn`` (default) is
:func:`ablate.nn.flops.flops_per_token`, 6 N + 12 L d T (the same count as
``train/mfu``), ``6N`` is Kaplan et al.'s C = 6 N D; N = ``params`` of ``status.json`` (all
parameters, embeddings included).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ablate.analysis.compute import job_compute
from ablate.analysis.job import higher_is_better
from ablate.analysis.runs import Sweep
from ablate.analysis.specs import parse_baseline

MIN_SCALES = 3
_ALPHA_BOUNDS = (1e-3, 5.0)


# ----------------------------------------------------------------------------- the fit


@dataclass(frozen=True)
class PowerLaw:
    """L(C) = E + A * C^(-alpha), stored as E, alpha and a = A * c0^(-alpha) (so L = E + a (C/c0)^(-alpha))."""

    E: float
    a: float
    alpha: float
    c0: float

    @property
    def A(self) -> float:  # the paper's name, upper case
        return self.a * self.c0**self.alpha

    def loss(self, compute: float | np.ndarray) -> float | np.ndarray:
        return self.E + self.a * np.exp(-self.alpha * np.log(np.asarray(compute, dtype=float) / self.c0))

    def compute_for(self, loss: float) -> float:
        """The compute at which the curve reaches ``loss``; infinite at or below the asymptote E."""
        if loss <= self.E:
            return math.inf
        return float(self.c0 * np.exp(np.log(self.a / (loss - self.E)) / self.alpha))


_AMIN = 1e-12
_GRID = np.geomspace(_ALPHA_BOUNDS[0], _ALPHA_BOUNDS[1], 81)
_GOLDEN = (math.sqrt(5) - 1) / 2


def _linear_part(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, alpha: np.ndarray, e_fixed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each alpha (shape ``S``, broadcast with the leading shape of ``y``/``w``: ``S + (n,)``),
    the weighted least-squares (E, a) of y = E + a exp(-alpha x) within 0 <= E <= min y,
    a >= 1e-12 (a convex quadratic in two variables: the interior solution if feasible, else the
    best of its solutions on the edges of the box), and the SSE. ``e_fixed``: E given, a only."""
    z = np.exp(-alpha[..., None] * x)
    sw = w.sum(-1)
    ymin = np.where(w > 0, y, np.inf).min(-1)

    def sse(E, a):
        return (w * (y - E[..., None] - a[..., None] * z) ** 2).sum(-1)

    def a_given(E):
        return np.maximum(_AMIN, (w * z * (y - E[..., None])).sum(-1) / np.maximum((w * z * z).sum(-1), 1e-300))

    if e_fixed is not None:
        E = np.broadcast_to(e_fixed, sse(np.zeros_like(sw), np.zeros_like(sw)).shape).astype(float)
        a = a_given(E)
        return E, a, sse(E, a)
    zbar, ybar = (w * z).sum(-1) / sw, (w * y).sum(-1) / sw
    zc, yc = z - zbar[..., None], y - ybar[..., None]
    szz = (w * zc * zc).sum(-1)
    a_int = (w * zc * yc).sum(-1) / np.maximum(szz, 1e-300)
    e_int = ybar - a_int * zbar
    candidates = []
    feasible = (e_int >= 0) & (e_int <= ymin) & (a_int >= _AMIN) & (szz > 0)
    candidates.append((np.where(feasible, e_int, 0.0), np.where(feasible, a_int, _AMIN), feasible))
    for edge in (np.zeros_like(ymin), ymin):
        candidates.append((edge, a_given(edge), np.ones_like(feasible)))
    e_low = np.clip(ybar - _AMIN * zbar, 0.0, ymin)
    candidates.append((e_low, np.full_like(e_low, _AMIN), np.ones_like(feasible)))
    best_E, best_a, ok0 = candidates[0]
    best = np.where(ok0, sse(best_E, best_a), np.inf)
    for E, a, ok in candidates[1:]:
        value = np.where(ok, sse(E, a), np.inf)
        better = value < best
        best_E, best_a, best = np.where(better, E, best_E), np.where(better, a, best_a), np.minimum(value, best)
    return best_E, best_a, best


def golden_section(
    f: Callable[[np.ndarray], np.ndarray], lo: np.ndarray, hi: np.ndarray, iterations: int
) -> tuple[np.ndarray, np.ndarray]:
    """Golden-section search for the minimum of ``f`` within ``[lo, hi]``, elementwise over
    arrays of brackets (``f`` maps an array of points to an array of values; one new point per
    step); returns the final bracket ``(lo, hi)``. Written here because it runs vectorised over
    thousands of bootstrap fits at once, which ``scipy.optimize.golden`` (one scalar) does not."""
    c, d = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
    fc, fd = f(c), f(d)
    for _ in range(iterations):
        left = fc < fd
        hi, lo = np.where(left, d, hi), np.where(left, lo, c)
        c_new, d_new = hi - _GOLDEN * (hi - lo), lo + _GOLDEN * (hi - lo)
        f_new = f(np.where(left, c_new, d_new))
        c, d = np.where(left, c_new, d), np.where(left, c, d_new)
        fc, fd = np.where(left, f_new, fd), np.where(left, fc, f_new)
    return lo, hi


def _profile(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, e_fixed: np.ndarray | None = None, iterations: int = 34
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(E, a, alpha, SSE) minimising the SSE over alpha in [0.001, 5]: the grid, then golden
    section in log alpha between the best grid point's neighbours. ``y``, ``w``: shape (R, n)."""
    grid = np.log(_GRID)
    ef = None if e_fixed is None else np.asarray(e_fixed, dtype=float)[:, None]
    _, _, sse = _linear_part(x, y[:, None, :], w[:, None, :], np.exp(grid)[None, :], ef)
    k = np.argmin(sse, axis=1)
    lo, hi = grid[np.maximum(k - 1, 0)], grid[np.minimum(k + 1, len(grid) - 1)]
    e1 = None if e_fixed is None else np.asarray(e_fixed, dtype=float)

    def f(t):
        return _linear_part(x, y, w, np.exp(t), e1)[2]

    lo, hi = golden_section(f, lo, hi, iterations)
    t = (lo + hi) / 2
    best_grid = sse[np.arange(len(k)), k]
    t = np.where(f(t) <= best_grid, t, grid[k])
    E, a, value = _linear_part(x, y, w, np.exp(t), e1)
    return E, a, np.exp(t), value


def fit_power_laws(
    compute: np.ndarray, losses: np.ndarray, weights: np.ndarray | None = None, c0: float | None = None
) -> list[PowerLaw]:
    """Weighted least-squares fits of L = E + A C^(-alpha), one per row of ``losses`` (R x n, at
    the common ``compute`` points; ``weights`` R x n, e.g. bootstrap counts), vectorised: the
    fit of :func:`fit_power_law` for many data sets at once."""
    compute = np.asarray(compute, dtype=float)
    y = np.atleast_2d(np.asarray(losses, dtype=float))
    w = np.ones_like(y) if weights is None else np.atleast_2d(np.asarray(weights, dtype=float))
    c0 = float(np.exp(np.mean(np.log(compute)))) if c0 is None else c0
    E, a, alpha, _ = _profile(np.log(compute / c0), y, w)
    return [PowerLaw(float(e), float(b), float(al), c0) for e, b, al in zip(E, a, alpha, strict=True)]


def fit_shared_asymptote(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[np.ndarray] | None = None, iterations: int = 40
) -> list[list[PowerLaw]]:
    """Curves that share their asymptote E (each its own A, alpha): per curve ``(compute, losses
    R x n)``; returns, per curve, its R fits. E is searched on a grid between 0 and the smallest
    loss of all curves, then by golden section, each step refitting every curve's (a, alpha)."""
    parts = []
    for i, (compute, losses) in enumerate(curves):
        compute = np.asarray(compute, dtype=float)
        y = np.atleast_2d(np.asarray(losses, dtype=float))
        w = np.ones_like(y) if weights is None else np.atleast_2d(np.asarray(weights[i], dtype=float))
        c0 = float(np.exp(np.mean(np.log(compute))))
        parts.append((np.log(compute / c0), y, w, c0))
    top = np.min([np.where(w > 0, y, np.inf).min(-1) for _, y, w, _ in parts], axis=0)

    def total(E):
        return sum(_profile(x, y, w, E, iterations=30)[3] for x, y, w, _ in parts)

    fractions = np.linspace(0.0, 1.0, 25)
    values = np.stack([total(top * f) for f in fractions], axis=1)
    k = np.argmin(values, axis=1)
    lo, hi = top * fractions[np.maximum(k - 1, 0)], top * fractions[np.minimum(k + 1, len(fractions) - 1)]
    lo, hi = golden_section(total, lo, hi, iterations)
    E = (lo + hi) / 2
    grid_best = values[np.arange(len(k)), k]
    E = np.where(total(E) <= grid_best, E, top * fractions[k])
    out = []
    for x, y, w, c0 in parts:
        e, a, alpha, _ = _profile(x, y, w, E)
        out.append([PowerLaw(float(ei), float(ai), float(al), c0) for ei, ai, al in zip(e, a, alpha, strict=True)])
    return out


def fit_power_law(compute: np.ndarray, loss: np.ndarray) -> PowerLaw:
    """Least-squares fit of L = E + A C^(-alpha) (module docstring). Needs >= 3 distinct computes."""
    compute, loss = np.asarray(compute, dtype=float), np.asarray(loss, dtype=float)
    if len(np.unique(compute)) < MIN_SCALES:
        raise ValueError(
            f"a saturating power law has 3 parameters (E, A, alpha): it needs >= {MIN_SCALES} "
            f"compute scales, got {len(np.unique(compute))}"
        )
    return fit_power_laws(compute, loss[None, :])[0]


def multiplier(variant: PowerLaw, baseline: PowerLaw, compute: float) -> float:
    """The baseline's compute to reach the variant's fitted loss at ``compute``, over ``compute``
    (infinite when that loss is at or below the baseline's asymptote)."""
    return baseline.compute_for(float(variant.loss(compute))) / compute


# ----------------------------------------------------------------------------- curves and the bootstrap


@dataclass
class Curve:
    """The (scale, seed) points of one variant: scale label, compute and final loss per completed seed,
    plus the seeds that have no final value (diverged, crashed, unfinished), by scale."""

    label: str
    axes: dict[str, str | None] = field(default_factory=dict)  # the variant's values of the non-scale axes
    scale: list[str] = field(default_factory=list)
    compute: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    failed: dict[str, list[str]] = field(default_factory=dict)  # scale -> statuses of the jobs left out
    seed: list[int | None] = field(default_factory=list)  # each point's seed (the joint seed bootstrap)

    def scales(self) -> list[str]:
        return list(dict.fromkeys(self.scale))

    def check(self) -> None:
        if len(self.scales()) < MIN_SCALES:
            raise ValueError(
                f"{self.label}: {len(self.scales())} scale(s) with a final loss "
                f"({', '.join(self.scales()) or 'none'}); a saturating power law L = E + A C^-alpha "
                f"has 3 parameters, so it needs >= {MIN_SCALES} scales"
            )

    def fit(self) -> PowerLaw:
        self.check()
        return fit_power_law(np.array(self.compute), np.array(self.loss))

    def resample(self, rng: np.random.Generator) -> Curve:
        """The same scales, each with its seeds drawn with replacement."""
        out = Curve(self.label, self.axes)
        scale = np.array(self.scale)
        for name in self.scales():
            index = np.flatnonzero(scale == name)
            for i in rng.choice(index, size=len(index), replace=True):
                out.scale.append(name)
                out.compute.append(self.compute[i])
                out.loss.append(self.loss[i])
        return out

    def noise_sd(self) -> tuple[float, int]:
        """The seed-to-seed sd pooled over the scales (sum of squared deviations from each scale's
        mean over sum of (seeds - 1)) and its degrees of freedom; (NaN, 0) with one seed per scale."""
        scale, loss = np.array(self.scale), np.array(self.loss, dtype=float)
        ss, df = 0.0, 0
        for name in self.scales():
            values = loss[scale == name]
            ss += float(((values - values.mean()) ** 2).sum())
            df += len(values) - 1
        return (math.sqrt(ss / df), df) if df else (math.nan, 0)


@dataclass(frozen=True)
class Multiplier:
    """The multiplier of ``variant`` over ``baseline`` at ``compute`` with its bootstrap interval;
    ``extrapolation``: why the answer rests on the baseline's law beyond its measured computes
    (empty when it does not)."""

    variant: str
    baseline: str
    compute: float
    loss: float  # the variant's fitted loss there
    value: float
    low: float
    high: float
    n_boot: int
    failed_fits: int
    variant_fit: PowerLaw
    baseline_fit: PowerLaw
    method: str = "parametric"
    shared_E: bool = False
    extrapolation: str = ""


METHODS = ("parametric", "seeds")


def fit_pair(variant: Curve, baseline: Curve, shared_E: bool = False) -> tuple[PowerLaw, PowerLaw]:
    """The two curves' fits, each its own (E, A, alpha), or with one shared E."""
    variant.check()
    baseline.check()
    if not shared_E:
        return variant.fit(), baseline.fit()
    fits = fit_shared_asymptote(
        [(np.array(variant.compute), np.array([variant.loss])), (np.array(baseline.compute), np.array([baseline.loss]))]
    )
    return fits[0][0], fits[1][0]


def _noise(curve: Curve, fit: PowerLaw) -> tuple[float, int]:
    sd, df = curve.noise_sd()
    if df:
        return sd, df
    n = len(curve.loss)
    if n > 3:  # one seed per scale, more scales than parameters: the fit's residual sd
        resid = np.array(curve.loss) - fit.loss(np.array(curve.compute))
        return float(math.sqrt((resid**2).sum() / (n - 3))), n - 3
    raise ValueError(
        f"{curve.label}: one seed per scale and {len(curve.scales())} scales: no estimate of the "
        "noise for a parametric interval (run >= 2 seeds per scale, or --ci seeds)"
    )


def _replicate_fits(
    variant: Curve, baseline: Curve, ys: list[np.ndarray], ws: list[np.ndarray] | None, shared_E: bool
) -> tuple[list[PowerLaw], list[PowerLaw]]:
    computes = [np.array(variant.compute), np.array(baseline.compute)]
    if shared_E:
        fits = fit_shared_asymptote(list(zip(computes, ys, strict=True)), ws)
        return fits[0], fits[1]
    weights: list[np.ndarray | None] = list(ws) if ws is not None else [None, None]
    return (fit_power_laws(computes[0], ys[0], weights[0]), fit_power_laws(computes[1], ys[1], weights[1]))


def bootstrap(
    variant: Curve,
    baseline: Curve,
    compute: float,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    method: str = "parametric",
    shared_E: bool = False,
    fits: tuple[PowerLaw, PowerLaw] | None = None,
) -> tuple[float, float, int]:
    """Percentile bootstrap interval of the multiplier at ``compute`` (module docstring: the
    ``parametric`` and the joint ``seeds`` bootstrap), and the number of replicates whose fit
    failed (left out of the quantiles). Reproducible: ``numpy.random.default_rng(seed)``."""
    if method not in METHODS:
        raise ValueError(f"method={method!r}: use one of {', '.join(METHODS)}")
    rng = np.random.default_rng(seed)
    variant_fit, baseline_fit = fits or fit_pair(variant, baseline, shared_E)
    if method == "parametric":
        ys = []
        for curve, fit in ((variant, variant_fit), (baseline, baseline_fit)):
            sd, df = _noise(curve, fit)
            sigma = sd * np.sqrt(
                df / np.asarray(rng.chisquare(df, n_boot))
            )  # the sd's own uncertainty (a t, in effect)
            mean = np.asarray(fit.loss(np.array(curve.compute)))
            ys.append(mean[None, :] + sigma[:, None] * rng.standard_normal((n_boot, len(curve.loss))))
        ws = None
    else:
        ids = sorted({s for s in [*variant.seed, *baseline.seed] if s is not None})
        if len(ids) < 2 or len(variant.seed) != len(variant.loss) or len(baseline.seed) != len(baseline.loss):
            raise ValueError("the seed bootstrap needs each point's seed and >= 2 seeds")
        counts = rng.multinomial(len(ids), [1 / len(ids)] * len(ids), size=n_boot)
        column: dict[int | None, int] = {s: k for k, s in enumerate(ids)}
        ys = [np.broadcast_to(np.array(c.loss, dtype=float), (n_boot, len(c.loss))) for c in (variant, baseline)]
        ws = [np.asarray(counts)[:, np.array([column[s] for s in c.seed])].astype(float) for c in (variant, baseline)]
    variants, baselines = _replicate_fits(variant, baseline, ys, ws, shared_E)
    values, failed = [], 0
    for k, (v, b) in enumerate(zip(variants, baselines, strict=True)):
        enough = ws is None or all(
            len(set(np.array(c.scale)[w[k] > 0])) >= MIN_SCALES for c, w in zip((variant, baseline), ws, strict=True)
        )
        value = multiplier(v, b, compute) if enough else math.nan
        if math.isnan(value):
            failed += 1
        else:
            values.append(value)
    if not values:
        return math.nan, math.nan, failed
    tail = (1 - confidence) / 2
    low, high = np.quantile(np.array(values), [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high), failed


def extrapolation(value: float, high: float, compute: float, baseline: Curve) -> str:
    """Why the multiplier at ``compute`` rests on the baseline's law beyond the computes it was
    measured at (``""`` when it does not): the baseline would need more (or less) compute than it
    was trained with to reach the variant's loss, for the estimate or the interval's upper end."""
    top, bottom = max(baseline.compute), min(baseline.compute)
    if compute > top * (1 + 1e-9):
        return f"C* = {compute:.3g} is beyond the baseline's largest measured compute {top:.3g}"
    if math.isinf(value):
        return "the variant's loss is below the baseline's fitted asymptote: no measured compute reaches it"
    if value * compute > top * (1 + 1e-6):
        return (
            f"the baseline would need {value * compute:.3g} FLOPs, beyond its largest measured {top:.3g} "
            f"(x{value * compute / top:.2g})"
        )
    if value * compute < bottom * (1 - 1e-6):
        return f"the baseline would need {value * compute:.3g} FLOPs, below its smallest measured {bottom:.3g}"
    if math.isfinite(high) and high * compute > top * (1 + 1e-6):
        return f"the interval's upper end needs {high * compute:.3g} FLOPs, beyond the baseline's largest measured {top:.3g}"
    if math.isinf(high):
        return "the interval's upper end is infinite (below the baseline's asymptote)"
    return ""


def compute_multiplier(
    variant: Curve,
    baseline: Curve,
    n_boot: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
    method: str = "parametric",
    shared_E: bool = False,
) -> Multiplier:
    """The multiplier at the variant's largest measured compute, with its bootstrap interval and
    its extrapolation flag."""
    variant_fit, baseline_fit = fit_pair(variant, baseline, shared_E)
    at = float(max(variant.compute))
    low, high, failed = (
        bootstrap(variant, baseline, at, n_boot, seed, confidence, method, shared_E, (variant_fit, baseline_fit))
        if n_boot
        else (math.nan, math.nan, 0)
    )
    value = multiplier(variant_fit, baseline_fit, at)
    return Multiplier(
        variant.label,
        baseline.label,
        at,
        float(variant_fit.loss(at)),
        value,
        low,
        high,
        n_boot,
        failed,
        variant_fit,
        baseline_fit,
        method,
        shared_E,
        extrapolation(value, high, at, baseline),
    )


# ----------------------------------------------------------------------------- from a sweep


def scaling_curves(
    sweep: Sweep, scale_key: str, metric: str = "val/loss", flops: str = "6N+attn", per_point: Sequence[str] = ()
) -> list[Curve]:
    """One :class:`Curve` per combination of the sweep's other axes (a variant), in run order, its
    points the completed jobs' final ``metric`` against :func:`job_compute`. Axes in ``per_point``
    belong to a point, not to a variant: a ``tune=lr`` sweep's ``optim.lr``, tuned at each scale,
    so one variant's curve joins its best rate at every size."""
    if higher_is_better(metric):
        raise ValueError(
            f"--metric {metric}: the fit L = E + A C^-alpha is for a loss that falls with compute "
            "(val/loss, val/ppl), not a metric that rises"
        )
    scale_key = sweep.full_name(scale_key)
    if scale_key not in sweep.axes:
        raise ValueError(
            f"--scale-key {scale_key} is not an axis of {sweep.source}; its axes are {', '.join(sweep.axes) or 'none'}"
        )
    others = [a for a in sweep.axes if a != scale_key and a not in per_point]
    names = sweep.short_names()
    curves: dict[tuple, Curve] = {}
    for job in sweep.jobs:
        key = tuple(job.value(a) for a in others)
        label = ", ".join(f"{names[a]}={v}" for a, v in zip(others, key)) or "all jobs"
        curve = curves.setdefault(key, Curve(label, dict(zip(others, key))))
        scale, loss = str(job.value(scale_key)), job.final(metric)
        if job.status != "completed" or not math.isfinite(loss):
            curve.failed.setdefault(scale, []).append(job.status)
            continue
        curve.scale.append(scale)
        curve.compute.append(job_compute(job, flops))
        curve.loss.append(loss)
        curve.seed.append(job.seed)
    return list(curves.values())


def find_curve(curves: list[Curve], spec: str, short_names: dict[str, str]) -> Curve:
    """The one curve whose axes match ``spec`` (``"act=gelu"``; axes by full or short name)."""
    wanted = parse_baseline(spec)
    full = {short: axis for axis, short in short_names.items()}
    matches = [c for c in curves if all(c.axes.get(full.get(k, k), "\0") == v for k, v in wanted.items())]
    if len(matches) != 1:
        found = "no curve" if not matches else f"{len(matches)} curves"
        raise ValueError(
            f"--baseline {spec}: matches {found}; the curves (the axes other than the scale key) are: "
            + "; ".join(c.label for c in curves)
        )
    return matches[0]
