"""Re-simulation of the verdict machinery: does each verdict keep its promise?

Our own code, checked by simulating sweeps whose truth is known and running the same functions the
tables run (:mod:`ablate.analysis.crossed`, :func:`ablate.analysis.stats.family_adjusted`,
:func:`ablate.analysis.stats.seeds_for`):

* :func:`coverage`: how often the 95% interval of the crossed seed x block analysis covers the
  true mean difference, for 2/3/5 seeds x 4/8 held-out blocks x text/seed SD 0.3/1/3/6, the text
  effects at *block* level (each block cut into runs of windows that share its passage); beside
  it the old analysis (runs of windows inside the blocks as the text unit: pseudo-replicated) and
  the seed-only paired t (text fixed);
* :func:`level_ratios`: the crossed test's false-positive rate over its nominal level, at alpha 5%
  and at the small levels of Holm's first steps, where Satterthwaite's df are least exact;
* :func:`fixed_rates`: the fixed design's false better/worse rate and its power at the minimum
  detectable effect (:func:`mde_fixed`), and whether the planner's seed count
  (:func:`ablate.analysis.stats.seeds_for`) reaches its promised power (:func:`planner_power`);
  :func:`divergence_rates`: the same with one diverged seed in ten (the worst-rank test);
* :func:`family_rates`: the family-wise error of the old two Holm families, of testing
  equivalence only where the difference was not rejected (Holm then Holm), and of the one
  procedure the tables use, in the configurations where they differ most.

``python -m benchmarks.verdicts.simulate`` prints them (the numbers in ``benchmarks/verdicts/README.md``);
``tests/benchmark/test_verdicts.py`` runs each at a small size.

The model of one comparison (variant - baseline), per seed s, held-out block b and run of
windows r inside it: d = Δ + a[s] + B[b] + R[b, r] + e[s, b, r], a ~ N(0, σ_seed²),
B ~ N(0, σ_text²), R ~ N(0, (σ_text/2)²) (the passage inside a block), e ~ N(0, σ_error²).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import optimize
from scipy import stats as scipy_stats

from ablate.analysis.crossed import anova, t_tests
from ablate.analysis.divergence import rank_sum_distribution
from ablate.analysis.stats import family_adjusted, holm, seeds_for

RUNS_PER_BLOCK = 4  # the old text unit: 4 runs of windows inside each held-out block
SD_SEED, SD_ERROR = 1.0, 0.5


def _covered(mean: np.ndarray, var: np.ndarray, df: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.abs(mean) <= scipy_stats.t.ppf(0.975, df) * np.sqrt(var)


def simulate_runs(
    rng: np.random.Generator, sims: int, seeds: int, blocks: int, sd_text: float, sd_seed: float = SD_SEED
) -> np.ndarray:
    """``sims`` sweeps of d with Δ = 0 (the model in the module docstring), (sims, seeds, blocks, runs)."""
    shape = (sims, seeds, blocks, RUNS_PER_BLOCK)
    return (
        rng.normal(0, sd_seed, (sims, seeds, 1, 1))
        + rng.normal(0, sd_text, (sims, 1, blocks, 1))
        + rng.normal(0, sd_text / 2, (sims, 1, blocks, RUNS_PER_BLOCK))
        + rng.normal(0, SD_ERROR, shape)
    )


def crossed_noise(rng: np.random.Generator, sims: int, seeds: int, blocks: int, sd_text: float) -> np.ndarray:
    """``sims`` sweeps of d - Δ on the crossed model at block level (seed, block and interaction
    effects, no runs inside the blocks), (sims, seeds, blocks): what the crossed test reads."""
    return (
        rng.normal(0, SD_SEED, (sims, seeds, 1))
        + rng.normal(0, sd_text, (sims, 1, blocks))
        + rng.normal(0, SD_ERROR, (sims, seeds, blocks))
    )


def coverage(seeds: int, blocks: int, ratio: float, sims: int, rng: np.random.Generator) -> dict[str, float]:
    """Coverage of the 95% interval of the mean difference (text SD = ``ratio`` x seed SD): the
    crossed analysis with the held-out block as the text unit (what the tables do), the old one
    with runs inside blocks as units, and the seed-only paired t."""
    d = simulate_runs(rng, sims, seeds, blocks, ratio)
    mean, var, df, *_ = anova(d.mean(-1))
    runs = d.reshape(sims, seeds, blocks * RUNS_PER_BLOCK)
    mean_r, var_r, df_r, *_ = anova(runs)
    per_seed = d.mean((-2, -1))
    seed_var = per_seed.var(-1, ddof=1) / seeds
    return {
        "blocks": float(_covered(mean, var, df).mean()),
        "runs in blocks (old)": float(_covered(mean_r, var_r, df_r).mean()),
        "seed only": float(_covered(per_seed.mean(-1), seed_var, np.full(sims, seeds - 1.0)).mean()),
    }


def level_ratios(
    seeds: int, blocks: int, sd_text: float, alphas: Sequence[float], sims: int, rng: np.random.Generator
) -> list[float]:
    """The crossed test's false-positive rate over its nominal level (1: exact), at each of
    ``alphas`` (alpha, and the thresholds Holm's first steps apply), Δ = 0 and text effects
    at block level. Satterthwaite's df are estimated: where one mean square with few df dominates,
    the estimate runs high exactly when that mean square is small, and the error grows into the tail."""
    hits, done = np.zeros(len(alphas)), 0
    while done < sims:
        chunk = min(50_000, sims - done)
        mean, var, df, *_ = anova(simulate_runs(rng, chunk, seeds, blocks, sd_text).mean(-1))
        p = t_tests(mean, var, df)[0]
        hits += [(p <= a).sum() for a in alphas]
        done += chunk
    return [float(h / sims / a) for h, a in zip(hits, alphas, strict=True)]


BETTER, WORSE, EQUIVALENT, INCONCLUSIVE = 1, 2, 3, 4
NAMES = {BETTER: "better", WORSE: "worse", EQUIVALENT: "equivalent", INCONCLUSIVE: "inconclusive"}


@dataclass(frozen=True)
class Design:
    """A fixed design on the crossed model: seeds, blocks, the text SD (seed SD 1), the margin (in
    units of the MDE) and alpha."""

    seeds: int = 10
    blocks: int = 4
    sd_text: float = 1.0
    margin_mdes: float = 0.5  # δ as a fraction of the MDE
    alpha: float = 0.05


def fixed_codes(z: np.ndarray, margin: float, alpha: float) -> np.ndarray:
    """The verdict code of each simulated sweep ``z`` (..., seeds, blocks; lower is better): the
    crossed test (the paired t on one block) at ``alpha``, else TOST at ``alpha``, else inconclusive."""
    mean, var, df, *_ = anova(z)
    p, p_tost = t_tests(mean, var, df, margin)
    with np.errstate(invalid="ignore"):
        different, equivalent = p <= alpha, p_tost <= alpha
    return np.where(different, np.where(mean > 0, WORSE, BETTER), np.where(equivalent, EQUIVALENT, INCONCLUSIVE))


def mde_fixed(design: Design, sims: int, rng: np.random.Generator, power: float = 0.8) -> float:
    """The minimum detectable effect of the fixed design: the true Δ its crossed test detects with
    ``power`` when its critical p-value is the one that makes its false-positive rate exactly alpha
    (the crossed t-test is a little liberal or conservative depending on the variance components;
    calibrating it gives an honest yardstick). Simulated with common random numbers, solved by bisection."""
    noise = crossed_noise(rng, sims, design.seeds, design.blocks, design.sd_text)
    _, var, df, *_ = anova(noise)
    base = noise.mean((-2, -1))
    critical = float(np.quantile(t_tests(base, var, df)[0], design.alpha))

    def found(delta: float) -> float:
        p, _ = t_tests(base + delta, var, df)
        return float((p <= critical).mean()) - power

    high = 1.0
    while found(high) < 0:
        high *= 2
    return float(optimize.brentq(found, 0.0, high, xtol=1e-4))


def fixed_rates(design: Design, delta: float, mde: float, sims: int, rng: np.random.Generator) -> dict[str, float]:
    """One true Δ: P(better), P(worse), P(equivalent), P(inconclusive) of the fixed design at its nominal alpha."""
    z = delta + crossed_noise(rng, sims, design.seeds, design.blocks, design.sd_text)
    code = fixed_codes(z, design.margin_mdes * mde, design.alpha)
    return {name: float((code == c).mean()) for c, name in NAMES.items()}


def planner_power(design: Design, delta: float, sims: int, rng: np.random.Generator) -> tuple[int | None, float]:
    """The planner's promise kept? From one pilot of the design (its seeds), the seeds
    :func:`ablate.analysis.stats.seeds_for` says detect ``delta`` with 80% power, and the power a
    fixed design with that many seeds then has (simulated at the true components)."""
    pilot = crossed_noise(rng, 1, design.seeds, design.blocks, design.sd_text)[0]
    _, _, _, ms_s, ms_t, _ = (float(x) for x in anova(pilot))
    n_s, n_t = design.seeds, design.blocks
    seed_se = math.sqrt(ms_s / (n_s * n_t))  # the table's seed SE and text SE (ablate.analysis.crossed)
    text_se = math.sqrt(ms_t / (n_s * n_t)) if n_t > 1 else 0.0
    n = seeds_for(delta, seed_se, text_se, n_s, n_t, design.alpha)
    if n is None:
        return None, math.nan
    z = delta + crossed_noise(rng, sims, n, n_t, design.sd_text)
    return n, float(np.isin(fixed_codes(z, 1e-9, design.alpha), (BETTER, WORSE)).mean())


def _rank_p(ranks_sum_doubled: np.ndarray, n: int) -> np.ndarray:
    """Two-sided exact p of the variant's (doubled) rank sum, n vs n seeds, no ties."""
    counts = rank_sum_distribution(np.arange(1, 2 * n + 1), n)
    sums = np.array(sorted(counts))
    freq = np.array([counts[s] for s in sums], dtype=float)
    cdf, sf = np.cumsum(freq) / freq.sum(), np.cumsum(freq[::-1])[::-1] / freq.sum()
    i = np.searchsorted(sums, ranks_sum_doubled)
    return np.minimum(1.0, 2 * np.minimum(cdf[i], sf[i]))


def divergence_rates(design: Design, delta: float, sims: int, rng: np.random.Generator) -> dict[str, float]:
    """One diverged variant seed of the design's (at a random place): the worst-rank test (the
    diverged run ranked worst, exact p) on the seeds' final values, each arm's final value varying
    between seeds as much as the difference does. Returns P(better), P(worse), P(neither)."""
    n = design.seeds
    z = delta + crossed_noise(rng, sims, n, design.blocks, design.sd_text)
    arm_sd = float(np.sqrt(SD_SEED**2 + SD_ERROR**2 / design.blocks))
    baseline = rng.normal(0, arm_sd, (sims, n))
    variant = baseline + z.mean(-1)
    where = rng.integers(0, n, sims)  # the diverged seed's place
    v = np.where(np.arange(n)[None, :] == where[:, None], np.inf, variant)
    ranks = scipy_stats.rankdata(np.concatenate([v, baseline], axis=1), axis=1)
    p = _rank_p(np.rint(2 * ranks[:, :n].sum(1)).astype(int), n)
    worse = ranks[:, :n].mean(1) > ranks[:, n:].mean(1)
    different = p <= design.alpha
    return {
        "better": float((different & ~worse).mean()),
        "worse": float((different & worse).mean()),
        "neither": float((~different).mean()),
    }


def family_rates(m: int, ratio: float, sims: int, rng: np.random.Generator, alpha: float = 0.05) -> dict[str, float]:
    """Family-wise error over m rows (half with Δ = 0, half with |Δ| = δ: each row's one true
    null), normal tests with δ = ``ratio`` standard errors: the old two Holm families, Holm on the
    differences then Holm on the equivalence of the rows not found different, and
    :func:`~ablate.analysis.stats.family_adjusted` (what the tables use)."""
    delta = np.where(np.arange(m) < m // 2, 0.0, 1.0)  # in units of δ
    est = delta * ratio + rng.normal(0, 1, (sims, m))  # in units of the standard error
    p0 = 2 * scipy_stats.norm.sf(np.abs(est))
    p_tost = np.maximum(scipy_stats.norm.sf(est + ratio), scipy_stats.norm.cdf(est - ratio))
    null0, null_e = delta == 0, delta == 1

    def errors(diff: np.ndarray, equiv: np.ndarray) -> float:
        return float(((diff & null0) | (equiv & null_e)).any(-1).mean())

    diff_holm = holm(p0) < alpha
    old = errors(diff_holm, holm(p_tost) < alpha)
    rest = np.where(diff_holm, np.nan, p_tost)
    hierarchical = errors(diff_holm, holm(rest) < alpha)
    a0, ae = family_adjusted(p0, p_tost)
    return {
        "two Holm families (old)": old,
        "Holm, then Holm on the rest": hierarchical,
        "one family (now)": errors(a0 < alpha, ae < alpha),
    }


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%" if math.isfinite(x) else "—"
