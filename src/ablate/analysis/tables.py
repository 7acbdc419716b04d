"""The summary table of a sweep: one row per variant, its metrics as mean ± std over the seeds that
*completed* (diverged and crashed ones are counted instead), the paper's number, the late slope,
wall time, throughput and cost; with a baseline, the statistics of :mod:`~ablate.analysis.comparison`.
"""

from __future__ import annotations

import math

import pandas as pd

from ablate.analysis import budget
from ablate.analysis.comparison import compare_to_baseline, margin_for, status_counts
from ablate.analysis.convergence import is_stalled, late_change
from ablate.analysis.job import Job
from ablate.analysis.paper import PaperResults
from ablate.analysis.runs import Sweep
from ablate.analysis.stats import mean_std
from ablate.tasks import TASKS

THROUGHPUT = "train/tokens_per_sec"


def available_metrics(sweep: Sweep) -> list[str]:
    names: set[str] = set()
    for job in sweep.jobs:
        names |= set(job.metrics.columns) | set(job.record.get("metrics") or {})
    return sorted(names)


def pick_metric(sweep: Sweep, metric: str | None = None) -> str:
    """``metric`` if given (it must have been logged), else the task's headline metric."""
    chosen = metric or TASKS[sweep.task].headline_metric
    logged = available_metrics(sweep)
    if chosen not in logged and any(job.status == "completed" for job in sweep.jobs):
        candidates = ", ".join(m for m in logged if m.startswith(("val/", "test/"))) or "none"
        raise ValueError(f"--metric {chosen}: no job of {sweep.source} logged it; logged metrics: {candidates}")
    return chosen


def test_metric(sweep: Sweep, metric: str) -> str | None:
    """``val/bleu`` -> ``test/bleu`` when some job logged it."""
    name = "test/" + metric.split("/", 1)[1] if metric.startswith("val/") else None
    return name if name and name in available_metrics(sweep) else None


def _number(value: object) -> float:
    """A recorded number, NaN when absent or not a number (a job that crashed before timing)."""
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return math.nan


def variant_row(
    sweep: Sweep, key: tuple, jobs: list[Job], metric: str, test: str | None, paper: PaperResults | None
) -> dict[str, object]:
    """One summary row (numbers, not formatted) for the ``jobs`` of one variant."""
    done = [job for job in jobs if job.measured(metric)]
    row: dict[str, object] = dict(zip(sweep.axes, key))
    row.update(
        seeds=len(jobs), seed_values=",".join(str(j.seed) for j in jobs if j.seed is not None), **status_counts(jobs)
    )
    row["stalled"] = sum(is_stalled(job) for job in done)
    for name, values in (
        (f"{metric} final", [j.final(metric) for j in done]),
        (f"{metric} best", [j.best(metric) for j in done]),
        *(((f"{test}", [j.final(test) for j in done]),) if test else ()),
    ):
        row[f"{name} mean"], row[f"{name} std"] = mean_std(values)
    if paper is not None:
        match = paper.lookup(jobs[0])
        row[f"paper {paper.metric}"] = match.value if match else None
        row["paper note"] = match.note if match else ""
    steps = [int(_number(j.record["steps"])) for j in jobs if math.isfinite(_number(j.record.get("steps")))]
    row["steps_min"], row["steps_max"] = (min(steps), max(steps)) if steps else (None, None)
    row["wall_time_s"] = mean_std([_number(j.record.get("wall_time_s")) for j in jobs])[0]
    row["tokens_per_sec"] = mean_std([j.median(THROUGHPUT) for j in jobs])[0]
    row["late_change"], row["late_change_std"] = mean_std([late_change(j) for j in done])
    return row


def summarize(
    sweep: Sweep,
    metric: str | None = None,
    paper: PaperResults | None = None,
    baseline: str | None = None,
    basis: str = budget.DEFAULT_BASIS,
    margin: float | None = None,
    equivalence: tuple[str, ...] = (),
) -> pd.DataFrame:
    """The summary table as numbers; with ``baseline`` (``"axis=value,..."``) the statistics against
    that row, the TOST within ``margin`` asked of the rows ``equivalence`` names (default: all)."""
    budget.check_basis(basis)
    metric = pick_metric(sweep, metric)
    test = test_metric(sweep, metric)
    rows = [variant_row(sweep, key, jobs, metric, test, paper) for key, jobs in sweep.variants().items()]
    frame = pd.DataFrame(rows)
    left_out = [why for job in sweep.jobs if (why := job.unmeasured(metric))]
    frame.attrs.update(metric=metric, test=test, paper=paper, baseline=None, left_out=left_out)
    frame = budget.add_cost_columns(frame, sweep, metric)
    if baseline is not None:
        frame = compare_to_baseline(
            frame, sweep, baseline, basis=basis, margin=margin_for(sweep, metric, margin), equivalence=equivalence
        )
    return frame
