"""The numbers behind the comparison figures: one tidy table per figure, with ``mean``, ``std``
(n - 1), ``min``, ``max`` and ``n`` over the seeds that completed (the line and the band).
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np
import pandas as pd

from ablate.analysis.job import Job, higher_is_better
from ablate.analysis.paper import PaperResults
from ablate.analysis.runs import Sweep, shared_number
from ablate.tasks import TASKS

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
    return dict(mean=float(finite.mean()), std=std, min=float(finite.min()), max=float(finite.max()), n=len(finite))


def completed(jobs: list[Job]) -> list[Job]:
    return [job for job in jobs if job.status == "completed"]


# ----------------------------------------------------------------------------- length extrapolation


def eval_lengths(sweep: Sweep) -> list[int]:
    """The lengths L of the ``test/ppl@L`` metrics any job logged (``eval.seq_lens``), sorted."""
    names = {name for job in sweep.jobs for name in (*job.metrics.columns, *(job.record.get("metrics") or {}))}
    return sorted(int(m["length"]) for name in names if (m := LENGTH_METRIC.match(name)))


def training_length(sweep: Sweep) -> int | None:
    """``data.seq_len`` when all jobs share it (the L that the figure marks), else None."""
    length = shared_number(sweep.jobs, "data.seq_len")
    return None if length is None else int(length)


def length_series(sweep: Sweep) -> pd.DataFrame:
    """One row per (variant, length) some completed seed scored: the statistics of ``test/ppl@<length>``."""
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
    """A completed job that did not learn (:func:`~ablate.analysis.convergence.is_stalled`)."""
    from ablate.analysis.convergence import is_stalled

    return is_stalled(job, tolerance, STUCK_METRIC)


def axis_series(sweep: Sweep, axis: str, metric: str) -> pd.DataFrame:
    """One row per (line, axis value): the statistics of the final ``metric``, stuck and failed seeds."""
    if axis not in sweep.axes:
        raise ValueError(f"{axis} is not an axis of {sweep.source}; its axes are {', '.join(sweep.axes) or 'none'}")
    others = [a for a in sweep.axes if a != axis]
    names = sweep.short_names()
    rows = []
    for key, jobs in sweep.variants().items():
        values = dict(zip(sweep.axes, key))
        line = ", ".join(f"{names[a]}={values[a]}" for a in others) or "all jobs"
        failed = [job for job in jobs if job.status != "completed"]
        rows.append(
            {
                "line": line,
                "x": _number(values[axis]),
                **seed_stats([job.final(metric) for job in completed(jobs)]),
                "stuck": sum(is_stuck(job) for job in jobs),
                "failed": len(failed),
                "failed_status": ",".join(sorted({job.status for job in failed})),
            }
        )
    frame = pd.DataFrame(rows, columns=["line", "x", *_STATS, "stuck", "failed", "failed_status"])
    order = {line: i for i, line in enumerate(dict.fromkeys(frame["line"]))}  # lines in run order
    return frame.sort_values(["line", "x"], key=lambda c: c.map(order) if c.name == "line" else c).reset_index(
        drop=True
    )


# ----------------------------------------------------------------------------- paper comparison


def spearman(x: list[float] | np.ndarray, y: list[float] | np.ndarray) -> float:
    """Spearman's rank correlation (Spearman 1904); NaN for fewer than two pairs or a constant side."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} values against {len(y)}")
    rx, ry = pd.Series(x).rank(method="average").to_numpy(), pd.Series(y).rank(method="average").to_numpy()
    if len(x) < 2 or rx.std() == 0 or ry.std() == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])


def paper_series(sweep: Sweep, paper: PaperResults, metric: str, kind: str = "final") -> pd.DataFrame:
    """One row per variant a numeric paper row matches, best paper value first, with our statistics."""
    if kind not in ("final", "best"):
        raise ValueError(f"kind={kind!r}: use 'final' or 'best'")
    rows = []
    for key, jobs in sweep.variants().items():
        match = paper.lookup(jobs[0])
        if match is None or not isinstance(match.value, float):
            continue
        values = [getattr(job, kind)(metric) for job in completed(jobs)]
        rows.append(
            {
                "variant": sweep.label(key),
                "paper": match.value,
                **seed_stats(values),
                "seeds": [v for v in values if math.isfinite(v)],
            }
        )
    frame = pd.DataFrame(rows, columns=["variant", "paper", *_STATS, "seeds"])
    if frame.empty:
        raise ValueError(
            f"no variant of {sweep.source} matches a paper row with a numeric value "
            f"({paper.source or 'the paper file'}): rows whose value is text cannot be plotted, and each "
            "row's `axes` must name the sweep's keys and values (its axes: " + ", ".join(sweep.axes) + ")"
        )
    ascending = not higher_is_better(paper.metric)
    return frame.sort_values("paper", ascending=ascending, kind="stable").reset_index(drop=True)


def paper_rank_correlation(frame: pd.DataFrame) -> float:
    """Spearman's rho between the paper's numbers and our means (variants without a mean left out)."""
    rows = frame[frame["mean"].notna()]
    return spearman(rows["paper"].to_numpy(), rows["mean"].to_numpy())


# ----------------------------------------------------------------------------- config values


_REFERENCE = re.compile(r"^\$\{([\w.]+)\}$")


def config_value(job: Job, key: str) -> Any:
    """:meth:`Job.value` of ``key``, a plain reference such as ``${trainer.max_steps}`` followed."""
    value = job.value(key)
    for _ in range(10):  # a chain of references, not a loop
        match = _REFERENCE.match(value) if isinstance(value, str) else None
        if match is None:
            return value
        value = job.value(match[1])
    return value


def config_number(job: Job, key: str) -> float | None:
    """``key``'s value as a number; None when unset (``null``) or not a number."""
    return _number(config_value(job, key))


# ----------------------------------------------------------------------------- learning rate


LR_METRIC = "train/lr"
LR_TOLERANCE = 1e-5  # relative: train/lr is logged as float32


def trained_steps(job: Job) -> int:
    """The optimiser steps the job took: ``status.json``'s ``steps``, else one past the last logged."""
    steps = _number(job.record.get("steps"))
    if steps is not None:
        return int(steps)
    return int(job.metrics.index.max()) + 1 if len(job.metrics) else 0


def lr_schedule(job: Job) -> pd.Series:
    """The learning rate of every step, recomputed from the config as :func:`ablate.optim.build_schedule`
    does; ValueError naming a missing config value."""
    from ablate.optim import SCHEDULES  # imports torch: only when a figure needs it

    name = config_value(job, "optim.schedule")
    if name not in SCHEDULES:
        raise ValueError(f"{job.name}: optim.schedule={name!r} is not one of {', '.join(SCHEDULES)}")
    lr = config_number(job, "optim.lr")
    if lr is None:
        raise ValueError(f"{job.name}: optim.lr is not a number in its config")
    horizon = config_number(job, "optim.decay_steps") or config_number(job, "trainer.max_steps")
    if horizon is None or horizon <= 0:  # training bounded by epochs: the horizon was computed at run time
        raise ValueError(f"{job.name}: neither optim.decay_steps nor trainer.max_steps fixes the schedule's horizon")
    warmup = int(config_number(job, "optim.warmup_steps") or 0)
    min_ratio = config_number(job, "optim.min_lr_ratio") or 0.0
    steps = np.arange(trained_steps(job))
    fn = SCHEDULES[name]
    return pd.Series(
        [lr * fn(int(s), warmup, int(horizon), min_ratio) for s in steps],
        index=pd.Index(steps, name="step"),
        dtype=float,
        name=LR_METRIC,
    )


def lr_matches_log(job: Job, schedule: pd.Series, tolerance: float = LR_TOLERANCE) -> bool:
    """Whether ``schedule`` equals the logged ``train/lr`` at every step both have."""
    logged = job.series(LR_METRIC)
    common = logged.index.intersection(schedule.index)
    if len(common) < len(logged):  # logged steps beyond the recomputed range
        return False
    expected = schedule.loc[common].to_numpy()
    return bool(np.all(np.abs(logged.loc[common].to_numpy() - expected) <= tolerance * np.abs(expected) + 1e-30))


# ----------------------------------------------------------------------------- x axis of the curves


X_AXES = ("steps", "tokens", "time")
TOKENS_METRIC, TIME_METRIC, RATE_METRIC = "train/tokens_seen", "train/time_s", "train/tokens_per_sec"


def tokens_per_step(job: Job) -> int | None:
    """Training tokens per step fixed by the config (LM: batch x length); None otherwise."""
    spec = TASKS.get(job.task)
    if spec is None or not spec.fixed_batch_tokens:
        return None
    batch, length = config_number(job, "data.batch_size"), config_number(job, spec.batch_tokens_key)
    return int(batch * length) if batch and length else None


def _cumulative(job: Job, metric: str, steps: np.ndarray) -> np.ndarray:
    """A cumulative quantity at ``steps``: linear between logged steps, at its mean rate beyond."""
    values = job.series(metric).astype(float)
    xp, fp = np.concatenate([[-1.0], values.index.to_numpy(float)]), np.concatenate([[0.0], values.to_numpy()])
    out = np.interp(steps, xp, fp)
    beyond = steps > xp[-1]
    out[beyond] = fp[-1] / (xp[-1] + 1) * (steps[beyond] + 1)
    return out


def job_x(job: Job, steps, x: str = "steps") -> tuple[np.ndarray, str]:
    """The job's ``metrics.csv`` steps as the x of a curve (``steps``: ``s + 1``, the console's count;
    ``tokens``; ``time``, validation left out), and where the numbers come from; ValueError without."""
    steps = np.asarray(steps, dtype=float)
    if x == "steps":
        return steps + 1, "optimiser steps done"
    if x == "tokens":
        if (per_step := tokens_per_step(job)) is not None:
            return (steps + 1) * per_step, f"(step + 1) x {per_step} tokens per step"
        if len(job.series(TOKENS_METRIC)):
            return _cumulative(job, TOKENS_METRIC, steps), TOKENS_METRIC
        raise ValueError(
            f"{job.name}: no tokens per step in its config (data.batch_size x data.seq_len, LM only) "
            f"and no {TOKENS_METRIC} logged"
        )
    if x == "time":
        if len(job.series(TIME_METRIC)):
            return _cumulative(job, TIME_METRIC, steps), TIME_METRIC
        rate = job.series(RATE_METRIC).astype(float)
        rate = rate[rate > 0]
        per_step = tokens_per_step(job)
        if len(rate) and per_step is not None:
            last = int(max(steps.max(initial=0), rate.index.max()))
            held = (
                rate.reindex(np.arange(last + 1)).bfill().ffill()
            )  # a rate covers the steps up to where it was logged
            elapsed = np.cumsum(per_step / held.to_numpy())
            return np.interp(steps, np.arange(last + 1), elapsed), f"summed from {RATE_METRIC}"
        wall, total = _number(job.record.get("wall_time_s")), trained_steps(job)
        if wall is not None and total > 0:
            return wall * (steps + 1) / total, "status.json wall_time_s spread evenly (includes validation)"
        raise ValueError(
            f"{job.name}: neither {TIME_METRIC} nor {RATE_METRIC} logged, and no wall_time_s in status.json"
        )
    raise ValueError(f"x={x!r}: use one of {', '.join(X_AXES)}")
