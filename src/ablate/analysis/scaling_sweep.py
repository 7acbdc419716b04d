"""The curves of a scaling sweep: each variant's final loss against its training compute, one
point per completed (scale, seed) job, read from a sweep for :mod:`~ablate.analysis.scaling`
(the effective compute multiplier; the power-law fit in :mod:`~ablate.analysis.power_law`).

Compute per job (:func:`ablate.analysis.compute.job_compute`): training FLOPs per token times tokens seen, tokens =
optimiser steps x ``data.batch_size`` (sequences per step, all devices) x ``data.seq_len`` for a
language model; for translation ``data.batch_size`` x ``data.max_tokens`` (the padded token
budget of a batch, an upper bound). FLOPs per token: ``6N+attn`` (default) is
:func:`ablate.nn.flops.flops_per_token`, 6 N + 12 L d T (the same count as
``train/mfu``), ``6N`` is Kaplan et al.'s C = 6 N D; N = ``params`` of ``status.json`` (all
parameters, embeddings included).
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
    """One :class:`Curve` per combination of the sweep's other axes (a variant), in run order, its
    points the completed jobs' final ``metric`` against :func:`job_compute`. Axes in ``per_point``
    belong to a point, not to a variant: a ``tune=lr`` sweep's ``optim.lr``, tuned at each scale,
    so one variant's curve joins its best rate at every size."""
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
