"""Successive halving over a ``tune=lr`` grid: a cheaper stage 1 (``hydra.sweeper.halving.rungs``).

Successive halving (Jamieson & Talwalkar 2016, "Non-stochastic Best Arm Identification and
Hyperparameter Optimization", AISTATS; the inner loop of Li et al. 2017, "Hyperband", JMLR 18) over
one variant's learning rates, the budget in optimiser steps; the chosen rate is the best finalist at
full length by the full-grid rule (:func:`ablate.sweepers.lr_selection.select_lr`). A rung is the
prefix of the full run: ``optim.decay_steps`` is the full length (the schedule's horizon),
``trainer.max_steps`` the rung's step, and a survivor resumes the previous rung's ``last.ckpt``, so
no step is trained twice and the final value is an uninterrupted run's (and the replay on a finished
grid's curves, ``benchmarks/lr_selection/halving_replay.py``, is exact).
Imported at Hydra's plugin scan: no pandas or analysis code.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any, Protocol

from ablate.config.dotted import override_key
from ablate.sweepers.job_dirs import quote
from ablate.sweepers.lr_selection import LRResult, Selection, job_dir_of, read_outcome, select_lr

log = logging.getLogger(__name__)

RUNGS_KEY = "hydra.sweeper.halving.rungs"
MAX_STEPS_KEY, DECAY_KEY, CKPT_KEY = "trainer.max_steps", "optim.decay_steps", "ckpt_path"
# a fraction names the whole step within this many steps, or this share of the run: 1/3 to 6 digits
# (0.333333) names step 400 of 1200, 1/6 to 4 digits (0.1667, 200.04) step 200
STEP_TOLERANCE, RELATIVE_STEP_TOLERANCE = 0.01, 1e-4
ELIMINATED = "eliminated"  # the status of a rate that a rung left behind (it has no full-length value)
RULE = (
    "successive halving (Jamieson & Talwalkar 2016; Li et al. 2017): at each rung the better floor(n/2) "
    "(at least 1) of the rates still running, by the metric at the rung's step, continue from their checkpoint; "
    "diverged or crashed rank last and never continue; the chosen rate is the best finalist at full length"
)


# --------------------------------------------------------------------------- the plan (pure)


def check_rungs(rungs: Any) -> tuple[float, ...]:
    """``hydra.sweeper.halving.rungs``: empty (halving off) or fractions of ``trainer.max_steps``
    strictly increasing in (0, 1); ValueError naming the key otherwise."""
    if rungs is None:
        return ()
    values = list(rungs) if isinstance(rungs, Iterable) and not isinstance(rungs, (str, bytes, Mapping)) else None
    if (
        values is None
        or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < 1 for v in values)
        or any(b <= a for a, b in pairwise(values))
    ):
        raise ValueError(
            f"{RUNGS_KEY}={rungs!r}: give fractions of trainer.max_steps, strictly increasing in (0, 1), "
            "e.g. [0.25,0.5]; [] or null: no halving"
        )
    return tuple(float(v) for v in values)


def rung_steps(
    fractions: Sequence[float],
    max_steps: Any,
    val_check_interval: Any = None,
    decay_steps: Any = None,
    label: str = "",
    key: str = RUNGS_KEY,
) -> tuple[int, ...]:
    """The steps at which the grid is cut (``fraction x max_steps``, each a whole validation step, so
    that every rung's value was measured), then ``max_steps``; the schedule's horizon must be
    ``max_steps``. ValueError naming ``key`` and what is valid; ``label`` names the variant."""
    where = f" ({label})" if label else ""
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps <= 0:
        raise ValueError(
            f"{key}: trainer.max_steps={max_steps!r}{where}: halving cuts the run at fractions of "
            "trainer.max_steps; give a positive number of steps"
        )
    if decay_steps is not None and decay_steps != max_steps:
        raise ValueError(
            f"{key}: optim.decay_steps={decay_steps}{where} is not trainer.max_steps={max_steps}: halving needs "
            "the schedule's horizon to be the full run; use optim.decay_steps=null"
        )
    if isinstance(val_check_interval, bool) or not isinstance(val_check_interval, int) or val_check_interval <= 0:
        raise ValueError(
            f"{key}: trainer.val_check_interval={val_check_interval!r}{where}: halving ranks the rates at "
            "validation steps; give a whole number of optimiser steps"
        )
    valid = [s / max_steps for s in range(val_check_interval, max_steps, val_check_interval)]
    shown = ", ".join(f"{f:g}" for f in valid[:8]) + (f", ... ({len(valid)} in all)" if len(valid) > 8 else "")
    steps = []
    for fraction in fractions:
        exact = fraction * max_steps
        step = round(exact)
        if abs(exact - step) > max(STEP_TOLERANCE, RELATIVE_STEP_TOLERANCE * max_steps) or step <= 0:
            raise ValueError(
                f"{key}: {fraction:g} x trainer.max_steps={max_steps} = {exact:g}{where} is not a whole number "
                f"of steps; validation steps are at {shown or 'none'}"
            )
        if step % val_check_interval:
            raise ValueError(
                f"{key}: step {step} ({fraction:g} x {max_steps}){where} is not a validation step (every "
                f"trainer.val_check_interval={val_check_interval}): no value is measured there; valid: {shown or 'none'}"
            )
        steps.append(step)
    return (*steps, max_steps)


def config_rung_steps(cfg: Any, fractions: Sequence[float], label: str = "") -> tuple[int, ...]:
    """:func:`rung_steps` of a composed job config, which needs ``callbacks.checkpoint_last``."""
    from omegaconf import OmegaConf

    def get(key: str) -> Any:
        return OmegaConf.select(cfg, key)

    if get("callbacks.checkpoint_last") is None:
        raise ValueError(
            f"{RUNGS_KEY}: callbacks.checkpoint_last is null ({label or 'the sweep'}): survivors continue from "
            "checkpoints/last.ckpt; keep callbacks.checkpoint_last, or give no rungs"
        )
    return rung_steps(fractions, get(MAX_STEPS_KEY), get("trainer.val_check_interval"), get(DECAY_KEY), label)


def keep_count(n: int) -> int:
    """How many of ``n`` rates go on from a rung: the better half, ``floor(n/2)``, at least 1."""
    return max(1, n // 2)


def segment_counts(n_rates: int, n_rungs: int) -> list[int]:
    """How many rates train each segment (start -> rung 1 -> ... -> full length) when none diverges."""
    counts = [n_rates]
    for _ in range(n_rungs):
        counts.append(keep_count(counts[-1]))
    return counts


def compute_fraction(n_rates: int, fractions: Sequence[float]) -> float:
    """Stage 1's planned steps over the full grid's: 5 rates at ``[0.25, 0.5]`` ->
    ``(5·¼ + 2·¼ + 1·½) / 5 = 0.45``."""
    bounds = [0.0, *fractions, 1.0]
    counts = segment_counts(n_rates, len(fractions))
    return sum(c * (b - a) for c, a, b in zip(counts, bounds, bounds[1:])) / n_rates


def reached_fraction(reached: Sequence[int], max_steps: int) -> float:
    """The steps each rate was scheduled to (the step of its last rung) over the full grid's."""
    return sum(reached) / (len(reached) * max_steps) if reached else 0.0


# --------------------------------------------------------------------------- survivors (pure)


@dataclass
class RungOutcome:
    """One rate's outcome at one rung: the job that trained it there and the metric at that step."""

    step: int
    status: str  # completed | diverged | crashed | incomplete
    value: float | None  # measured at ``step``; None when not finite or not measured
    job: str | None = None  # the job directory's name (sweeper) or None (replay)

    @property
    def usable(self) -> bool:
        return self.status == "completed" and self.value is not None and math.isfinite(self.value)


@dataclass
class RateTrack:
    """One learning rate of a variant through the rungs."""

    lr: float
    text: str  # as the override spells it
    rungs: list[RungOutcome] = field(default_factory=list)
    eliminated_at: int | None = None  # the rung step that left it behind
    job_dir: Path | None = None  # the directory of its latest job (the sweeper resumes its last.ckpt)

    @property
    def running(self) -> bool:
        return self.eliminated_at is None

    def result(self, full_steps: int) -> LRResult:
        """Its result for :func:`select_lr`: a finalist's full-length outcome; any other rate has no value."""
        last = self.rungs[-1] if self.rungs else None
        if last is None or self.eliminated_at is not None or last.step != full_steps:
            status = ELIMINATED if self.eliminated_at is not None else (last.status if last else "incomplete")
            return LRResult(self.lr, self.text, status, None, last.job if last else None)
        return LRResult(self.lr, self.text, last.status, last.value if last.usable else None, last.job)


def rank(tracks: Sequence[RateTrack], higher_is_better: bool) -> list[RateTrack]:
    """Best first by the latest rung's value, ties to the smaller rate; an unusable value ranks last."""

    def key(track: RateTrack) -> tuple[int, float, float]:
        last = track.rungs[-1] if track.rungs else None
        if last is None or not last.usable:
            return (1, 0.0, track.lr)
        value = float(last.value)  # type: ignore[arg-type]  # usable: a finite value
        return (0, -value if higher_is_better else value, track.lr)

    return sorted(tracks, key=key)


def halve(tracks: Sequence[RateTrack], step: int, higher_is_better: bool) -> list[RateTrack]:
    """Keep the better ``floor(n/2)`` (at least 1) of the rates running at rung ``step``, never one
    without a usable value; the others are marked eliminated. Returns the survivors, ascending."""
    running = [t for t in tracks if t.running]
    ranked = rank(running, higher_is_better)
    kept = [t for t in ranked[: keep_count(len(running))] if t.rungs and t.rungs[-1].usable]
    for track in running:
        if track not in kept:
            track.eliminated_at = step
    return sorted(kept, key=lambda t: t.lr)


def choose(tracks: Sequence[RateTrack], full_steps: int, higher_is_better: bool, **select: Any) -> Selection:
    """The selection among the finalists, edges flagged against the whole grid (``select``: :func:`select_lr`'s)."""
    return select_lr([t.result(full_steps) for t in tracks], higher_is_better=higher_is_better, **select)


def history(tracks: Sequence[RateTrack], steps: Sequence[int], fractions: Sequence[float]) -> dict[str, Any]:
    """One variant's ``halving`` record in ``lr_tuning.json``: every value, the eliminations, the compute."""
    full = steps[-1]
    return {
        "rungs": list(fractions),
        "steps": list(steps),
        "compute_fraction": round(reached_fraction([t.rungs[-1].step for t in tracks if t.rungs], full), 4),
        "planned_fraction": round(compute_fraction(len(tracks), fractions), 4),
        "rates": [
            {
                "lr": t.lr,
                "rungs": [{"step": r.step, "status": r.status, "value": r.value, "job": r.job} for r in t.rungs],
                "eliminated_at_step": t.eliminated_at,
            }
            for t in tracks
        ],
    }


def cell(track: RateTrack) -> str:
    """A rate's stage-1 cell: its value at each rung reached (``2.3141>2.0712``), then ``out@<step>``."""
    parts = [f"{r.value:.4f}" if r.value is not None else r.status for r in track.rungs]
    return ">".join(parts) + (f" out@{track.eliminated_at}" if track.eliminated_at is not None else "")


# --------------------------------------------------------------------------- the sweeper's stage 1


class HalvingVariant(Protocol):
    overrides: list[str]
    label: str
    grid: list[str]
    rung_steps: tuple[int, ...]
    tracks: list[RateTrack]


def rung_job(
    variant: HalvingVariant, track: RateTrack, rung: int, lr_name: str, seed_name: str, seed: str
) -> list[str]:
    """The overrides of ``track``'s job at rung index ``rung``: the variant's own (less its length and
    horizon), the rate, the seed, the horizon, the rung's length and, after rung 0, the last checkpoint."""
    full, step = variant.rung_steps[-1], variant.rung_steps[rung]
    own = [o for o in variant.overrides if override_key(o) not in (MAX_STEPS_KEY, DECAY_KEY, CKPT_KEY)]
    job = [*own, f"{lr_name}={track.text}", f"{seed_name}={seed}", f"{DECAY_KEY}={full}", f"{MAX_STEPS_KEY}={step}"]
    if rung:
        from ablate.checkpoints.files import find_last_checkpoint

        last = find_last_checkpoint([track.job_dir / "checkpoints"]) if track.job_dir else None
        if last is None:  # removed since (or another checkpoint dirpath): a finished rung job is still skipped
            log.warning(
                "halving: %s %s=%s has no checkpoints/last.ckpt in %s: its step-%d job starts from step 0 unless it "
                "finished before (the same values: the rung is a prefix of the run, at more cost)",
                variant.label,
                lr_name,
                track.text,
                track.job_dir,
                step,
            )
        else:
            job.append(f"{CKPT_KEY}={quote(str(last))}")  # a job directory's name holds , and =
    return job


def run_stage1(
    variants: Sequence[HalvingVariant],
    launch: Callable[[list[list[str]]], list[Any]],
    interrupted: Callable[[], bool],
    metric: str,
    higher_is_better: bool,
    lr_name: str,
    seed_name: str,
    seed: str,
) -> tuple[list[Any], bool]:
    """Stage 1 by successive halving, each rung one batch over all variants. Fills each variant's
    ``tracks``; returns the jobs' returns and whether it was interrupted (then nothing is chosen)."""
    from hydra.core.utils import JobStatus

    from ablate.run.status import read_status

    returns: list[Any] = []
    for v in variants:
        v.tracks = [RateTrack(float(text), text) for text in v.grid]
    for rung in range(max(len(v.rung_steps) for v in variants)):
        plan = [(v, t) for v in variants if rung < len(v.rung_steps) for t in v.tracks if t.running]
        if not plan:
            break
        rets = launch([rung_job(v, t, rung, lr_name, seed_name, seed) for v, t in plan])
        returns += rets
        if interrupted():
            return returns, True
        for (v, t), ret in zip(plan, rets):
            step = v.rung_steps[rung]
            job_dir = job_dir_of(ret)
            status, value = read_outcome(job_dir, metric, failed=ret.status == JobStatus.FAILED)
            record = read_status(job_dir) if job_dir is not None else None
            if status == "completed" and (record is None or record.steps != step):
                status, value = "incomplete", None  # not measured at the rung's step: never recorded as if it were
            t.rungs.append(RungOutcome(step, status, value, job_dir.name if job_dir else None))
            t.job_dir = job_dir
        for v in variants:
            if rung < len(v.rung_steps) - 1:
                halve(v.tracks, v.rung_steps[rung], higher_is_better)
    return returns, False


def stage1_lines(variants: Sequence[HalvingVariant]) -> list[str]:
    """The lines under the stage-1 table: the rungs and the compute of each variant."""
    lines = []
    for v in variants:
        full = v.rung_steps[-1]
        fraction = reached_fraction([t.rungs[-1].step for t in v.tracks if t.rungs], full)
        cuts = ", ".join(str(s) for s in v.rung_steps[:-1])
        lines.append(
            f"  {v.label}: successive halving at steps {cuts} of {full}; stage-1 compute {fraction:.2f} of the "
            f"full grid's steps ({len(v.tracks)} rates x {full})"
        )
    return lines
