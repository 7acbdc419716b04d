"""The numbers behind the comparison figures: one tidy table per figure, seeds aggregated.

* :func:`length_series`: test perplexity against the evaluation length (``test/ppl@<len>``,
  logged by ``eval.seq_lens``), per variant: the length-extrapolation curve of Press et al. 2022,
  Fig. 1;
* :func:`axis_series`: a final metric against a numeric axis (``model.n_layers``, ``optim.lr``),
  one line per value of the other axes, with diverged and stuck jobs counted;
* :func:`paper_series` and :func:`spearman`: our metric per variant beside a paper's number, in
  the paper's order, and the rank correlation of the two.

Every table has ``mean``, ``std`` (sample, n - 1), ``min``, ``max`` and ``n`` over the seeds
that completed (a diverged seed's last value predates its divergence); ``figures.py`` draws the
mean as the line and ``min``..``max`` as the band, and ``scripts/plot.py`` writes each table
beside its figure as CSV.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd

from ablate.analysis.paper import PaperResults
from ablate.analysis.runs import Job, Sweep, higher_is_better

LENGTH_METRIC = re.compile(r"^test/ppl@(?P<length>\d+)$")
STUCK_METRIC = "val/loss"
STUCK_TOLERANCE = 0.01  # relative: a trained run's val/loss falls by far more between its validations
_STATS = ["mean", "std", "min", "max", "n"]


def seed_stats(values: list[float]) -> dict[str, float]:
    """Mean, sample std (NaN for one value), min, max and count of the finite ``values``."""
    finite = np.array([v for v in values if v is not None and math.isfinite(v)], dtype=float)
    if not len(finite):
        return {"mean": math.nan, "std": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    std = float(np.std(finite, ddof=1)) if len(finite) > 1 else math.nan
    return {"mean": float(finite.mean()), "std": std, "min": float(finite.min()), "max": float(finite.max()),
            "n": len(finite)}


def completed(jobs: list[Job]) -> list[Job]:
    return [job for job in jobs if job.status == "completed"]


# ----------------------------------------------------------------------------- length extrapolation


def eval_lengths(sweep: Sweep) -> list[int]:
    """The lengths L of the ``test/ppl@L`` metrics any job logged (``eval.seq_lens``), sorted."""
    names = {name for job in sweep.jobs for name in (*job.metrics.columns, *(job.record.get("metrics") or {}))}
    return sorted(int(m["length"]) for name in names if (m := LENGTH_METRIC.match(name)))


def training_length(sweep: Sweep) -> int | None:
    """``data.seq_len`` when all jobs share it (the L that the figure marks), else None."""
    values = {job.value("data.seq_len") for job in sweep.jobs} - {None, "null"}
    return int(float(values.pop())) if len(values) == 1 else None


def length_series(sweep: Sweep) -> pd.DataFrame:
    """One row per (variant, length) that some completed seed scored: ``variant``, ``length`` and
    the seed statistics of ``test/ppl@<length>``. A length a variant skipped (``pos=learned``
    beyond its position table) has no row, rather than a gap drawn as zero."""
    rows = []
    for key, jobs in sweep.variants().items():
        for length in eval_lengths(sweep):
            stats = seed_stats([job.final(f"test/ppl@{length}") for job in completed(jobs)])
            if stats["n"]:
                rows.append({"variant": sweep.label(key), "length": length, **stats})
    return pd.DataFrame(rows, columns=["variant", "length", *_STATS])


# ----------------------------------------------------------------------------- metric against an axis


def _number(value: str | None) -> float | None:
    if value is None or value in ("true", "false", "null"):
        return None
    try:
        return float(value)
    except ValueError:
        return None


def numeric_axes(sweep: Sweep) -> list[str]:
    """The axes whose value is a number in every job (``model.n_layers``, ``optim.lr``)."""
    return [axis for axis in sweep.axes if all(_number(job.value(axis)) is not None for job in sweep.jobs)]


def is_stuck(job: Job, tolerance: float = STUCK_TOLERANCE) -> bool:
    """A completed job that did not learn: its ``val/loss`` fell by less than ``tolerance``
    (relative) from its first validation to its last, e.g. a deep Post-LN model that sits at the
    unigram loss for the whole run. Undecidable, hence False, with fewer than two validations."""
    values = job.series(STUCK_METRIC).replace([np.inf, -np.inf], np.nan).dropna()
    if job.status != "completed" or len(values) < 2:
        return False
    first, last = float(values.iloc[0]), float(values.iloc[-1])
    return first - last < tolerance * abs(first)


def axis_series(sweep: Sweep, axis: str, metric: str) -> pd.DataFrame:
    """One row per (line, axis value): ``line`` names the other axes' values (``norm=post``),
    ``x`` is the axis value as a number, then the seed statistics of ``metric``'s final value over
    the completed seeds, ``stuck`` (how many of those are :func:`is_stuck`), ``failed`` (seeds
    that diverged, crashed or never finished: not in the statistics) and ``failed_status``."""
    if axis not in sweep.axes:
        raise ValueError(f"{axis} is not an axis of {sweep.source}; its axes are {', '.join(sweep.axes) or 'none'}")
    others = [a for a in sweep.axes if a != axis]
    names = sweep.short_names()
    rows = []
    for key, jobs in sweep.variants().items():
        values = dict(zip(sweep.axes, key))
        line = ", ".join(f"{names[a]}={values[a]}" for a in others) or "all jobs"
        failed = [job for job in jobs if job.status != "completed"]
        rows.append({"line": line, "x": _number(values[axis]),
                     **seed_stats([job.final(metric) for job in completed(jobs)]),
                     "stuck": sum(is_stuck(job) for job in jobs), "failed": len(failed),
                     "failed_status": ",".join(sorted({job.status for job in failed}))})
    frame = pd.DataFrame(rows, columns=["line", "x", *_STATS, "stuck", "failed", "failed_status"])
    order = {line: i for i, line in enumerate(dict.fromkeys(frame["line"]))}  # lines in run order
    return frame.sort_values(["line", "x"], key=lambda c: c.map(order) if c.name == "line" else c).reset_index(drop=True)


# ----------------------------------------------------------------------------- paper comparison


def spearman(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> float:
    """Spearman's rank correlation: Pearson's correlation of the ranks, tied values sharing their
    average rank (Spearman 1904; for untied data it equals 1 - 6 sum d^2 / (n (n^2 - 1))). NaN for
    fewer than two pairs or a constant side. Written out because scipy is not a dependency."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} values against {len(y)}")
    rx, ry = pd.Series(x).rank(method="average").to_numpy(), pd.Series(y).rank(method="average").to_numpy()
    if len(x) < 2 or rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def paper_series(sweep: Sweep, paper: PaperResults, metric: str, kind: str = "final") -> pd.DataFrame:
    """One row per variant that a numeric paper row matches, best paper value first (so the same
    order on our side means the ranking is reproduced): ``variant``, ``paper``, the seed
    statistics of our ``kind`` (``final`` or ``best``) value of ``metric``, and ``seeds`` (the
    completed seeds' values, for drawing them as dots)."""
    if kind not in ("final", "best"):
        raise ValueError(f"kind={kind!r}: use 'final' or 'best'")
    rows = []
    for key, jobs in sweep.variants().items():
        match = paper.lookup(jobs[0])
        if match is None or not isinstance(match.value, float):
            continue
        values = [getattr(job, kind)(metric) for job in completed(jobs)]
        rows.append({"variant": sweep.label(key), "paper": match.value, **seed_stats(values),
                     "seeds": [v for v in values if math.isfinite(v)]})
    frame = pd.DataFrame(rows, columns=["variant", "paper", *_STATS, "seeds"])
    if frame.empty:
        raise ValueError(f"no variant of {sweep.source} matches a paper row with a numeric value "
                         f"({paper.source or 'the paper file'}): rows whose value is text cannot be plotted, and each "
                         "row's `axes` must name the sweep's keys and values (its axes: " + ", ".join(sweep.axes) + ")")
    ascending = not higher_is_better(paper.metric)
    return frame.sort_values("paper", ascending=ascending, kind="stable").reset_index(drop=True)


def paper_rank_correlation(frame: pd.DataFrame) -> float:
    """Spearman's rho between the paper's numbers and our means (variants without a mean left out)."""
    rows = frame[frame["mean"].notna()]
    return spearman(rows["paper"].to_numpy(), rows["mean"].to_numpy())

