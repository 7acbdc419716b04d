"""One inference engine for every verdict: the table of ``summarize.py --baseline`` calls
:func:`analyse`, never a test of its own. The design is fixed (the seeds chosen before the data;
how many: :func:`ablate.analysis.stats.seeds_for`). Variant - baseline on the final metric is:

* when a seed of either arm diverged, the worst-rank test over every seed that ran
  (:func:`~ablate.analysis.divergence.worst_rank_test`), Δ the surviving pairs' and no equivalence
  claimed: dropping the diverged seeds made a variant that diverged in 3 of 10 seeds ``better``;
* else, with per-window test losses for every completed seed (``test/loss*``, ``test/bpb*``), the
  crossed seed x held-out block analysis (:mod:`~ablate.analysis.crossed`);
* else the paired t-test over the shared seeds (Welch's without two): the text is then fixed.

The error rates are measured by ``python -m benchmarks.verdicts.simulate``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from ablate.analysis import stats
from ablate.analysis.crossed import CrossedResult, crossed
from ablate.analysis.divergence import worst_rank_test
from ablate.eval_units import Units

# a declared verdict needs at least this many seed pairs and held-out text blocks (issue 43 item 3):
# with 2 seeds the crossed interval covers about 89%, and fewer than 4 blocks leave the text
# variance with too few degrees of freedom to say anything about another passage
MIN_SEEDS = 3
MIN_BLOCKS = 4


@dataclass(frozen=True)
class Outcome:
    """One seed of one arm: how its run ended, its final metric and its per-window test losses."""

    seed: int | None
    status: str  # completed | diverged | crashed | incomplete
    value: float = math.nan
    units: Units | None = None

    @property
    def usable(self) -> bool:
        return self.status == "completed" and math.isfinite(self.value)


@dataclass(frozen=True)
class Evidence:
    """Variant - baseline as :func:`analyse` found it: the comparison, the ``Δ on`` text, and the
    crossed analysis when per-window losses gave one (``n_units`` 1: the text is one passage)."""

    comparison: stats.Comparison
    inference: str
    crossed: CrossedResult | None = None
    diverged: int = 0
    baseline_diverged: int = 0

    @property
    def n_blocks(self) -> int:
        return self.crossed.n_units if self.crossed is not None else 0


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
    """Variant - baseline on the seeds given; ``per_window=False``: the final values only."""
    per_window = per_window and has_units(metric)
    good, base_good = _usable(variant), _usable(baseline)
    values, seeds = [o.value for o in good], [o.seed for o in good]
    base_values, base_seeds = [o.value for o in base_good], [o.seed for o in base_good]
    c = stats.compare(values, base_values, seeds, base_seeds, margin=margin)
    k, k_base = sum(o.status == "diverged" for o in variant), sum(o.status == "diverged" for o in baseline)
    ran, base_ran = len(good) + k, len(base_good) + k_base
    inference, x = c.test, None
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
    elif why or why_base:
        inference = f"{c.test} ({why or why_base})"
    if k or k_base:
        p, shift = worst_rank_test(values, base_values, k, k_base, higher_is_better)
        c = replace(c, test="worst-rank" if math.isfinite(p) else "", p=p, shift=shift, p_tost=math.nan)
        inference = f"worst-rank, {ran} vs {base_ran} seeds (diverged ranked worst)"
    return Evidence(c, inference, x, k, k_base)


def has_units(metric: str) -> bool:
    """Whether runs save per-window losses for ``metric``: ``test/loss*`` and ``test/bpb*``."""
    return metric.startswith("test/") and metric.split("/", 1)[1].split("@", 1)[0] in ("loss", "bpb")


def outcomes(jobs: Sequence, metric: str, value: Callable | None = None) -> list[Outcome]:
    """Each job's :class:`Outcome` on ``metric`` (its final value or ``value(job)``, its per-window losses)."""
    from ablate.eval_units import metric_tag

    with_units = has_units(metric)
    out = []
    for job in jobs:
        done = job.status == "completed"
        v = (value(job) if value else job.final(metric)) if done else math.nan
        units = job.units(metric_tag(metric)) if done and with_units and value is None else None
        out.append(Outcome(job.seed, job.status, float(v) if v is not None else math.nan, units))
    return out
