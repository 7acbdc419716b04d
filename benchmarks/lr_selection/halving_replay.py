"""Would successive halving have chosen the same learning rates? Replayed on a finished full-grid ``tune=lr`` sweep.

    python scripts/halving_replay.py logs/multirun/<sweep>                        # rungs at 1/4 and 1/2
    python scripts/halving_replay.py logs/multirun/<sweep> --rungs 0.333333 0.5 --metric val/loss

Replays ``hydra.sweeper.halving.rungs`` on the logged validation curves of the sweep's stage 1
(exact: a rung is the prefix of the full run) and prints per variant the full grid's choice, the
halving choice, how many grid steps apart they are and the stage-1 compute fraction, then each
rate's values through the rungs. Exit 2 when a rung's step was not validated or the directory is
not a finished full-grid ``tune=lr`` sweep. The rule: :mod:`ablate.sweepers.halving`. Lab code
beside the package (``scripts/halving_replay.py`` puts the checkout's root on the path).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ablate.sweepers.halving import (
    DECAY_KEY,
    MAX_STEPS_KEY,
    RateTrack,
    RungOutcome,
    cell,
    check_rungs,
    choose,
    halve,
    reached_fraction,
    rung_steps,
)
from ablate.sweepers.lr_selection import LRResult, format_lr, read_outcome, select_lr


@dataclass
class ReplayRow:
    """One variant of a replayed full-grid stage 1."""

    variant: str
    full_choice: str | None  # the rate the full grid chooses (its override's value)
    halving_choice: str | None
    steps_apart: int | None  # grid steps between the two choices
    compute_fraction: float
    tracks: list[RateTrack]
    steps: tuple[int, ...]
    metric: str = ""


def _value_at(curve: Any, step: int) -> float | None:
    return float(curve.loc[step]) if step in curve.index else None


def replay_variant(
    jobs: Mapping[str, Any],
    grid: Sequence[str],
    fractions: Sequence[float],
    metric: str,
    higher_is_better: bool,
    label: str = "",
) -> ReplayRow:
    """Successive halving replayed on one variant's full-grid jobs (``{rate text: Job}`` of
    :mod:`ablate.analysis.job`): the metric at each rung's step from the job's validation curve
    (``metrics.csv`` step + 1 = optimiser steps done), the full length's from its
    ``status.json`` (as the full grid's selection reads it). Raises ValueError when a rung's
    step was not validated (naming the steps that were) or the length is unknown."""
    ordered = sorted(grid, key=float)
    max_steps, steps = _replayed_steps(jobs[ordered[0]], fractions, label)
    tracks = [RateTrack(float(text), text) for text in ordered]
    full_results = {}  # the full length's outcome, read once: also the last rung's
    for track in tracks:
        job = jobs[track.text]
        status, value = read_outcome(Path(job.source), metric)
        full_results[track.text] = LRResult(track.lr, track.text, status, value, job.name)
    for rung, step in enumerate(steps):
        for track in tracks:
            if not track.running:
                continue
            job = jobs[track.text]
            if step == max_steps:
                outcome = full_results[track.text]
                track.rungs.append(RungOutcome(step, outcome.status, outcome.value, job.name))
                continue
            track.rungs.append(_outcome_at(job, step, metric, f"{label} {track.text}"))
        if rung < len(steps) - 1:
            halve(tracks, step, higher_is_better)
    full = select_lr(list(full_results.values()), higher_is_better=higher_is_better)
    halving = choose(tracks, max_steps, higher_is_better)
    texts = [t.text for t in tracks]
    apart = (
        abs(texts.index(full.chosen.text) - texts.index(halving.chosen.text))
        if full.chosen is not None and halving.chosen is not None
        else None
    )
    return ReplayRow(
        label,
        full.chosen.text if full.chosen else None,
        halving.chosen.text if halving.chosen else None,
        apart,
        reached_fraction([t.rungs[-1].step for t in tracks if t.rungs], max_steps),
        tracks,
        steps,
        metric,
    )


def _replayed_steps(first: Any, fractions: Sequence[float], label: str) -> tuple[int, tuple[int, ...]]:
    """The grid's full length (``trainer.max_steps`` of its ``first`` job) and the rungs' steps at ``fractions``."""
    max_steps = first.value(MAX_STEPS_KEY)
    try:
        max_steps = int(float(max_steps))
    except (TypeError, ValueError):
        raise ValueError(f"{label}: {first.name} has no trainer.max_steps to cut at fractions of") from None
    decay = first.value(DECAY_KEY)
    decay_steps = int(float(decay)) if decay not in (None, "null") else None
    # the curves say which steps were validated (the error below names them); the configured
    # interval, when it is a whole number of steps, names them up front
    interval = first.value("trainer.val_check_interval")
    every = int(float(interval)) if _whole(interval) else 1
    return max_steps, rung_steps(fractions, max_steps, every, decay_steps, label, "--rungs")


def _outcome_at(job: Any, step: int, metric: str, name: str) -> RungOutcome:
    """``job``'s outcome at a rung's ``step`` from its validation curve; refused if it passed the step unvalidated."""
    from ablate.analysis.budget import validation_curve

    curve = validation_curve(job.metrics, metric, "steps")
    value = _value_at(curve, step)
    if value is None and ((len(curve) and curve.index[-1] >= step) or job.status == "completed"):
        validated = ", ".join(f"{s:.0f}" for s in curve.index) or "none"
        raise ValueError(
            f"{name}: step {step} was not validated in {job.name}/csv/metrics.csv; the steps that "
            f"were: {validated}. Choose rungs at those steps (--rungs)"
        )
    usable = value is not None and math.isfinite(value)
    status = "completed" if usable else (job.status if job.status != "completed" else "diverged")
    return RungOutcome(step, status, value if usable else None, job.name)


def replay_sweep(sweep_dir: str | Path, fractions: Sequence[float], metric: str | None = None) -> list[ReplayRow]:
    """Successive halving replayed on every variant of a finished full-grid ``tune=lr`` stage 1
    (``<sweep_dir>/lr_tuning.json`` names the variants, their grids and the selection seed). Raises
    ValueError (a sweep that is not one, a halving stage 1, a missing job, a rung not validated)."""
    from ablate.analysis.job import canonical, higher_is_better, parse_overrides
    from ablate.analysis.runs import TUNING_FILE, load_sweep

    given = list(fractions)
    try:
        fractions = check_rungs(given)
    except ValueError:
        fractions = ()
    if not fractions:
        raise ValueError(
            f"--rungs {' '.join(f'{f:g}' for f in given)}: give fractions of trainer.max_steps, strictly increasing "
            "in (0, 1), e.g. --rungs 0.25 0.5"
        )
    path = Path(sweep_dir) / TUNING_FILE
    if not path.is_file():
        raise ValueError(f"{sweep_dir} has no {TUNING_FILE}: not a finished tune=lr sweep")
    tuning = json.loads(path.read_text())
    metric = metric or tuning.get("metric") or "val/loss"
    higher = higher_is_better(metric)
    key = tuning.get("key", "optim.lr")
    seed = tuning.get("selection_seed", tuning.get("tuning_seed"))
    sweep = load_sweep(sweep_dir)
    rows = []
    for record in tuning.get("variants", []):
        label = record.get("variant", "")
        if record.get("halving"):
            raise ValueError(f"{label}: its stage 1 ran with successive halving; the replay needs the full grid")
        wanted = parse_overrides(record.get("overrides", []))
        grid = [format_lr(float(x)) for x in record.get("grid", [])]
        jobs: dict[str, Any] = {}
        for job in sweep.jobs:
            if any(job.overrides.get(k) != v for k, v in wanted.items()) or str(job.seed) != str(seed):
                continue
            if MAX_STEPS_KEY in job.overrides and DECAY_KEY in job.overrides:
                continue  # a rung job of a halving stage 1 run into the same directory
            rate = job.overrides.get(key)
            match = next((t for t in grid if rate is not None and canonical(t) == rate), None)
            if match is not None:
                if match in jobs:
                    raise ValueError(
                        f"{label}: two selection-seed jobs at {key}={match}: {jobs[match].name}, {job.name}"
                    )
                jobs[match] = job
        missing = [t for t in grid if t not in jobs]
        if missing or not grid:
            raise ValueError(
                f"{label}: no selection-seed job ({seed}) at {key}={','.join(missing) or '?'} in {sweep_dir}"
            )
        rows.append(replay_variant(jobs, grid, fractions, metric, higher, label))
    if not rows:
        raise ValueError(f"{path} lists no variants")
    return rows


def replay_table(rows: Sequence[ReplayRow]) -> str:
    """The replay as a Markdown table, then each variant's rates through the rungs."""
    metric = rows[0].metric if rows else ""
    lines = [
        f"Successive halving replayed on the full grid's curves ({metric})",
        "",
        "| variant | full-grid choice | halving choice | grid steps apart | stage-1 compute |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        apart = "-" if r.steps_apart is None else str(r.steps_apart)
        lines.append(
            f"| {r.variant} | {r.full_choice or 'none'} | {r.halving_choice or 'none'} | {apart} | {r.compute_fraction:.2f} |"
        )
    lines.append("")
    for r in rows:
        lines.append(f"{r.variant} (rungs at steps {', '.join(map(str, r.steps[:-1]))} of {r.steps[-1]}):")
        lines += [f"  {t.text}: {cell(t)}" for t in r.tracks]
    return "\n".join(lines)


def _whole(value: Any) -> bool:
    """Whether a config value read back from a job is a whole number of steps (``"75"``, ``75``)."""
    try:
        return float(value) == int(float(value)) > 0
    except (TypeError, ValueError):
        return False


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="halving_replay.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", help="a finished tune=lr sweep directory (logs/multirun/<sweep>)")
    parser.add_argument(
        "--rungs",
        type=float,
        nargs="+",
        default=[0.25, 0.5],
        metavar="FRACTION",
        help="fractions of trainer.max_steps at which the grid is halved, increasing in (0, 1) (default: 0.25 0.5)",
    )
    parser.add_argument("--metric", help="the selection metric (default: the sweep's, from lr_tuning.json)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        rows = replay_sweep(args.sweep_dir, args.rungs, args.metric)
    except (OSError, ValueError) as err:
        print(f"halving_replay.py: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(replay_table(rows))
