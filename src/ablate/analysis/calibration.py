"""Re-simulation of the verdict machinery (issue 43 item 6): does each verdict keep its promise?

Our own code, checked by simulating sweeps whose truth is known and running the same functions the
tables run (:mod:`ablate.analysis.crossed`, :mod:`ablate.analysis.engine`,
:func:`ablate.analysis.stats.family_adjusted`):

* :func:`coverage`: how often the 95% interval of the crossed seed x block analysis covers the
  true mean difference, for 2/3/5 seeds x 4/8 held-out blocks x text/seed SD 0.3/1/3/6, the text
  effects at *block* level (each block cut into runs of windows that share its passage); beside
  it the old analysis (runs of windows inside the blocks as the text unit: pseudo-replicated) and
  the seed-only paired t (text fixed);
* :func:`level_ratios`: the crossed test's false-positive rate at small nominal levels (the
  thresholds of the early looks and of Holm's first steps), where Satterthwaite's df are least exact;
* :func:`sequential_rates`: the group-sequential design's false better/worse rate, power at the
  fixed design's minimum detectable effect (:func:`mde_fixed`), E[seeds] and the bias of the
  estimate at stopping, raw and adjusted (:func:`bias`); :func:`divergence_rates`: the same with
  one diverged seed in ten (the worst-rank test at every look that holds it);
* :func:`exact_test_rates`: what the sequential rule would give with an exact test, with the
  levels of the design's own joint law (the looks share the held-out blocks), and with those
  levels at estimated variance components (why the power at the MDE falls short where the crossed
  test is conservative, and what a fix needs);
* :func:`family_rates`: the family-wise error of the old two Holm families, of testing
  equivalence only where the difference was not rejected (Holm then Holm), and of the one
  procedure the tables use, in the configurations where they differ most.

``scripts/simulate_verdicts.py`` prints them (the numbers in docs/analysis.md);
``tests/analysis/test_crossed.py`` and ``test_engine.py`` run each at a small size.

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

from ablate.analysis import engine
from ablate.analysis import sequential as seq
from ablate.analysis.crossed import anova, t_tests
from ablate.analysis.divergence import rank_sum_distribution
from ablate.analysis.engine import conditional_means, invert, nominal_levels, sequential_codes, simulate_design
from ablate.analysis.stats import family_adjusted, holm

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
    effects, no runs inside the blocks), (sims, seeds, blocks): what the sequential design reads."""
    return engine.crossed_noise(rng, sims, seeds, blocks, SD_SEED, sd_text, SD_ERROR)


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
    ``alphas`` (the thresholds the sequential looks and Holm's steps apply), Δ = 0 and text effects
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


@dataclass(frozen=True)
class Design:
    """A group-sequential design on the crossed model: looks (seeds), blocks, the SDs, margin (in
    units of the MDE), alpha and spending."""

    looks: tuple[int, ...] = (3, 5, 7, 10)
    blocks: int = 4
    sd_text: float = 1.0
    margin_mdes: float = 0.5  # δ as a fraction of the MDE (the old test's choice)
    alpha: float = 0.05
    spending: str = seq.DEFAULT_SPENDING

    def simulate(self, delta, margin: float, sims: int, rng: np.random.Generator):
        return simulate_design(
            delta,
            SD_SEED,
            self.sd_text,
            SD_ERROR,
            self.blocks,
            self.looks,
            margin,
            self.alpha,
            self.spending,
            False,
            sims,
            rng,
        )


def mde_fixed(design: Design, sims: int, rng: np.random.Generator, power: float = 0.8) -> float:
    """The minimum detectable effect of the fixed design (every seed of the last look, one crossed
    test): the true Δ it detects with ``power`` when its critical p-value is the one that makes
    its false-positive rate exactly alpha (the crossed t-test is a little liberal or conservative
    depending on the variance components; calibrating it compares the sequential design with an
    honest fixed one). Simulated with common random numbers, solved by bisection."""
    n = design.looks[-1]
    noise = crossed_noise(rng, sims, n, design.blocks, design.sd_text)
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


def sequential_rates(design: Design, delta: float, mde: float, sims: int, rng: np.random.Generator) -> dict[str, float]:
    """One true Δ: P(better), P(worse), P(equivalent), P(inconclusive), E[seeds] and the mean
    estimate at stopping."""
    code, look, estimate = design.simulate(delta, design.margin_mdes * mde, sims, rng)
    code, look, estimate = code[0], look[0], estimate[0]
    seeds = np.asarray(design.looks)[look]
    out = {seq.NAMES[c]: float((code == c).mean()) for c in (seq.BETTER, seq.WORSE, seq.EQUIVALENT, seq.INCONCLUSIVE)}
    out["E[seeds]"] = float(seeds.mean())
    out["mean estimate"] = float(estimate.mean())
    return out


RATIO_GRID = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 15.0)  # text/seed SD


def look_statistics(z: np.ndarray, looks: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """Each look's crossed p-value and its observed text/seed SD ratio (the variance components
    its mean squares estimate, negative ones set to 0), each (paths, looks), from ``z`` (paths,
    n_max, blocks)."""
    p, ratio = [], []
    for n in looks:
        mean, var, df, ms_s, ms_t, ms_e = anova(z[:, :n, :])
        p.append(t_tests(mean, var, df)[0])
        text = np.maximum(ms_t - ms_e, 0.0) / n
        seed = np.maximum(ms_s - ms_e, 1e-12) / z.shape[-1]
        ratio.append(np.sqrt(text / seed))
    return np.stack(p, 1), np.stack(ratio, 1)


def spending_thresholds(null_p: np.ndarray, increments: np.ndarray) -> np.ndarray:
    """The threshold on each look's p-value at which a null sweep first rejects there with
    probability ``increments[k]`` (the error spent between look k-1 and k), from the p-values of
    null sweeps (paths, looks): the looks' levels for this design's own joint law, however
    correlated its looks are and however exact each look's test is."""
    alive = np.ones(len(null_p), dtype=bool)
    out = []
    for k, spend in enumerate(increments):
        count = round(float(spend) * len(null_p))
        level = float(np.sort(null_p[alive, k])[count - 1]) if count > 0 else 0.0
        out.append(level)
        alive &= null_p[:, k] > level
    return np.array(out)


def exact_test_rates(design: Design, mde: float, sims: int, rng: np.random.Generator) -> dict[str, tuple[float, float]]:
    """What the sequential rule's error and power would be with a better test (difference test
    only, no TOST), as (false better/worse, power at ``mde``):

    * the crossed (Satterthwaite) p-value at the paired t's levels (:func:`~ablate.analysis.engine.nominal_levels`,
      what the engine does);
    * each look's test made exact (its p-value calibrated on null sweeps at the *true* variance
      components), at the same levels;
    * the p-value at the levels of this design's own joint law (:func:`spending_thresholds` on
      null sweeps at the true components; the same as an exact test at the exact levels): the looks
      share the held-out blocks, so they are more correlated than the paired t's;
    * the same levels read off a grid of text/seed SD (:data:`RATIO_GRID`, the interaction SD
      known) at each look's *estimated* ratio: what a rule that knows no component could do at best
      by plugging in its estimates."""
    looks, n_max = design.looks, design.looks[-1]
    increments = np.diff(seq.spent(np.asarray(looks) / n_max, design.alpha, design.spending), prepend=0.0)
    paired, _ = nominal_levels(looks, design.alpha, design.spending)
    null_p, _ = look_statistics(crossed_noise(rng, sims, n_max, design.blocks, design.sd_text), looks)
    own = spending_thresholds(null_p, increments)
    reference = np.sort(null_p, axis=0)
    grid = np.array(
        [
            spending_thresholds(
                look_statistics(crossed_noise(rng, sims, n_max, design.blocks, r), looks)[0], increments
            )
            for r in RATIO_GRID
        ]
    )
    x = np.log(np.asarray(RATIO_GRID) + 0.05)
    noise = crossed_noise(rng, sims, n_max, design.blocks, design.sd_text)
    rates: dict[str, list[float]] = {}
    for delta in (0.0, mde):
        p, ratio = look_statistics(noise + delta, looks)
        exact = np.stack([np.searchsorted(reference[:, k], p[:, k], side="right") / sims for k in range(len(looks))], 1)
        plugged = np.stack([np.interp(np.log(ratio[:, k] + 0.05), x, grid[:, k]) for k in range(len(looks))], 1)
        for name, rejected in (
            ("crossed test, paired-t levels (now)", p <= paired),
            ("exact test, paired-t levels", exact <= paired),
            ("the design's own levels, components known", p <= own),
            ("the design's own levels, components estimated", p <= plugged),
        ):
            rates.setdefault(name, []).append(float(rejected.any(1).mean()))
    return {name: (null, power) for name, (null, power) in rates.items()}


def bias(design: Design, delta: float, mde: float, sims: int, rng: np.random.Generator) -> dict[str, float]:
    """The mean estimate at stopping relative to the truth (E/Δ - 1): raw, and bias-reduced given
    the look it stopped at (:func:`ablate.analysis.engine.adjusted_estimate`; here with the true
    variance components, the expectation tabulated once on a grid of Δ' and inverted per sweep),
    over every sweep, over those that stopped before the last look and over those declared
    better/worse (the significance filter: the fixed design has it too, shown for comparison)."""
    margin = design.margin_mdes * mde
    code, look, estimate = (x[0] for x in design.simulate(delta, margin, sims, rng))
    grid = np.linspace(-1.5, 3.0, 91) * mde
    _, tab_look, tab = design.simulate(grid, margin, sims, rng)
    conditional = conditional_means(tab, tab_look, len(design.looks))
    adjusted = np.array([invert(e, grid, conditional[:, k]) for e, k in zip(estimate, look, strict=True)])
    early = look < len(design.looks) - 1
    different = np.isin(code, (seq.BETTER, seq.WORSE))
    fixed = Design(
        (design.looks[-1],), design.blocks, design.sd_text, design.margin_mdes, design.alpha, design.spending
    )
    fixed_code, _, fixed_estimate = (x[0] for x in fixed.simulate(delta, margin, sims, rng))
    fixed_different = np.isin(fixed_code, (seq.BETTER, seq.WORSE))

    def rel(x: np.ndarray, mask: np.ndarray) -> float:
        kept = x[mask & np.isfinite(x)]
        return float(kept.mean() / delta - 1) if len(kept) else math.nan

    every = np.ones_like(early)
    return {
        "raw": rel(estimate, every),
        "reduced": rel(adjusted, every),
        "raw, early stops": rel(estimate, early),
        "reduced, early stops": rel(adjusted, early),
        "raw, better/worse": rel(estimate, different),
        "reduced, better/worse": rel(adjusted, different),
        "fixed 10 seeds, better/worse": rel(fixed_estimate, fixed_different),
        "not reduced (outside the grid)": float(np.isnan(adjusted).mean()),
    }


def _rank_p(ranks_sum_doubled: np.ndarray, n: int) -> np.ndarray:
    """Two-sided exact p of the variant's (doubled) rank sum, n vs n seeds, no ties."""
    counts = rank_sum_distribution(np.arange(1, 2 * n + 1), n)
    sums = np.array(sorted(counts))
    freq = np.array([counts[s] for s in sums], dtype=float)
    cdf, sf = np.cumsum(freq) / freq.sum(), np.cumsum(freq[::-1])[::-1] / freq.sum()
    i = np.searchsorted(sums, ranks_sum_doubled)
    return np.minimum(1.0, 2 * np.minimum(cdf[i], sf[i]))


def divergence_rates(design: Design, delta: float, mde: float, sims: int, rng: np.random.Generator) -> dict[str, float]:
    """One diverged variant seed in ten (at a random place in the order): each look that holds it
    uses the worst-rank test (the diverged run ranked worst, exact p) on the seeds' final values,
    the others the crossed test. Each arm's final value varies between seeds as much as the
    difference does. Returns P(better), P(worse), P(undecided after the last look) and the share
    of sweeps whose last look was evaluated when no earlier one decided (1: none skipped)."""
    looks, n_max = design.looks, design.looks[-1]
    two, one = nominal_levels(looks, design.alpha, design.spending)
    margin = design.margin_mdes * mde
    z = delta + crossed_noise(rng, sims, n_max, design.blocks, design.sd_text)
    arm_sd = float(np.sqrt(SD_SEED**2 + SD_ERROR**2 / design.blocks))
    baseline = rng.normal(0, arm_sd, (sims, n_max))
    variant = baseline + z.mean(-1)
    where = rng.integers(0, n_max, sims)  # the diverged seed's place
    code = np.full(sims, seq.CONTINUE)
    last_evaluated = np.zeros(sims, dtype=bool)
    for k, n in enumerate(looks):
        open_ = code == seq.CONTINUE
        mean, var, df, *_ = anova(z[:, :n, :])
        p, p_tost = t_tests(mean, var, df, margin)
        held = where < n
        v = np.where(np.arange(n)[None, :] == where[:, None], np.inf, variant[:, :n])
        pooled = np.concatenate([v, baseline[:, :n]], axis=1)
        ranks = scipy_stats.rankdata(pooled, axis=1)
        doubled = np.rint(2 * ranks[:, :n].sum(1)).astype(int)
        p_rank = _rank_p(doubled, n)
        shift = ranks[:, :n].mean(1) - ranks[:, n:].mean(1)
        p = np.where(held, p_rank, p)
        with np.errstate(invalid="ignore"):
            equivalent = open_ & ~held & (p_tost <= one[k])
            different = open_ & (p <= two[k])
        worse = np.where(held, shift > 0, mean > 0)
        code = np.where(different, np.where(worse, seq.WORSE, seq.BETTER), np.where(equivalent, seq.EQUIVALENT, code))
        if k == len(looks) - 1:
            last_evaluated = open_
    reached = (code != seq.CONTINUE) | last_evaluated
    return {
        "better": float((code == seq.BETTER).mean()),
        "worse": float((code == seq.WORSE).mean()),
        "equivalent": float((code == seq.EQUIVALENT).mean()),
        "undecided": float((code == seq.CONTINUE).mean()),
        "last look evaluated when needed": float(reached.mean()),
    }


def old_false_rate(design: Design, sims: int, rng: np.random.Generator) -> float:
    """The old ``seeds=auto`` rule, a paired t over seeds on one fixed text, judged on a new seed
    and a new text: its false better/worse rate when there is no difference (the text's block
    effects are then a shift that every seed shares)."""
    n_max = design.looks[-1]
    d = crossed_noise(rng, sims, n_max, design.blocks, design.sd_text).mean(-1, keepdims=True)
    code, _, _ = sequential_codes(d, 1e-9, design.looks, design.alpha, design.spending)
    return float(np.isin(code, (seq.BETTER, seq.WORSE)).mean())


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


def expected_seeds(
    design: Design, mde: float, sims: int, rng: np.random.Generator, deltas: Sequence[float]
) -> list[float]:
    """E[seeds] at each true Δ (in units of the MDE)."""
    _, look, _ = design.simulate(np.asarray(deltas) * mde, design.margin_mdes * mde, sims, rng)
    return [float(np.asarray(design.looks)[look_k].mean()) for look_k in look]


def fmt_pct(x: float) -> str:
    return f"{100 * x:.1f}%" if math.isfinite(x) else "—"
