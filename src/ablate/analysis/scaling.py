"""Effective compute multiplier: how much training compute a variant is worth, from loss-vs-compute curves.

Each variant is trained at several sizes (the *scale* axis of the sweep, e.g. ``model=tiny,small,base``
or ``model.d_model=64,128,256``) with several seeds. Per variant, the final loss against the
training compute C is fitted with a saturating power law (Kaplan et al. 2020; Hoffmann et al.
2022, Eq. 2, in compute only)::

    L(C) = E + A * C^(-alpha)          (E: irreducible loss, the asymptote; alpha > 0)

by least squares over every (scale, seed) point (``scipy.optimize.curve_fit``, trust-region
reflective with bounds 0 <= E <= min L, A > 0, 0.001 <= alpha <= 5), in log-compute
(x = ln(C / C0), C0 the geometric mean of the compute, so that A and alpha are well conditioned),
started from the best of a grid of E values with (A, alpha) from a straight-line fit of
ln(L - E) against x.

The **effective compute multiplier** of a variant over the baseline at compute C: the compute the
baseline needs to reach the variant's (fitted) loss at C, divided by C::

    m(C) = C_b / C,   C_b = (A_b / (L_v(C) - E_b))^(1/alpha_b)

reported at the largest compute the variant was measured at (a multiplier of 2 means the change
is worth doubling the compute there; it varies with C unless the two alphas agree). When the
variant's loss is at or below the baseline's asymptote E_b no amount of compute gets the baseline
there: the multiplier is infinite, and reported as such. A power law with three parameters needs
at least three scales per curve.

Confidence interval: a percentile bootstrap over seeds (Efron & Tibshirani 1993, ch. 13): in each
of ``n_boot`` replicates the seeds of each scale of each curve are resampled with replacement
(a plain numpy loop with a fixed ``numpy.random.default_rng(seed)``: reproducible), both curves
refitted and the multiplier recomputed; the interval is the (alpha/2, 1 - alpha/2) quantiles of
the replicates (an actual replicate each, so an infinite one is kept as infinite). Replicates whose
fit fails are counted, not hidden.

Compute per job (:func:`job_compute`): training FLOPs per token times tokens seen, tokens =
optimiser steps x ``data.batch_size`` (sequences per step, all devices) x ``data.seq_len`` for a
language model; for translation ``data.batch_size`` x ``data.max_tokens`` (the padded token
budget of a batch, an upper bound). FLOPs per token: ``6N+attn`` (default) is
:func:`ablate.flops.flops_per_token`, 6 N + 12 L d T (the same count as
``train/mfu``), ``6N`` is Kaplan et al.'s C = 6 N D; N = ``params`` of ``status.json`` (all
parameters, embeddings included).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import optimize

from ablate.analysis.runs import Job, Sweep, higher_is_better
from ablate.analysis.tables import parse_baseline

FLOPS = ("6N+attn", "6N")
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


def _initial(x: np.ndarray, loss: np.ndarray) -> tuple[float, float, float]:
    """(E, a, alpha) from a grid of E below min L, each with a line fit of ln(L - E) = ln a - alpha x."""
    best, start = math.inf, (0.0, float(loss.mean()), 0.3)
    for E in np.min(loss) * np.array([0.0, 0.25, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98]):
        slope, intercept = np.polyfit(x, np.log(loss - E), 1)
        alpha = float(np.clip(-slope, *_ALPHA_BOUNDS))
        sse = float(np.sum((E + np.exp(intercept - alpha * x) - loss) ** 2))
        if sse < best:
            best, start = sse, (float(E), float(np.exp(intercept)), alpha)
    return start


def fit_power_law(compute: np.ndarray, loss: np.ndarray) -> PowerLaw:
    """Least-squares fit of L = E + A C^(-alpha) (module docstring). Needs >= 3 distinct computes."""
    compute, loss = np.asarray(compute, dtype=float), np.asarray(loss, dtype=float)
    if len(np.unique(compute)) < MIN_SCALES:
        raise ValueError(f"a saturating power law has 3 parameters (E, A, alpha): it needs >= {MIN_SCALES} "
                         f"compute scales, got {len(np.unique(compute))}")
    c0 = float(np.exp(np.mean(np.log(compute))))
    x = np.log(compute / c0)
    start = _initial(x, loss)
    low, high = (0.0, 1e-12, _ALPHA_BOUNDS[0]), (float(loss.min()), np.inf, _ALPHA_BOUNDS[1])
    start = tuple(float(np.clip(s, lo, hi)) for s, lo, hi in zip(start, low, high))
    with warnings.catch_warnings():
        # three scales and three parameters: an exact fit, whose covariance is undefined; it is not used
        warnings.simplefilter("ignore", optimize.OptimizeWarning)
        params, _ = optimize.curve_fit(lambda x, E, a, alpha: E + a * np.exp(-alpha * x), x, loss, p0=start,
                                       bounds=(low, high), method="trf", maxfev=10000)
    return PowerLaw(float(params[0]), float(params[1]), float(params[2]), c0)


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

    def scales(self) -> list[str]:
        return list(dict.fromkeys(self.scale))

    def check(self) -> None:
        if len(self.scales()) < MIN_SCALES:
            raise ValueError(f"{self.label}: {len(self.scales())} scale(s) with a final loss "
                             f"({', '.join(self.scales()) or 'none'}); a saturating power law L = E + A C^-alpha "
                             f"has 3 parameters, so it needs >= {MIN_SCALES} scales")

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
                out.scale.append(name), out.compute.append(self.compute[i]), out.loss.append(self.loss[i])
        return out


@dataclass(frozen=True)
class Multiplier:
    """The multiplier of ``variant`` over ``baseline`` at ``compute`` with its bootstrap interval."""

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


def bootstrap(variant: Curve, baseline: Curve, compute: float, n_boot: int = 1000, seed: int = 0,
              confidence: float = 0.95) -> tuple[float, float, int]:
    """Percentile bootstrap interval of the multiplier at ``compute`` (module docstring), and the
    number of replicates whose fit failed (left out of the quantiles)."""
    rng = np.random.default_rng(seed)
    values, failed = [], 0
    for _ in range(n_boot):
        try:
            values.append(multiplier(variant.resample(rng).fit(), baseline.resample(rng).fit(), compute))
        except (RuntimeError, ValueError):  # curve_fit did not converge, or a degenerate resample
            failed += 1
    if not values:
        return math.nan, math.nan, failed
    tail = (1 - confidence) / 2
    low, high = np.quantile(np.array(values), [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high), failed


def compute_multiplier(variant: Curve, baseline: Curve, n_boot: int = 1000, seed: int = 0,
                       confidence: float = 0.95) -> Multiplier:
    """The multiplier at the variant's largest measured compute, with its bootstrap interval."""
    variant_fit, baseline_fit = variant.fit(), baseline.fit()
    at = float(max(variant.compute))
    low, high, failed = bootstrap(variant, baseline, at, n_boot, seed, confidence) if n_boot else (math.nan, math.nan, 0)
    return Multiplier(variant.label, baseline.label, at, float(variant_fit.loss(at)),
                      multiplier(variant_fit, baseline_fit, at), low, high, n_boot, failed, variant_fit, baseline_fit)


# ----------------------------------------------------------------------------- from a sweep


def _number(job: Job, key: str) -> float:
    value = job.value(key)
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{job.source}: {key} = {value!r} in its config, not a number: cannot count its "
                         "training compute") from None


def tokens_seen(job: Job) -> float:
    """Optimiser steps x tokens per step (module docstring)."""
    per_step = _number(job, "data.max_tokens") if job.task == "translation" else _number(job, "data.seq_len")
    return float(job.record.get("steps") or 0) * _number(job, "data.batch_size") * per_step


def _layers(job: Job) -> float:
    """All Transformer layers (decoder, plus encoder for translation), as ``ModelSpec`` counts them."""
    decoder = "model.n_layers" if job.value("model.n_layers") not in (None, "null") else "model.decoder_layers"
    encoder = job.value("model.encoder_layers")
    return _number(job, decoder) + (float(encoder) if encoder not in (None, "null") else 0.0)


def job_compute(job: Job, flops: str = "6N+attn") -> float:
    """Training FLOPs of ``job``: FLOPs per token (``6N+attn`` or ``6N``) x :func:`tokens_seen`."""
    if job.record.get("params") is None:
        raise ValueError(f"{job.source}: status.json has no `params`: cannot count its training compute")
    params = float(job.record["params"])
    if flops == "6N":
        per_token = 6 * params
    elif flops == "6N+attn":
        from ablate.analysis.budget import (
            job_flops_per_token,  # budget imports this module
        )

        per_token = job_flops_per_token(job)
    else:
        raise ValueError(f"flops={flops!r}: use one of {', '.join(FLOPS)}")
    return per_token * tokens_seen(job)


def scaling_curves(sweep: Sweep, scale_key: str, metric: str = "val/loss", flops: str = "6N+attn",
                   per_point: Sequence[str] = ()) -> list[Curve]:
    """One :class:`Curve` per combination of the sweep's other axes (a variant), in run order, its
    points the completed jobs' final ``metric`` against :func:`job_compute`. Axes in ``per_point``
    belong to a point, not to a variant: a ``tune=lr`` sweep's ``optim.lr``, tuned at each scale,
    so one variant's curve joins its best rate at every size."""
    if higher_is_better(metric):
        raise ValueError(f"--metric {metric}: the fit L = E + A C^-alpha is for a loss that falls with compute "
                         "(val/loss, val/ppl), not a metric that rises")
    full = {short: axis for axis, short in sweep.short_names().items()}
    scale_key = full.get(scale_key, scale_key)
    if scale_key not in sweep.axes:
        raise ValueError(f"--scale-key {scale_key} is not an axis of {sweep.source}; "
                         f"its axes are {', '.join(sweep.axes) or 'none'}")
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
        curve.scale.append(scale), curve.compute.append(job_compute(job, flops)), curve.loss.append(loss)
    return list(curves.values())


def find_curve(curves: list[Curve], spec: str, short_names: dict[str, str]) -> Curve:
    """The one curve whose axes match ``spec`` (``"act=gelu"``; axes by full or short name)."""
    wanted = parse_baseline(spec)
    full = {short: axis for axis, short in short_names.items()}
    matches = [c for c in curves if all(c.axes.get(full.get(k, k), "\0") == v for k, v in wanted.items())]
    if len(matches) != 1:
        found = "no curve" if not matches else f"{len(matches)} curves"
        raise ValueError(f"--baseline {spec}: matches {found}; the curves (the axes other than the scale key) are: "
                         + "; ".join(c.label for c in curves))
    return matches[0]
