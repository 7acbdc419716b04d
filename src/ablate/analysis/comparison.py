"""The statistics of each configuration of a summary against the baseline configuration, on the
*final* value of the metric (the best one is biased by the selection) or the value at a matched
budget: the t interval of the mean, the one test of :mod:`~ablate.analysis.engine`, p-values
adjusted over the call's family (:func:`adjust_family`), the TOST, divergence rates, the MDE and
the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pandas as pd

from ablate.analysis import budget, engine, stats
from ablate.analysis.divergence import divergence_test
from ablate.analysis.job import Job, higher_is_better
from ablate.analysis.runs import Sweep
from ablate.analysis.specs import find_baseline


def status_counts(jobs: list[Job]) -> dict[str, int]:
    """How many of ``jobs`` completed, diverged, crashed and are incomplete."""
    return {
        status: sum(job.status == status for job in jobs)
        for status in ("completed", "diverged", "crashed", "incomplete")
    }


def _finals(jobs: list[Job], metric: str, value=None) -> tuple[list[float], list[int | None]]:
    """The final ``metric`` (or ``value(job)``) of the completed seeds, and their seeds."""
    done = [job for job in jobs if job.measured(metric)]
    return [value(job) if value else job.final(metric) for job in done], [job.seed for job in done]


def margin_for(sweep: Sweep, metric: str, margin: float | None = None) -> float | None:
    """The margin δ for ``metric``: ``margin``, else the jobs' ``analysis.margin`` (one value), else None."""
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


def compare_row(
    jobs: list[Job], base_jobs: list[Job], metric: str, value=None, margin: float | None = None
) -> dict[str, object]:
    """One row's statistics against the baseline, by :func:`ablate.analysis.engine.analyse`."""
    evidence = engine.analyse(
        engine.outcomes(jobs, metric, value),
        engine.outcomes(base_jobs, metric, value),
        metric,
        higher_is_better(metric),
        margin,
        per_window=value is None,
    )
    c, counts, base_counts = evidence.comparison, status_counts(jobs), status_counts(base_jobs)
    rates = divergence_test(counts["diverged"], len(jobs), base_counts["diverged"], len(base_jobs))
    x = evidence.crossed if c.test == "crossed" else None
    names = ("seed_se", "text_se", "text_se_unpaired", "half_width_unpaired")
    extra = {name: getattr(x, name) for name in names} if x is not None else {}
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
        inference=evidence.inference,
        text_blocks=evidence.n_blocks,
        **extra,
    )


def compare_to_baseline(
    frame: pd.DataFrame,
    sweep: Sweep,
    spec: str,
    alpha: float = stats.ALPHA,
    basis: str = budget.DEFAULT_BASIS,
    margin: float | None = None,
    equivalence: tuple[str, ...] = (),
) -> pd.DataFrame:
    """``frame`` with the statistics (``_COLUMNS``) of each row against the baseline row, adjusted
    within this frame. ``equivalence``: only the rows these specs name get the TOST, so that rows
    where equivalence is hopeless do not dilute the others' (issue 43)."""
    metric = frame.attrs["metric"]
    name, matched = budget.basis_column(metric, basis), frame.attrs.get("matched", {}).get(basis)
    value = _basis_value(metric, basis, matched)
    base_key = find_baseline(sweep, spec)
    variants = sweep.variants()
    base_jobs, base_counts = variants[base_key], status_counts(variants[base_key])
    cells = []
    for key, jobs in variants.items():
        cell = _mean_cells(jobs, metric, value, name, basis, margin)
        counts = status_counts(jobs)
        rates = divergence_test(counts["diverged"], len(jobs), base_counts["diverged"], len(base_jobs))
        cell.update(diverged_rate=rates.rate, diverged_ci_low=rates.low, diverged_ci_high=rates.high)
        if key != base_key:
            asked = margin if not equivalence or _named(sweep, jobs, equivalence) else None
            cell["margin"] = math.nan if asked is None else asked
            cell.update(compare_row(jobs, base_jobs, metric, value, asked))
        cell["verdict"] = "baseline" if key == base_key else ""
        cells.append(cell)
    columns = [f"{name} {stat}" for stat in ("n", "ci_low", "ci_high")] + _COLUMNS
    out = pd.concat([frame, pd.DataFrame(cells, index=frame.index, columns=columns)], axis=1)
    out.attrs.update(
        frame.attrs,
        baseline=sweep.label(base_key),
        alpha=alpha,
        basis=basis,
        basis_column=name,
        basis_text=budget.describe_basis(metric, basis, matched),
        margin=margin,
        equivalence=tuple(equivalence),
    )
    return adjust_family([out], alpha)[0]


# the columns compare_to_baseline adds after the interval of the mean ("<metric> n", "ci_low", "ci_high")
_COLUMNS = [
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


def _basis_value(metric: str, basis: str, matched: budget.Matched | None) -> Callable[[Job], float] | None:
    """A job's value reader: None for the final ``metric`` (``steps``), else the matched budget's; refused if none."""
    if basis == "steps":
        return None
    if matched is None:
        raise ValueError(
            f"--basis {basis}: {metric} is measured once, after training, so it has no value at a matched "
            "budget; compare a validation metric (e.g. --metric val/loss) at equal cost, or this one with --basis steps"
        )
    if not math.isfinite(matched.budget):
        why = "; ".join(dict.fromkeys(matched.problems.values())) or "no completed job"
        raise ValueError(f"--basis {basis}: no completed job has a {basis} budget ({why})")
    return matched.value


def _mean_cells(
    jobs: list[Job], metric: str, value: Callable[[Job], float] | None, name: str, basis: str, margin: float | None
) -> dict[str, object]:
    """One row's 95% t interval of the mean over its completed seeds, and the seeds it used."""
    values, seeds = _finals(jobs, metric, value)
    ci = stats.interval(values)
    used = [s for s, v in zip(seeds, values, strict=True) if v is not None and math.isfinite(v)]
    return {
        f"{name} n": ci.n,
        f"{name} ci_low": ci.low,
        f"{name} ci_high": ci.high,
        "basis": basis,
        "mean_seeds": ",".join(str(s) for s in used),
        "margin": math.nan if margin is None else margin,
    }


def _named(sweep: Sweep, jobs: list[Job], specs: tuple[str, ...]) -> bool:
    """Whether the row of ``jobs`` matches one of the ``axis=value`` ``specs``."""
    from ablate.analysis.specs import parse_baseline

    return any(all(jobs[0].value(sweep.full_name(k)) == v for k, v in parse_baseline(spec).items()) for spec in specs)


def adjust_family(frames: list[pd.DataFrame], alpha: float = stats.ALPHA) -> list[pd.DataFrame]:
    """One family over every comparison of ``frames`` (:func:`ablate.analysis.stats.family_adjusted`),
    then the MDE at alpha/m and each row's verdict; a row whose arms did not train stays out."""
    untrained = [_untrained(f) for f in frames]
    compared = [f["verdict"].ne("baseline").to_numpy() & (u == "") for f, u in zip(frames, untrained, strict=True)]
    flat = {
        column: np.concatenate(
            [f[column].to_numpy(dtype=float)[mask] for f, mask in zip(frames, compared, strict=True)]
        )
        for column in ("p", "p_tost")
    }
    cuts = np.cumsum([mask.sum() for mask in compared])[:-1]
    p_adjusted, tost_adjusted = stats.family_adjusted(flat["p"], flat["p_tost"]) if len(flat["p"]) else (flat["p"],) * 2
    adjusted = {"p": np.split(p_adjusted, cuts), "p_tost": np.split(tost_adjusted, cuts)}
    m = int(np.isfinite(flat["p"]).sum())
    out = []
    for index, (frame, mask) in enumerate(zip(frames, compared, strict=True)):
        frame = frame.copy()
        for column in ("p", "p_tost"):
            values = frame[f"{column}_holm"].to_numpy(dtype=float).copy() if f"{column}_holm" in frame else None
            values = np.full(len(frame), np.nan) if values is None else np.where(mask, np.nan, values)
            values[mask] = adjusted[column][index]
            frame[f"{column}_holm"] = values
        metric, better_up = frame.attrs["metric"], higher_is_better(frame.attrs["metric"])
        judged = [
            _judge(row, better_up, alpha, m)
            if in_family
            else (no_verdict or row["verdict"], math.nan if no_verdict else row.get("mde", math.nan))
            for (_, row), in_family, no_verdict in zip(frame.iterrows(), mask, untrained[index], strict=True)
        ]
        frame["verdict"], frame["mde"] = [v for v, _ in judged], [mde for _, mde in judged]
        frame.attrs.update(
            alpha=alpha,
            family=m,
            family_frames=len(frames),
            metric=metric,
            tested=int(np.isfinite(frame["p"].to_numpy(dtype=float)).sum()),
        )
        out.append(frame)
    return out


def _untrained(frame: pd.DataFrame) -> np.ndarray:
    """Each row's ``not trained (...)`` verdict (``""`` where both arms trained)."""
    base = frame[frame["verdict"] == "baseline"]
    b_stalled, b_done = (int(base.iloc[0]["stalled"]), int(base.iloc[0]["completed"])) if len(base) else (0, 0)
    return np.array(
        [
            ""
            if row["verdict"] == "baseline"
            else stats.not_trained(int(row["stalled"]), int(row["completed"]), b_stalled, b_done)
            for _, row in frame.iterrows()
        ],
        dtype=object,
    )


def _judge(row: pd.Series, better_up: bool, alpha: float, m: int) -> tuple[str, float]:
    """One compared row's verdict (:func:`ablate.analysis.stats.verdict`) and its MDE at alpha/m (NaN: no t test)."""
    test = row["test"] if isinstance(row["test"], str) else ""
    difference = (row["diff"], row["diff_ci_low"], row["diff_ci_high"], row["p"], test, row["se"], row["df"])
    counts = (int(row["n_variant"]), int(row["n_baseline"]), int(row["pairs"]))
    comparison = stats.Comparison(*difference, *counts, row["margin"], row["p_tost"], shift=row["shift"])
    tested = comparison.tested and comparison.test != "worst-rank"
    mde = stats.mde(row["se"], row["df"], alpha / max(m, 1)) if tested else math.nan
    seeds = (int(row["diverged"]), int(row["seeds"]), int(row["baseline_diverged"]), int(row["baseline_seeds"]))
    stalled = (int(row["stalled"]), int(row["completed"]))
    return stats.verdict(comparison, row["p_holm"], better_up, *seeds, alpha, row["p_tost_holm"], *stalled), mde
