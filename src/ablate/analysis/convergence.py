"""Has a run stopped improving? The slope of its validation loss at the end, per 10% of the run.

A comparison at a fixed budget ranks how far each variant got, which is what it would converge to
only when the curves have flattened. The late slope says how far they are from that: the change
of ``val/loss`` between the run's last two validations, divided by the steps between them and
multiplied by 10% of the run's steps (in nats: what the run gained per tenth of training at its
end). The validation loss, not the training loss, because it is measured on the same fixed text
every time: a line through single-batch training losses (translation batches especially) is
mostly noise over a short window. The price: on a decelerating curve the secant over the last
validation interval (e.g. the last 20% of a run that validates 5 times) is steeper than the slope
at the very end, so the number errs towards "still falling". A gap between variants that is small
next to it may still close or reverse with more steps.
"""

from __future__ import annotations

import math

from ablate.analysis.runs import Job

LATE_FRACTION = 0.1
LATE_METRIC = "val/loss"


def late_change(job: Job, metric: str = LATE_METRIC, fraction: float = LATE_FRACTION) -> float:
    """The change of ``metric`` per ``fraction`` of ``job``'s steps between its last two logged
    values (negative: still falling); NaN with fewer than two."""
    series = job.series(metric)
    if len(series) < 2:
        return math.nan
    (s0, s1), (v0, v1) = series.index[-2:], series.iloc[-2:]
    last = float(job.record.get("steps") or s1)
    return float((v1 - v0) / (s1 - s0) * fraction * last) if s1 > s0 else math.nan
