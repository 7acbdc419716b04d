"""The summary table of a sweep: one row per configuration (variant), seeds aggregated.

Per variant: its axis values; the number of seeds (jobs) and how many completed, diverged and
crashed; the final and best validation metric (``val/ppl`` for language models, ``val/bleu`` for
translation) and the matching test metric as mean ± sample standard deviation (n - 1) over the
seeds that *completed* (a diverged seed's last validation predates its divergence, a crashed
one has none, so neither enters the mean: they are counted instead); the paper's number when a
paper file is given; steps, wall time and the median training throughput (tokens/s).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.analysis.paper import PaperResults
from ablate.analysis.runs import Job, Sweep

DEFAULT_METRIC = {"lm": "val/ppl", "translation": "val/bleu"}
THROUGHPUT = "train/tokens_per_sec"


def available_metrics(sweep: Sweep) -> list[str]:
    names: set[str] = set()
    for job in sweep.jobs:
        names |= set(job.metrics.columns) | set((job.record.get("metrics") or {}))
    return sorted(names)


def pick_metric(sweep: Sweep, metric: str | None = None) -> str:
    """``metric`` if given (it must have been logged), else the task's headline metric."""
    chosen = metric or DEFAULT_METRIC[sweep.task]
    logged = available_metrics(sweep)
    if chosen not in logged and any(job.status == "completed" for job in sweep.jobs):
        candidates = ", ".join(m for m in logged if m.startswith(("val/", "test/"))) or "none"
        raise ValueError(f"--metric {chosen}: no job of {sweep.source} logged it; logged metrics: {candidates}")
    return chosen


def test_metric(sweep: Sweep, metric: str) -> str | None:
    """``val/bleu`` -> ``test/bleu`` when some job logged it."""
    name = "test/" + metric.split("/", 1)[1] if metric.startswith("val/") else None
    return name if name and name in available_metrics(sweep) else None


def mean_std(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (ddof=1; NaN for fewer than two values), NaNs ignored."""
    finite = [v for v in values if not math.isnan(v)]
    if not finite:
        return math.nan, math.nan
    return float(np.mean(finite)), float(np.std(finite, ddof=1)) if len(finite) > 1 else math.nan


def _counts(jobs: list[Job]) -> dict[str, int]:
    return {status: sum(job.status == status for job in jobs) for status in ("completed", "diverged", "crashed", "incomplete")}


def variant_row(sweep: Sweep, key: tuple, jobs: list[Job], metric: str, test: str | None,
                paper: PaperResults | None) -> dict[str, object]:
    """One summary row (numbers, not formatted) for the ``jobs`` of one variant."""
    done = [job for job in jobs if job.status == "completed"]
    row: dict[str, object] = dict(zip(sweep.axes, key))
    row.update(seeds=len(jobs), seed_values=",".join(str(j.seed) for j in jobs if j.seed is not None), **_counts(jobs))
    for name, values in ((f"{metric} final", [j.final(metric) for j in done]),
                         (f"{metric} best", [j.best(metric) for j in done]),
                         *(((f"{test}", [j.final(test) for j in done]),) if test else ())):
        row[f"{name} mean"], row[f"{name} std"] = mean_std(values)
    if paper is not None:
        match = paper.lookup(jobs[0])
        row[f"paper {paper.metric}"] = match.value if match else None
        row["paper note"] = match.note if match else ""
    steps = [int(j.record["steps"]) for j in jobs if j.record.get("steps") is not None]
    row["steps_min"], row["steps_max"] = (min(steps), max(steps)) if steps else (None, None)
    row["wall_time_s"] = mean_std([float(j.record.get("wall_time_s", math.nan)) for j in jobs])[0]
    row["tokens_per_sec"] = mean_std([j.median(THROUGHPUT) for j in jobs])[0]
    return row


def summarize(sweep: Sweep, metric: str | None = None, paper: PaperResults | None = None) -> pd.DataFrame:
    """The summary table as numbers: one row per variant (see the module docstring)."""
    metric = pick_metric(sweep, metric)
    test = test_metric(sweep, metric)
    rows = [variant_row(sweep, key, jobs, metric, test, paper) for key, jobs in sweep.variants().items()]
    frame = pd.DataFrame(rows)
    frame.attrs.update(metric=metric, test=test, paper=paper)
    return frame


# ----------------------------------------------------------------------------- Markdown


def fmt(value: float, std: float = math.nan) -> str:
    """``55.9 ± 0.22``; ``—`` for a missing value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    text = f"{value:.4g}"
    return text if math.isnan(std) else f"{text} ± {std:.2g}"


def _diverged(row: pd.Series) -> str:
    n = int(row["diverged"])
    return f"yes ({n}/{int(row['seeds'])})" if n else "no"


def _steps(row: pd.Series) -> str:
    low, high = row["steps_min"], row["steps_max"]
    if low is None or pd.isna(low):
        return "—"
    return f"{int(low)}" if low == high else f"{int(low)}–{int(high)}"


def _paper(value: object, note: str) -> str:
    text = fmt(value) if isinstance(value, float) else ("—" if value is None else str(value))
    return f"{text} ({note})" if note else text


def markdown_table(frame: pd.DataFrame, sweep: Sweep) -> str:
    """The summary as a Markdown table with a legend underneath."""
    metric, test, paper = frame.attrs["metric"], frame.attrs["test"], frame.attrs["paper"]
    names = sweep.short_names()
    failed = bool((frame["crashed"] + frame["incomplete"]).sum())
    header = [names[a] for a in sweep.axes] + ["seeds", f"{metric} final", f"{metric} best"]
    header += [test] if test else []
    header += [f"paper {paper.metric}"] if paper else []
    header += ["diverged"] + (["crashed"] if failed else []) + ["steps", "wall time (s)", "tokens/s"]
    align = [" --- " if i < len(sweep.axes) else " ---: " for i in range(len(header))]  # axes left, numbers right
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for _, row in frame.iterrows():
        cells = [str(row[a]) for a in sweep.axes] + [str(int(row["seeds"]))]
        cells += [fmt(row[f"{metric} {kind} mean"], row[f"{metric} {kind} std"]) for kind in ("final", "best")]
        cells += [fmt(row[f"{test} mean"], row[f"{test} std"])] if test else []
        cells += [_paper(row[f"paper {paper.metric}"], row["paper note"])] if paper else []
        cells += [_diverged(row)]
        cells += [f"{int(row['crashed'] + row['incomplete'])}/{int(row['seeds'])}"] if failed else []
        rate = "—" if pd.isna(row["tokens_per_sec"]) else f"{row['tokens_per_sec']:.0f}"
        cells += [_steps(row), fmt(row["wall_time_s"]), rate]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + legend(frame, sweep)


def legend(frame: pd.DataFrame, sweep: Sweep) -> str:
    metric, paper = frame.attrs["metric"], frame.attrs["paper"]
    best = "maximum" if metric.endswith(("bleu", "acc", "accuracy")) else "minimum"
    notes = [f"Sweep: {sweep.source} ({len(sweep.jobs)} jobs; axes: {', '.join(sweep.axes) or 'none'}).",
             f"Metrics: mean ± sample std (n-1) over the seeds that completed; final = last validation, best = its {best}. "
             "Diverged and crashed seeds are counted, not averaged. Wall time: mean per job; tokens/s: median over training."]
    if paper is not None:
        notes.append(f"Paper: {paper.metric} from {paper.source or 'the paper file'}.")
    failed = [job for job in sweep.jobs if job.status in ("crashed", "incomplete")]
    for job in failed:
        why = (job.record.get("error") or "no status.json: still running, or killed").strip().splitlines()[0]
        notes.append(f"{job.status}: {job.name}: {why}")
    return "\n".join(notes) + "\n"


def write_summary(frame: pd.DataFrame, markdown: str, out_dir: str | Path) -> tuple[Path, Path]:
    """``summary.csv`` (numbers) and ``summary.md`` (the table as printed) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / "summary.csv", out / "summary.md"
    frame.to_csv(csv_path, index=False)
    md_path.write_text(markdown)
    return csv_path, md_path
