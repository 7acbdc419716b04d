"""The curves of a scaling sweep for :mod:`~ablate.analysis.scaling`: each variant's final loss
against its training compute (:func:`ablate.analysis.compute.job_compute`), one point per completed
(scale, seed) job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ablate.analysis.compute import job_compute
from ablate.analysis.job import higher_is_better
from ablate.analysis.runs import Sweep
from ablate.analysis.scaling import Curve
from ablate.analysis.specs import parse_baseline


def scaling_curves(
    sweep: Sweep, scale_key: str, metric: str = "val/loss", flops: str = "6N+attn", per_point: Sequence[str] = ()
) -> list[Curve]:
    """One :class:`Curve` per combination of the other axes (``per_point`` axes belong to a point)."""
    if higher_is_better(metric):
        raise ValueError(
            f"--metric {metric}: the fit L = E + A C^-alpha is for a loss that falls with compute "
            "(val/loss, val/ppl), not a metric that rises"
        )
    scale_key = sweep.full_name(scale_key)
    if scale_key not in sweep.axes:
        raise ValueError(
            f"--scale-key {scale_key} is not an axis of {sweep.source}; its axes are {', '.join(sweep.axes) or 'none'}"
        )
    others = [a for a in sweep.axes if a != scale_key and a not in per_point]
    names = sweep.short_names()
    curves: dict[tuple, Curve] = {}
    for job in sweep.jobs:
        key = tuple(job.value(a) for a in others)
        label = ", ".join(f"{names[a]}={v}" for a, v in zip(others, key)) or "all jobs"
        curve = curves.setdefault(key, Curve(label, dict(zip(others, key))))
        scale, loss = str(job.value(scale_key)), job.final(metric)
        if job.status != "completed" or not math.isfinite(loss):
            curve.failed.setdefault(scale, []).append(job.status)
            continue
        curve.scale.append(scale)
        curve.compute.append(job_compute(job, flops))
        curve.loss.append(loss)
        curve.seed.append(job.seed)
    return list(curves.values())


def find_curve(curves: list[Curve], spec: str, short_names: dict[str, str]) -> Curve:
    """The one curve whose axes match ``spec`` (``"act=gelu"``; axes by full or short name)."""
    wanted = parse_baseline(spec)
    full = {short: axis for axis, short in short_names.items()}
    matches = [c for c in curves if all(c.axes.get(full.get(k, k), "\0") == v for k, v in wanted.items())]
    if len(matches) != 1:
        found = "no curve" if not matches else f"{len(matches)} curves"
        raise ValueError(
            f"--baseline {spec}: matches {found}; the curves (the axes other than the scale key) are: "
            + "; ".join(c.label for c in curves)
        )
    return matches[0]
