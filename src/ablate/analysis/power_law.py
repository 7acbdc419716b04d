"""The saturating power law L(C) = E + A * C^(-alpha) of loss against compute (Kaplan et al. 2020;
Hoffmann et al. 2022, Eq. 2), 0 <= E <= min L, A > 0, 0.001 <= alpha <= 5, in x = ln(C / C0) (C0
the geometric mean), fitted by *variable projection* (Golub & Pereyra 1973): for a given alpha the
model is linear in (E, a), so the least squares is a one-dimensional search over alpha, vectorised
over many data sets (a bootstrap refits thousands of curves in well under a second).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

MIN_SCALES = 3
_ALPHA_BOUNDS = (1e-3, 5.0)


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
        try:  # past the largest float (a flat curve, alpha near 0): infinite, without numpy's overflow warning
            return self.c0 * math.exp(math.log(self.a / (loss - self.E)) / self.alpha)
        except OverflowError:
            return math.inf


_AMIN = 1e-12
_GRID = np.geomspace(_ALPHA_BOUNDS[0], _ALPHA_BOUNDS[1], 81)
_GOLDEN = (math.sqrt(5) - 1) / 2


def _linear_part(
    x: np.ndarray, y: np.ndarray, w: np.ndarray, alpha: np.ndarray, e_fixed: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each alpha (broadcast with the leading shape of ``y``/``w``), the weighted least-squares
    (E, a) of y = E + a exp(-alpha x) within 0 <= E <= min y, a >= 1e-12 (the interior solution if
    feasible, else the best on the box's edges), and the SSE. ``e_fixed``: E given, a only."""
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
    """Golden-section search in ``[lo, hi]``, elementwise over arrays (``scipy.optimize.golden``: a scalar)."""
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
    """(E, a, alpha, SSE) minimising the SSE over alpha: the grid, then golden section in log alpha."""
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
    """Weighted least-squares fits, one per row of ``losses`` (R x n at the common ``compute``)."""
    compute = np.asarray(compute, dtype=float)
    y = np.atleast_2d(np.asarray(losses, dtype=float))
    w = np.ones_like(y) if weights is None else np.atleast_2d(np.asarray(weights, dtype=float))
    c0 = float(np.exp(np.mean(np.log(compute)))) if c0 is None else c0
    E, a, alpha, _ = _profile(np.log(compute / c0), y, w)
    return [PowerLaw(float(e), float(b), float(al), c0) for e, b, al in zip(E, a, alpha, strict=True)]


def fit_shared_asymptote(
    curves: Sequence[tuple[np.ndarray, np.ndarray]], weights: Sequence[np.ndarray] | None = None, iterations: int = 40
) -> list[list[PowerLaw]]:
    """Curves sharing their asymptote E, each its own A and alpha: per curve its R fits."""
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
