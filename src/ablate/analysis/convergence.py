"""Has a run stopped improving? A fixed budget ranks how far each variant got, which is where it
would converge only when the curves have flattened. The late slope: the change of ``val/loss``
(the same fixed text every time; single-batch training losses are mostly noise) between the last
two validations, per 10% of the run's steps. A secant, so it errs towards "still falling".
"""

from __future__ import annotations

import math

from ablate.analysis.job import Job

LATE_FRACTION = 0.1
LATE_METRIC = "val/loss"


def late_change(job: Job, metric: str = LATE_METRIC, fraction: float = LATE_FRACTION) -> float:
    """The change of ``metric`` per ``fraction`` of the steps over the last two logged values; NaN without."""
    series = job.series(metric)
    if len(series) < 2:
        return math.nan
    (s0, s1), (v0, v1) = series.index[-2:], series.iloc[-2:]
    last = float(job.record.get("steps") or s1)
    return float((v1 - v0) / (s1 - s0) * fraction * last) if s1 > s0 else math.nan


STALL_TOLERANCE = 0.01
STALL_METRIC = "val/loss"


def is_stalled(job: Job, tolerance: float = STALL_TOLERANCE, metric: str = STALL_METRIC) -> bool:
    """A *completed* job that never left its starting plateau: its final ``val/loss`` within 1%
    (relative) of its first validation's (a deep Post-LN model at the unigram loss throughout);
    False with fewer than two validations. A run whose first validation comes after it left the
    plateau and that is flat from then on would be flagged: validate early when that matters."""
    if job.status != "completed":
        return False
    values = job.series(metric)
    values = values[values.map(lambda v: math.isfinite(v))]
    if len(values) < 2:
        return False
    first, last = float(values.iloc[0]), float(values.iloc[-1])
    return first - last < tolerance * abs(first)
