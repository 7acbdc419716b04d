"""Has a run stopped improving? The change of its training loss over the last 10% of its steps.

A comparison at a fixed budget ranks how far each variant got, which is what it would converge to
only when the curves have flattened. The change over the end of the run says how far they are
from that: the slope of a least-squares line through the logged ``train/loss`` values of the last
``fraction`` of the steps, times the length of that window (in nats: what the run gained over its
last 10%). A gap between variants that is small next to it may still close or reverse with more
steps. The line, not the first and last values, because single-batch losses are noisy.
"""

from __future__ import annotations

import math

import numpy as np

from ablate.analysis.runs import Job

LATE_FRACTION = 0.1
LATE_METRIC = "train/loss"
MIN_POINTS = 3  # a line through fewer logged values says nothing


def late_change(job: Job, metric: str = LATE_METRIC, fraction: float = LATE_FRACTION) -> float:
    """The fitted change of ``metric`` over the last ``fraction`` of ``job``'s steps (negative:
    still falling); NaN when fewer than :data:`MIN_POINTS` values were logged in that window."""
    series = job.series(metric)
    if series.empty:
        return math.nan
    last = float(job.record.get("steps") or series.index.max())
    window = series[series.index >= last * (1 - fraction)]
    if len(window) < MIN_POINTS or window.index.nunique() < 2:
        return math.nan
    slope = np.polyfit(window.index.to_numpy(dtype=float), window.to_numpy(dtype=float), 1)[0]
    return float(slope * fraction * last)
