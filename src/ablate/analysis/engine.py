"""One inference engine for every verdict (issue 43): the fixed-seed table of ``summarize.py
--baseline``, its ``seeds=auto`` rows and the ``tune=lr hydra.sweeper.seeds=auto`` sweeper all
call :func:`analyse` (one comparison on the seeds given) or :func:`sequential` (the same
comparison at each look of a group-sequential design), never a test of their own.

What one comparison rests on (:func:`analyse`), variant - baseline on the final ``metric``:

* **Divergence is an outcome.** When a seed of either arm diverged, the row's one difference test
  is the worst-rank test over every seed that ran (a diverged run ranked worst, Lachin 1999;
  exact permutation distribution, :func:`~ablate.analysis.divergence.worst_rank_test`); Δ and its
  interval are the surviving pairs' (descriptive), and no equivalence is claimed (a diverged run
  is within δ of nothing). No seed is dropped: dropping made a variant that diverged in 3 of 10
  seeds ``better``.
* **Seeds and text both random.** Else, with per-window test losses for every completed seed of
  both arms (``test/loss*``, ``test/bpb*``), the crossed seed x text analysis
  (:mod:`~ablate.analysis.crossed`) with the **held-out block** as the text unit
  (:func:`ablate.eval_units.text_groups`): its interval is one for the mean difference over
  seeds *and* held-out text (not a prediction for one new run).
* Else the paired t-test over the shared seeds (Welch's without two): the text is then fixed, and
  the verdict is about this passage only (``summarize.py`` never labels it declared).

:func:`sequential` applies the group-sequential boundaries of :mod:`~ablate.analysis.sequential`
to *that* statistic. Look k analyses the seeds that ran by look k, the first ``looks[k]`` seeds of
the design's order on both arms, diverged ones included (a look whose seeds have not all ended
is not evaluated), so a diverged seed never shifts later seeds into an earlier look and never
stops the last look from being evaluated. The boundary of look k is its nominal level: the
two-sided p-value that the exact t boundary of :func:`~ablate.analysis.sequential.boundaries`
amounts to at n_k - 1 df (and the one-sided level for each half of TOST), applied to the row's
p-value whatever its test (the usual nominal-level form of a group-sequential design, Jennison &
Turnbull 2000, ch. 3). Measured by ``scripts/simulate_verdicts.py`` (docs/analysis.md): false
better/worse <= 5% for a new seed and a new text, power >= 78% at the fixed 10-seed design's
minimum detectable effect. At stopping it reports the repeated confidence interval of that look
(Jennison & Turnbull 1989) and the **bias-reduced** estimate (:func:`adjusted_estimate`,
conditional on the look it stopped at, Troendle & Yu 1999): a sequential design stops early when
the estimate happens to be large, so the raw mean at an early stop exaggerates the effect.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from ablate.analysis import sequential as seq
from ablate.analysis import stats
from ablate.analysis.crossed import CrossedResult, anova, crossed, t_tests
from ablate.analysis.divergence import worst_rank_test
from ablate.eval_units import Units

# a declared verdict needs at least this many seed pairs and held-out text blocks (issue 43 item 3):
# with 2 seeds the crossed interval covers about 89%, and fewer than 4 blocks leave the text
# variance with too few degrees of freedom to say anything about another passage
MIN_SEEDS = 3
MIN_BLOCKS = 4
ADJUST_PATHS = 20_000  # simulated sweeps per grid point of the bias adjustment
ADJUST_GRID = 41  # grid points of the bias adjustment, over the estimate ± 4 standard errors


@dataclass(frozen=True)
class Outcome:
    """One seed of one arm: how its run ended, its final metric (NaN unless completed) and its
    per-window test losses when it saved them."""

    seed: int | None
    status: str  # completed | diverged | crashed | incomplete
    value: float = math.nan
    units: Units | None = None

    @property
    def usable(self) -> bool:
        return self.status == "completed" and math.isfinite(self.value)


@dataclass(frozen=True)
class Evidence:
    """Variant - baseline as :func:`analyse` found it (the columns of the table against a
    baseline). ``test``: ``crossed``, ``paired``, ``welch``, ``worst-rank`` or ``""`` (none
    possible); ``n_blocks``: the text units of a crossed test (1: the text is one passage; 0: no
    per-window losses); ``inference``: the ``Δ on`` text."""

    comparison: stats.Comparison
    inference: str
    n_blocks: int = 0
    unit_kind: str = ""
    seed_se: float = math.nan
    text_se: float = math.nan
    text_se_unpaired: float = math.nan
    half_width_unpaired: float = math.nan
    mean_squares: tuple[float, float, float] = (math.nan, math.nan, math.nan)
    diverged: int = 0
    baseline_diverged: int = 0
    ran: int = 0  # seeds of the variant with an outcome (completed or diverged)
    baseline_ran: int = 0

    @property
    def test(self) -> str:
        return self.comparison.test

    @property
    def crossed(self) -> bool:
        return self.comparison.test == "crossed"


def _usable(outcomes: Sequence[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.usable]


def _units(outcomes: Sequence[Outcome]) -> tuple[dict[int, Units] | None, str]:
    """seed -> units of the completed seeds, or None and which seed has none."""
    out: dict[int, Units] = {}
    for o in _usable(outcomes):
        if o.seed is None:
            continue
        if o.units is None:
            return None, f"no per-window losses for seed {o.seed}"
        out[o.seed] = o.units
    return out, ""


def _with_crossed(c: stats.Comparison, x: CrossedResult) -> stats.Comparison:
    return replace(
        c,
        diff=x.diff,
        low=x.low,
        high=x.high,
        p=x.p,
        test="crossed" if x.n_units >= 2 else "paired",
        se=x.se,
        df=x.df,
        n_pairs=x.n_seeds,
        p_tost=x.p_tost,
        seeds=x.seeds,
    )


def analyse(
    variant: Sequence[Outcome],
    baseline: Sequence[Outcome],
    metric: str,
    higher_is_better: bool,
    margin: float | None = None,
    per_window: bool = True,
) -> Evidence:
    """Variant - baseline on the seeds given (the module docstring: worst-rank when a seed
    diverged, else crossed seed x block, else paired / Welch). ``per_window=False``: the final
    values only (a metric at a matched budget has no per-window losses)."""
    per_window = per_window and has_units(metric)
    good, base_good = _usable(variant), _usable(baseline)
    values, seeds = [o.value for o in good], [o.seed for o in good]
    base_values, base_seeds = [o.value for o in base_good], [o.seed for o in base_good]
    c = stats.compare(values, base_values, seeds, base_seeds, margin=margin)
    k, k_base = sum(o.status == "diverged" for o in variant), sum(o.status == "diverged" for o in baseline)
    ran, base_ran = len(good) + k, len(base_good) + k_base
    inference = c.test
    extra: dict[str, Any] = {}
    mine, why = _units(variant) if per_window else (None, "")
    base, why_base = _units(baseline) if per_window else (None, "")
    if mine is not None and base is not None and len(set(mine) & set(base)) >= 2:
        try:
            x = crossed(mine, base, metric, margin=margin)
        except ValueError as err:
            inference = f"{c.test} ({err})"
        else:
            c = _with_crossed(c, x)
            seeds_text = ",".join(map(str, x.seeds))
            inference = (
                f"crossed, seeds {seeds_text} x {x.n_units} text blocks"
                if x.n_units >= 2
                else f"paired, seeds {seeds_text} (the test text is one passage: no text unit)"
            )
            extra = dict(
                n_blocks=x.n_units,
                unit_kind=x.unit_kind,
                seed_se=x.seed_se,
                text_se=x.text_se,
                text_se_unpaired=x.text_se_unpaired,
                half_width_unpaired=x.half_width_unpaired,
                mean_squares=x.mean_squares,
            )
    elif why or why_base:
        inference = f"{c.test} ({why or why_base})"
    if k or k_base:
        p, shift = worst_rank_test(values, base_values, k, k_base, higher_is_better)
        c = replace(c, test="worst-rank" if math.isfinite(p) else "", p=p, shift=shift, p_tost=math.nan)
        inference = f"worst-rank, {ran} vs {base_ran} seeds (diverged ranked worst)"
    return Evidence(c, inference, diverged=k, baseline_diverged=k_base, ran=ran, baseline_ran=base_ran, **extra)


# --------------------------------------------------------------------------- sequential


def nominal_levels(looks: Sequence[int], alpha: float, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Each look's two-sided level for the difference test and one-sided level for each half of
    TOST: the p-values that the exact t boundaries (:func:`ablate.analysis.sequential.boundaries`)
    amount to at n_k - 1 degrees of freedom."""
    looks = tuple(int(n) for n in looks)
    two, one = seq.boundaries(looks, alpha, kind, 2), seq.boundaries(looks, alpha, kind, 1)
    df = np.array(looks, dtype=float) - 1
    return 2 * scipy_stats.t.sf(np.array(two), df), scipy_stats.t.sf(np.array(one), df)


@dataclass(frozen=True)
class Decision:
    """Where :func:`sequential` stopped: the verdict code (:data:`ablate.analysis.sequential.NAMES`;
    ``continue`` when the seeds given end before a decision or the last look), the 0-based
    ``look`` it stopped at (-1: none), the seeds of that look, the evidence there, its repeated
    interval, the bias-adjusted estimate and each evaluated look's (seeds, p, p_tost, levels)."""

    code: int
    look: int
    seeds: tuple[int, ...]
    evidence: Evidence | None
    low: float = math.nan
    high: float = math.nan
    adjusted: float = math.nan
    both: bool = False  # equivalent and different at the same look
    history: list[dict[str, float]] = field(default_factory=list)
    waiting: str = ""  # why the next look was not evaluated (its seeds have not all ended)

    @property
    def decided(self) -> bool:
        return self.code != seq.CONTINUE

    @property
    def level(self) -> float:
        return self.history[-1]["level"] if self.history else math.nan


def _at_look(outcomes: Sequence[Outcome], seeds: Sequence[int]) -> tuple[list[Outcome], list[int]]:
    """The outcomes of ``seeds`` (completed or diverged), and the seeds that have none yet."""
    by_seed = {o.seed: o for o in outcomes if o.status in ("completed", "diverged")}
    return [by_seed[s] for s in seeds if s in by_seed], [s for s in seeds if s not in by_seed]


def sequential(
    variant: Sequence[Outcome],
    baseline: Sequence[Outcome],
    metric: str,
    higher_is_better: bool,
    margin: float,
    looks: Sequence[int],
    alpha: float = stats.ALPHA,
    spending: str = seq.DEFAULT_SPENDING,
    order: Sequence[int] | None = None,
    adjust: bool = True,
) -> Decision:
    """The group-sequential verdict of one comparison (module docstring). ``order``: the seeds in
    the order the design adds them (default 1, 2, ..., ``looks[-1]``); look k reads the first
    ``looks[k]`` of them on both arms. At each look: TOST (both halves at the look's one-sided
    level: ``equivalent (±δ)``; never with a diverged seed) and the difference test (the row's
    p-value at the look's two-sided level: ``better`` / ``worse``); the first look where either
    holds stops it; after the last look it is ``inconclusive``."""
    if not margin > 0:
        raise ValueError(f"margin {margin!r}: the smallest difference of interest must be > 0")
    looks = [int(n) for n in looks]
    order = list(order) if order is not None else list(range(1, looks[-1] + 1))
    two, one = nominal_levels(looks, alpha, spending)
    history: list[dict[str, float]] = []
    for k, n in enumerate(looks):
        mine, missing = _at_look(variant, order[:n])
        base, base_missing = _at_look(baseline, order[:n])
        if missing or base_missing or n > len(order):
            return _waiting(k, n - len(order), [*missing, *base_missing], history)
        evidence = analyse(mine, base, metric, higher_is_better, margin)
        c = evidence.comparison
        history.append(dict(look=k, seeds=n, p=c.p, p_tost=c.p_tost, level=float(two[k]), tost_level=float(one[k])))
        with np.errstate(invalid="ignore"):
            equivalent = c.test != "worst-rank" and bool(c.p_tost <= one[k])
            different = bool(c.p <= two[k])
        last = k == len(looks) - 1
        if not (equivalent or different or last):
            continue
        code = _stop_code(c, equivalent, different, higher_is_better)
        low = high = adjusted = math.nan
        if c.test in ("crossed", "paired") and c.se > 0:
            crit = scipy_stats.t.ppf(1 - two[k] / 2, c.df)
            low, high = c.diff - crit * c.se, c.diff + crit * c.se
            if adjust and (equivalent or different):
                adjusted = adjusted_estimate(evidence, k, looks, margin, alpha, spending, higher_is_better)
            elif adjust:
                adjusted = c.diff  # the last look without a decision: the fixed-n estimate, unbiased there
        return Decision(
            code,
            k,
            tuple(order[:n]),
            evidence,
            low,
            high,
            adjusted,
            both=equivalent and different,
            history=history,
        )
    raise AssertionError("not reached: the last look always returns")


def _waiting(k: int, unplanned: int, missing: list[int], history: list[dict[str, float]]) -> Decision:
    """Look ``k`` waits for its ``missing`` seeds (or ``unplanned`` ones the order lacks): the decision goes on."""
    waiting = ",".join(map(str, sorted(set(missing)))) or f"{unplanned} more"
    return Decision(
        seq.CONTINUE,
        -1,
        (),
        None,
        history=history,
        waiting=f"look {k + 1} waits for seeds {waiting}: still to run, or crashed (re-run the command)",
    )


def _stop_code(c: stats.Comparison, equivalent: bool, different: bool, higher_is_better: bool) -> int:
    """The code of a look that stops: a difference's direction first, then equivalence, else inconclusive."""
    if different:
        return stats_direction_code(c, higher_is_better)
    return seq.EQUIVALENT if equivalent else seq.INCONCLUSIVE


def stats_direction_code(c: stats.Comparison, higher_is_better: bool) -> int:
    """The code of a rejected difference test's direction (:func:`ablate.analysis.stats.difference_direction`)."""
    return seq.WORSE if stats.difference_direction(c, higher_is_better) == stats.WORSE else seq.BETTER


# --------------------------------------------------------------------------- vectorised (simulations)


def sequential_codes(
    z: np.ndarray,
    margin: float,
    looks: Sequence[int],
    alpha: float = stats.ALPHA,
    spending: str = seq.DEFAULT_SPENDING,
    higher_is_better: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sequential` without divergence, vectorised: ``z`` (..., n_max, n_t) per-seed,
    per-block differences (n_t = 1: one passage, the paired t-test). Returns the verdict code
    (better / worse / equivalent / inconclusive), the 0-based look it stopped at and the
    estimate there, each of shape ``z.shape[:-2]``."""
    looks = [int(n) for n in looks]
    two, one = nominal_levels(looks, alpha, spending)
    shape = z.shape[:-2]
    code = np.full(shape, seq.CONTINUE)
    look = np.full(shape, len(looks) - 1)
    estimate = np.full(shape, np.nan)
    for k, n in enumerate(looks):
        mean, var, df, *_ = anova(z[..., :n, :])
        p, p_tost = t_tests(mean, var, df, margin)
        open_ = code == seq.CONTINUE
        with np.errstate(invalid="ignore"):
            equivalent = open_ & (p_tost <= one[k])
            different = open_ & (p <= two[k])
        worse = (mean > 0) != higher_is_better
        code = np.where(different, np.where(worse, seq.WORSE, seq.BETTER), np.where(equivalent, seq.EQUIVALENT, code))
        stopped = open_ & (different | equivalent)
        look = np.where(stopped, k, look)
        estimate = np.where(stopped | (open_ & (k == len(looks) - 1)), mean, estimate)
    code = np.where(code == seq.CONTINUE, seq.INCONCLUSIVE, code)
    return code, look, estimate


def crossed_noise(
    rng: np.random.Generator, paths: int, n_seeds: int, n_blocks: int, sd_seed: float, sd_text: float, sd_error: float
) -> np.ndarray:
    """``paths`` draws of d - Δ on the crossed model (module docstring of
    :mod:`~ablate.analysis.crossed`): a seed effect, a block effect and their interaction, each
    normal, (paths, n_seeds, n_blocks)."""
    return (
        rng.normal(0, sd_seed, (paths, n_seeds, 1))
        + rng.normal(0, sd_text, (paths, 1, n_blocks))
        + rng.normal(0, sd_error, (paths, n_seeds, n_blocks))
    )


def simulate_design(
    delta: np.ndarray | float,
    sd_seed: float,
    sd_text: float,
    sd_error: float,
    n_blocks: int,
    looks: Sequence[int],
    margin: float,
    alpha: float,
    spending: str,
    higher_is_better: bool,
    paths: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`sequential_codes` on ``paths`` simulated sweeps of the crossed model (module
    docstring of :mod:`~ablate.analysis.crossed`) per true difference in ``delta`` (common random
    numbers across ``delta``: the same draws shifted, one Δ at a time to bound the memory).
    Returns (code, look, estimate) of shape (len(delta), paths)."""
    delta = np.atleast_1d(np.asarray(delta, dtype=float))
    noise = crossed_noise(rng, paths, looks[-1], n_blocks, sd_seed, sd_text, sd_error)
    out = [sequential_codes(d + noise, margin, looks, alpha, spending, higher_is_better) for d in delta]
    return tuple(np.stack(parts) for parts in zip(*out, strict=True))  # type: ignore[return-value]


def components(evidence: Evidence) -> tuple[float, float, float, int]:
    """The variance components (sd of the seed effect, of the block effect, of their interaction)
    that the evidence's mean squares estimate (negative estimates set to 0), and its blocks."""
    ms_s, ms_t, ms_e = evidence.mean_squares
    n_t = max(evidence.n_blocks, 1)
    if not math.isfinite(ms_s):  # a paired t-test over seeds (no per-window losses): the seeds' sd
        return evidence.comparison.se * math.sqrt(max(evidence.comparison.n_pairs, 1)), 0.0, 0.0, 1
    if n_t == 1 or not math.isfinite(ms_t):
        return math.sqrt(max(ms_s, 0.0)), 0.0, 0.0, 1
    n_s = evidence.comparison.n_pairs
    return (
        math.sqrt(max((ms_s - ms_e) / n_t, 0.0)),
        math.sqrt(max((ms_t - ms_e) / n_s, 0.0)),
        math.sqrt(max(ms_e, 0.0)),
        n_t,
    )


def conditional_means(estimate: np.ndarray, look: np.ndarray, looks: int, minimum: int = 20) -> np.ndarray:
    """E[estimate | stopped at look k] per row of ``estimate`` (grid, paths) and look k, NaN where
    fewer than ``minimum`` paths stopped there."""
    out = np.full((estimate.shape[0], looks), np.nan)
    for k in range(looks):
        hit = look == k
        count = hit.sum(-1)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[:, k] = np.where(count >= minimum, np.where(hit, estimate, 0.0).sum(-1) / count, np.nan)
    return out


def invert(observed: float, grid: np.ndarray, expected: np.ndarray) -> float:
    """The grid value whose expected estimate is ``observed`` (linear interpolation over the
    grid points where it is known, made increasing: E[estimate | Δ] increases with Δ); NaN when
    ``observed`` is outside them."""
    known = np.isfinite(expected)
    if known.sum() < 2:
        return math.nan
    x, y = grid[known], np.maximum.accumulate(expected[known])
    if not y[0] <= observed <= y[-1]:
        return math.nan
    return float(np.interp(observed, y, x))


def adjusted_estimate(
    evidence: Evidence,
    look: int,
    looks: Sequence[int],
    margin: float,
    alpha: float,
    spending: str,
    higher_is_better: bool,
    paths: int = ADJUST_PATHS,
    grid: int = ADJUST_GRID,
) -> float:
    """The bias-reduced estimate at stopping: the Δ̃ whose expected estimate, *given that the
    design stops at this look*, equals the one observed, E_Δ̃[Δ̂ | stop at look k] = Δ̂ (the
    conditional bias-reduced estimate of Troendle & Yu 1999; Whitehead 1986 conditions on
    nothing, which leaves an early stop's exaggeration in place). The expectation is simulated
    (parametric bootstrap: the design of :func:`sequential_codes` with the variance components
    estimated at the stopping look, :func:`components`; ``paths`` sweeps per point of a grid of
    ``grid`` values of Δ over the estimate ± 4 SE; common random numbers and a fixed seed, so the
    same data give the same estimate) and inverted by linear interpolation (NaN when the observed
    estimate is beyond what the grid reaches)."""
    c = evidence.comparison
    sd_seed, sd_text, sd_error, n_blocks = components(evidence)
    if not (c.se > 0 and math.isfinite(c.diff)):
        return math.nan
    rng = np.random.default_rng(20261128)
    deltas = c.diff + c.se * np.linspace(-4, 4, grid)
    _, stopped, estimate = simulate_design(
        deltas, sd_seed, sd_text, sd_error, n_blocks, looks, margin, alpha, spending, higher_is_better, paths, rng
    )
    return invert(c.diff, deltas, conditional_means(estimate, stopped, len(looks))[:, look])


# --------------------------------------------------------------------------- words


def words(
    code: int,
    margin: float | None,
    diverged: int = 0,
    seeds: int = 0,
    stalled: int = 0,
    completed: int | None = None,
    both: bool = False,
    extra: str = "",
) -> str:
    """A sequential code in the tool's words (:func:`ablate.analysis.stats.words`)."""
    name = {seq.BETTER: stats.BETTER, seq.WORSE: stats.WORSE, seq.EQUIVALENT: stats.EQUIVALENT}.get(code, "")
    return stats.words(name, margin, diverged, seeds, stalled, completed, both, extra)


def has_units(metric: str) -> bool:
    """Whether runs save per-window losses for ``metric``: ``test/loss*`` and ``test/bpb*``."""
    return metric.startswith("test/") and metric.split("/", 1)[1].split("@", 1)[0] in ("loss", "bpb")


def outcomes(jobs: Sequence, metric: str, value: Callable | None = None) -> list[Outcome]:
    """The :class:`Outcome` of each job (:class:`ablate.analysis.job.Job`) on ``metric``: its
    final value (or ``value(job)``, e.g. at a matched budget) when completed, its per-window test
    losses for a ``test/loss*`` / ``test/bpb*`` metric."""
    from ablate.eval_units import metric_tag

    with_units = has_units(metric)
    out = []
    for job in jobs:
        done = job.status == "completed"
        v = (value(job) if value else job.final(metric)) if done else math.nan
        units = job.units(metric_tag(metric)) if done and with_units and value is None else None
        out.append(Outcome(job.seed, job.status, float(v) if v is not None else math.nan, units))
    return out
