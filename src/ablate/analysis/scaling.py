"""Effective compute multiplier: how much training compute a variant is worth. Per variant, the
final loss of each (scale, seed) job against training compute C is fitted with L(C) = E + A
C^(-alpha) (Kaplan et al. 2020; Hoffmann et al. 2022, Eq. 2; :mod:`~ablate.analysis.power_law`);
the multiplier at C is the compute the baseline needs to reach the variant's fitted loss over C::

    m(C) = C_b / C,   C_b = (A_b / (L_v(C) - E_b))^(1/alpha_b)

at the variant's largest measured compute (infinite at or below E_b). Interval: a percentile
bootstrap of the whole pipeline (Efron & Tibshirani 1993, ch. 13 and 6.5). ``parametric`` draws
noise around the fits with each curve's pooled seed-to-seed sd, redrawn as s·sqrt(df / chi2_df)
so that an sd from 3 seeds widens it as a t quantile would (3 scales leave the fit no residual
df); ``seeds`` resamples the seeds jointly (3 seeds: 10 distinct resamples, hence not the
default). At 3 sizes x 3 seeds the parametric 95% interval covers >= 93% (tests/analysis/test_stats.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ablate.analysis.power_law import MIN_SCALES, PowerLaw, fit_power_law, fit_power_laws, fit_shared_asymptote


def multiplier(variant: PowerLaw, baseline: PowerLaw, compute: float) -> float:
    """The baseline's compute to reach the variant's fitted loss at ``compute``, over ``compute``."""
    return baseline.compute_for(float(variant.loss(compute))) / compute


@dataclass
class Curve:
    """The (scale, seed) points of one variant, and the statuses of its jobs without a final value."""

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

    def noise_sd(self) -> tuple[float, int]:
        """The seed-to-seed sd pooled over the scales and its df; (NaN, 0) with one seed per scale."""
        scale, loss = np.array(self.scale), np.array(self.loss, dtype=float)
        ss, df = 0.0, 0
        for name in self.scales():
            values = loss[scale == name]
            ss += float(((values - values.mean()) ** 2).sum())
            df += len(values) - 1
        return (math.sqrt(ss / df), df) if df else (math.nan, 0)


@dataclass(frozen=True)
class Multiplier:
    """The multiplier of ``variant`` over ``baseline`` at ``compute``, its interval and extrapolation."""

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
    method: str = "parametric",
    shared_E: bool = False,
    fits: tuple[PowerLaw, PowerLaw] | None = None,
) -> tuple[float, float, int]:
    """Percentile 95% bootstrap interval of the multiplier at ``compute``, and how many fits failed."""
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
    tail = (1 - 0.95) / 2  # the 95% interval's two tails
    low, high = np.quantile(np.array(values), [tail, 1 - tail], method="inverted_cdf")
    return float(low), float(high), failed


def extrapolation(value: float, high: float, compute: float, baseline: Curve) -> str:
    """Why the multiplier (or its interval) needs the baseline's law beyond its measured computes, or ``""``."""
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
    method: str = "parametric",
    shared_E: bool = False,
) -> Multiplier:
    """The multiplier at the variant's largest measured compute, its interval and extrapolation flag."""
    variant_fit, baseline_fit = fit_pair(variant, baseline, shared_E)
    at = float(max(variant.compute))
    low, high, failed = (
        bootstrap(variant, baseline, at, n_boot, seed, method, shared_E, (variant_fit, baseline_fit))
        if n_boot
        else (math.nan, math.nan, 0)
    )
    value, loss = multiplier(variant_fit, baseline_fit, at), float(variant_fit.loss(at))
    fits = (variant_fit, baseline_fit)
    flag = extrapolation(value, high, at, baseline)
    return Multiplier(
        variant.label, baseline.label, at, loss, value, low, high, n_boot, failed, *fits, method, shared_E, flag
    )
