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

from ablate.analysis.job import Job

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


STALL_TOLERANCE = 0.01
STALL_METRIC = "val/loss"


def is_stalled(job: Job, tolerance: float = STALL_TOLERANCE, metric: str = STALL_METRIC) -> bool:
    """A *completed* job that never left its starting plateau: its final ``val/loss`` is within
    ``tolerance`` (1%, relative) of its first validation's, i.e. it fell by less than 1% over the
    run (a deep Post-LN model that sits at the unigram loss throughout). Diverged and crashed jobs
    are never stalled (they have their own outcome); with fewer than two validations it is
    undecidable, hence False. The first validation is the reference because it is what every
    job logs; on a run whose first validation comes late (after the model already left the
    plateau) and whose curve is flat from then on this would flag a converged run: validate
    early (``trainer.val_check_interval``) when that matters."""
    if job.status != "completed":
        return False
    values = job.series(metric)
    values = values[values.map(lambda v: math.isfinite(v))]
    if len(values) < 2:
        return False
    first, last = float(values.iloc[0]), float(values.iloc[-1])
    return first - last < tolerance * abs(first)
