"""The statistics of each configuration of a summary against the baseline configuration.

With a baseline (``summarize(..., baseline="norm=pre")``, ``scripts/summarize.py --baseline``)
each row also gets, for the *final* value of the metric (the best one is a maximum over
validations, biased by the selection): ``n``, the 95% t interval of the mean, and against the
baseline the difference with its 95% interval, the p-value (paired t-test on shared seeds, else
Welch), its Holm-adjusted value over the family (every comparison of the call: all rows, all
``--where`` slices and metrics, :func:`adjust_family`), with a margin δ the TOST p-value of
equivalence (Holm-adjusted likewise), the divergence rate with its Clopper-Pearson interval and
Boschloo's test against the baseline's, the minimum detectable effect at 80% power and alpha/m
(design information), and a verdict (better / worse / equivalent (±δ) / inconclusive): see
:mod:`~ablate.analysis.stats`. :func:`~ablate.analysis.markdown.markdown_table` then adds a second
table, "against the baseline", with these columns. ``basis="flops"`` or ``"time"`` (``--basis``) computes them on the
metric at the matched FLOPs or training-time budget instead of the final value.

:func:`compare_to_baseline` adds these columns to the summary of :mod:`ablate.analysis.tables`
(:func:`compare_row` for one row's tests), :func:`adjust_family` re-adjusts several summaries as
one family, and :func:`margin_for` finds the margin δ.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd

from ablate.analysis import budget, stats
from ablate.analysis.crossed import crossed
from ablate.analysis.divergence import divergence_test, worst_rank_test
from ablate.analysis.job import Job, higher_is_better
from ablate.analysis.runs import Sweep
from ablate.analysis.specs import find_baseline
from ablate.eval_units import Units, metric_tag


def status_counts(jobs: list[Job]) -> dict[str, int]:
    """How many of ``jobs`` completed, diverged, crashed and are incomplete."""
    return {
        status: sum(job.status == status for job in jobs)
        for status in ("completed", "diverged", "crashed", "incomplete")
    }


def _finals(jobs: list[Job], metric: str, value=None) -> tuple[list[float], list[int | None]]:
    """The final ``metric`` (or ``value(job)``) of the completed seeds (a diverged seed has no
    valid final value), and their seeds."""
    done = [job for job in jobs if job.status == "completed"]
    return [value(job) if value else job.final(metric) for job in done], [job.seed for job in done]


def margin_for(sweep: Sweep, metric: str, margin: float | None = None) -> float | None:
    """The equivalence margin δ for ``metric``: ``margin`` when given (``--margin``), else the
    jobs' ``analysis.margin`` (an experiment config may declare it: a number in the units of the
    metric compared, or a mapping ``{metric: number}``), else None (no equivalence test). Jobs
    that declare different margins are refused."""
    if margin is not None:
        return float(margin)
    found = set()
    for job in sweep.jobs:
        declared = (job.config.get("analysis") or {}).get("margin") if isinstance(job.config, dict) else None
        if isinstance(declared, dict):
            declared = declared.get(metric)
        if declared is not None:
            found.add(float(declared))
    if len(found) > 1:
        raise ValueError(
            f"the jobs of {sweep.source} declare different analysis.margin values for {metric} "
            f"({', '.join(f'{m:g}' for m in sorted(found))}): give --margin"
        )
    return found.pop() if found else None


def _units_by_seed(jobs: list[Job], metric: str) -> tuple[dict[int, Units] | None, str]:
    """The completed seeds' per-unit test losses for ``metric`` (seed -> units), or None and why not."""
    if not metric.startswith("test/") or metric.split("/", 1)[1].split("@", 1)[0] not in ("loss", "bpb"):
        return None, ""
    out: dict[int, Units] = {}
    for job in jobs:
        if job.status != "completed" or job.seed is None:
            continue
        units = job.units(metric_tag(metric))
        if units is None:
            return None, f"no per-window losses for seed {job.seed} ({job.name})"
        out[job.seed] = units
    return out, ""


def compare_row(
    jobs: list[Job],
    base_jobs: list[Job],
    metric: str,
    value=None,
    margin: float | None = None,
) -> dict[str, object]:
    """The statistics of one row against the baseline (the ``diff`` ... ``inference`` cells):

    * a seed diverged on either side: the **worst-rank** test over every seed (diverged runs
      ranked worst, :func:`ablate.analysis.divergence.worst_rank_test`) is the row's difference test;
      Δ and its interval are the surviving seeds' (descriptive), no equivalence test;
    * else, with per-unit test losses for every completed seed of both sides (a ``test/loss`` or
      ``test/bpb`` metric, final values): the **crossed** seed x text interval and test
      (:mod:`ablate.analysis.crossed`), with its seed and text standard errors;
    * else the paired t-test over shared seeds (Welch's without two), as before."""
    values, seeds = _finals(jobs, metric, value)
    base_values, base_seeds = _finals(base_jobs, metric, value)
    counts, base_counts = status_counts(jobs), status_counts(base_jobs)
    better_up = higher_is_better(metric)
    c = stats.compare(values, base_values, seeds, base_seeds, margin=margin)
    inference = c.test
    extra: dict[str, object] = {}
    if counts["diverged"] or base_counts["diverged"]:
        p, shift = worst_rank_test(values, base_values, counts["diverged"], base_counts["diverged"], better_up)
        c = dataclasses.replace(c, test="worst-rank" if math.isfinite(p) else "", p=p, shift=shift, p_tost=math.nan)
        inference = f"worst-rank, {len(jobs) - counts['crashed'] - counts['incomplete']} vs " + (
            f"{len(base_jobs) - base_counts['crashed'] - base_counts['incomplete']} seeds (diverged ranked worst)"
        )
    elif value is None:
        mine, why = _units_by_seed(jobs, metric)
        base, why_base = _units_by_seed(base_jobs, metric)
        if mine is not None and base is not None and len(set(mine) & set(base)) >= 2:
            try:
                x = crossed(mine, base, metric, margin=margin)
            except ValueError as err:
                inference = f"{c.test} ({err})"
            else:
                c = dataclasses.replace(
                    c,
                    diff=x.diff,
                    low=x.low,
                    high=x.high,
                    p=x.p,
                    test="crossed",
                    se=x.se,
                    df=x.df,
                    n_pairs=x.n_seeds,
                    p_tost=x.p_tost,
                    seeds=x.seeds,
                )
                inference = f"crossed, {x.n_seeds} seeds x {x.n_units} text blocks"
                extra = dict(
                    seed_se=x.seed_se,
                    text_se=x.text_se,
                    text_se_unpaired=x.text_se_unpaired,
                    half_width_unpaired=x.half_width_unpaired,
                    text_blocks=x.n_units,
                )
        elif why or why_base:
            inference = f"{c.test} ({why or why_base})"
    rates = divergence_test(counts["diverged"], len(jobs), base_counts["diverged"], len(base_jobs))
    return dict(
        diff=c.diff,
        diff_ci_low=c.low,
        diff_ci_high=c.high,
        p=c.p,
        test=c.test,
        pairs=c.n_pairs,
        diff_seeds=",".join(str(x) for x in c.seeds),
        n_variant=c.n_variant,
        n_baseline=c.n_baseline,
        se=c.se,
        df=c.df,
        p_tost=c.p_tost,
        shift=c.shift,
        p_diverged=rates.p,
        baseline_diverged=base_counts["diverged"],
        baseline_seeds=len(base_jobs),
        inference=inference,
        **extra,
    )


def compare_to_baseline(
    frame: pd.DataFrame,
    sweep: Sweep,
    spec: str,
    alpha: float = stats.ALPHA,
    basis: str = budget.DEFAULT_BASIS,
    margin: float | None = None,
) -> pd.DataFrame:
    """``frame`` with the statistics of the final metric (``basis="steps"``), or of the metric at
    the matched FLOPs/time budget (``frame.attrs["matched"]``), per row and against the baseline
    row (column names in the module docstring; :func:`compare_row` for the tests). The p-values
    are Holm-adjusted within this frame; :func:`adjust_family` re-adjusts several frames (slices,
    metrics) as one family."""
    metric = frame.attrs["metric"]
    name, matched = budget.basis_column(metric, basis), frame.attrs.get("matched", {}).get(basis)
    if basis != "steps" and matched is None:
        raise ValueError(
            f"--basis {basis}: {metric} is measured once, after training, so it has no value at a matched "
            "budget; compare a validation metric (e.g. --metric val/loss) at equal cost, or this one with --basis steps"
        )
    value = None if basis == "steps" else matched.value
    if value is not None and not math.isfinite(matched.budget):
        why = "; ".join(dict.fromkeys(matched.problems.values())) or "no completed job"
        raise ValueError(f"--basis {basis}: no completed job has a {basis} budget ({why})")
    base_key = find_baseline(sweep, spec)
    variants = sweep.variants()
    base_counts = status_counts(variants[base_key])
    cells = []
    for key, jobs in variants.items():
        values, seeds = _finals(jobs, metric, value)
        ci = stats.interval(values)
        used = [s for s, v in zip(seeds, values, strict=True) if v is not None and math.isfinite(v)]
        cell: dict[str, object] = {
            f"{name} n": ci.n,
            f"{name} ci_low": ci.low,
            f"{name} ci_high": ci.high,
            "basis": basis,
            "mean_seeds": ",".join(str(s) for s in used),
            "margin": math.nan if margin is None else margin,
        }
        counts = status_counts(jobs)
        rates = divergence_test(counts["diverged"], len(jobs), base_counts["diverged"], len(variants[base_key]))
        cell.update(diverged_rate=rates.rate, diverged_ci_low=rates.low, diverged_ci_high=rates.high)
        if key != base_key:
            cell.update(compare_row(jobs, variants[base_key], metric, value, margin))
        cells.append(cell)
    columns = [f"{name} {stat}" for stat in ("n", "ci_low", "ci_high")] + [
        "mean_seeds",
        "diff",
        "diff_ci_low",
        "diff_ci_high",
        "diff_seeds",
        "n_variant",
        "n_baseline",
        "p",
        "p_holm",
        "test",
        "inference",
        "pairs",
        "se",
        "df",
        "seed_se",
        "text_se",
        "text_se_unpaired",
        "half_width_unpaired",
        "text_blocks",
        "mde",
        "margin",
        "p_tost",
        "p_tost_holm",
        "shift",
        "diverged_rate",
        "diverged_ci_low",
        "diverged_ci_high",
        "p_diverged",
        "baseline_diverged",
        "baseline_seeds",
        "verdict",
        "plan",
        "basis",
    ]
    for cell, key in zip(cells, variants, strict=True):
        cell["verdict"] = "baseline" if key == base_key else ""
    out = pd.concat([frame, pd.DataFrame(cells, index=frame.index, columns=columns)], axis=1)
    out.attrs.update(
        frame.attrs,
        baseline=sweep.label(base_key),
        alpha=alpha,
        basis=basis,
        basis_column=name,
        basis_text=budget.describe_basis(metric, basis, matched),
        margin=margin,
    )
    return adjust_family([out], alpha)[0]


def adjust_family(frames: list[pd.DataFrame], alpha: float = stats.ALPHA) -> list[pd.DataFrame]:
    """Holm over every comparison of ``frames`` (the rows against their baseline, in every frame:
    the ``--where`` slices and metrics of one write-up): one family for the difference tests (each
    row's one test: paired, crossed or, with diverged seeds, worst-rank) and one for the
    equivalence tests, each keeping its family-wise error rate at ``alpha`` (a row can err only
    one way: a false difference needs |Δ| < δ, a false equivalence |Δ| >= δ); then the MDE at
    alpha/m (m: the difference tests of the family, the threshold Holm applies to the first of
    them) and each row's verdict (:func:`ablate.analysis.stats.verdict`)."""
    compared = [f["verdict"].ne("baseline").to_numpy() for f in frames]
    adjusted = {}
    for column in ("p", "p_tost"):
        flat = np.concatenate([f[column].to_numpy(dtype=float)[mask] for f, mask in zip(frames, compared, strict=True)])
        adjusted[column] = np.split(stats.holm(flat), np.cumsum([mask.sum() for mask in compared])[:-1])
    m = int(np.isfinite(np.concatenate([f["p"].to_numpy(dtype=float) for f in frames])).sum())
    out = []
    for index, (frame, mask) in enumerate(zip(frames, compared, strict=True)):
        frame = frame.copy()
        for column in ("p", "p_tost"):
            values = np.full(len(frame), np.nan)
            values[mask] = adjusted[column][index]
            frame[f"{column}_holm"] = values
        metric, better_up = frame.attrs["metric"], higher_is_better(frame.attrs["metric"])
        verdicts, mdes = [], []
        for _, row in frame.iterrows():
            if row["verdict"] == "baseline":
                verdicts.append("baseline")
                mdes.append(math.nan)
                continue
            comparison = stats.Comparison(
                row["diff"],
                row["diff_ci_low"],
                row["diff_ci_high"],
                row["p"],
                row["test"] if isinstance(row["test"], str) else "",
                row["se"],
                row["df"],
                math.nan,
                int(row["n_variant"]),
                int(row["n_baseline"]),
                int(row["pairs"]),
                row["margin"],
                row["p_tost"],
                shift=row["shift"],
            )
            tested = comparison.tested and comparison.test != "worst-rank"
            mdes.append(stats.mde(row["se"], row["df"], alpha / max(m, 1)) if tested else math.nan)
            verdicts.append(
                stats.verdict(
                    comparison,
                    row["p_holm"],
                    better_up,
                    int(row["diverged"]),
                    int(row["seeds"]),
                    int(row["baseline_diverged"]),
                    int(row["baseline_seeds"]),
                    alpha,
                    p_tost_adjusted=row["p_tost_holm"],
                    stalled=int(row["stalled"]),
                    completed=int(row["completed"]),
                )
            )
        frame["verdict"], frame["mde"] = verdicts, mdes
        frame.attrs.update(
            alpha=alpha,
            family=m,
            family_frames=len(frames),
            metric=metric,
            tested=int(np.isfinite(frame["p"].to_numpy(dtype=float)).sum()),
        )
        out.append(frame)
    return out
