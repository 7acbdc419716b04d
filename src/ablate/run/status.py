"""A run's record as the files in its directory hold it: ``status.json`` (what happened), the logged
metrics of ``csv/metrics.csv``, and the value a sweeper optimises, read from the two; on the
standard library and the metric registry alone (no torch, no pandas).

``status.json`` is written atomically, and a finished run's record is final. :class:`RunStatus` is
its one schema: every key in every record (null where it does not apply). In ``csv/metrics.csv``
(Lightning's ``CSVLogger``'s) a resumed run writes the steps since its checkpoint again: a
metric's value at a step is the last one written.

:func:`best_metric_value` is what a job returns to an optimising sweeper: the best value of
``optimized_metric`` over the run (:func:`ablate.metrics.higher_is_better`); a diverged or crashed
job returns the worst value so it ranks last; a metric never logged at all (a typo, no validation)
raises :class:`MetricNotLoggedError` instead of a NaN that would waste the whole search.
"""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from ablate.metrics import higher_is_better
from ablate.writes import write_text_atomically

OUTCOMES = ("completed", "diverged", "interrupted", "refused", "crashed", "killed")
FINISHED = ("completed", "diverged")  # a re-run of the sweep skips these (skip_completed)
FAILED_RECORD = "status.failed.json"  # a failed attempt to resume a finished run (its status.json stays)


@dataclass
class RunStatus:
    """What one run (or one attempt to resume it) ended with: ``status`` (one of :data:`OUTCOMES`),
    ``steps`` (a killed job: those of its last checkpoint), ``metrics`` (the last logged value of
    each, None where not finite), ``error``/``traceback`` (what stopped it), its settings and cost
    (``wall_time_s`` over all resumed segments, ``segment_wall_time_s`` the last one's),
    ``signal``/``pid`` (a killed job's worker), ``tags`` (:mod:`ablate.tracking.relabel`),
    ``started_at`` (UTC, ISO 8601) and ``plan_sha256`` (the analysis plan in force when it started:
    :mod:`ablate.analysis.plan`), and ``extra``, the task's own entries."""

    status: str
    overrides: list[str] = field(default_factory=list)
    steps: int | None = None
    wall_time_s: float | None = None
    segment_wall_time_s: float | None = None
    metrics: dict[str, float | None] = field(default_factory=dict)
    error: str | None = None
    traceback: str | None = None
    diverged_at_step: int | None = None
    divergence_reason: str | None = None
    params: int | None = None
    axes: dict[str, Any] | None = None
    world_size: int | None = None
    accumulate_grad_batches: int | None = None
    resumed_from: str | None = None
    signal: str | None = None
    pid: int | None = None
    tags: list[str] | None = None
    started_at: str | None = None
    plan_sha256: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in OUTCOMES:
            raise ValueError(f"status={self.status!r}; valid outcomes: {', '.join(OUTCOMES)}")

    @property
    def finished(self) -> bool:
        """Completed or diverged: a re-run of the sweep skips it, and its record is final."""
        return self.status in FINISHED

    def outcome(self) -> dict[str, Any]:
        """What the run's W&B summary records of how it ended."""
        return {
            "status": self.status,
            "diverged_at_step": self.diverged_at_step,
            "steps": self.steps,
            "wall_time_s": self.wall_time_s,
            "diverged": self.status == "diverged",
        }

    def to_json(self) -> dict[str, Any]:
        """The record as ``status.json`` holds it: every field, then the task's entries."""
        record = {spec.name: getattr(self, spec.name) for spec in fields(self) if spec.name != "extra"}
        clash = set(self.extra) & {spec.name for spec in fields(self)}
        if clash:
            raise ValueError(f"a task's status entries {sorted(clash)} would overwrite the run's own")
        return {**record, **self.extra}

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> RunStatus:
        """A record read back (:meth:`to_json`'s inverse); keys it does not know are the task's."""
        names = {spec.name for spec in fields(cls)} - {"extra"}
        known = {k: v for k, v in record.items() if k in names}
        known["metrics"] = dict(known.get("metrics") or {})
        known["overrides"] = list(known.get("overrides") or [])
        return cls(**known, extra={k: v for k, v in record.items() if k not in names})


def unknown_outcome(path: Path, value: Any) -> str:
    """What a reader says of a ``status.json`` whose status is not an outcome of this version (not a missing record)."""
    return (
        f"{path} says status={value!r}, which is not an outcome ({', '.join(OUTCOMES)}): edited, or another version's"
    )


def write_status(output_dir: Path, status: RunStatus, name: str = "status.json") -> None:
    """``status.json`` (or ``name``), atomically (a full disk: :class:`ablate.writes.DiskFullError`, the old kept)."""
    write_text_atomically(output_dir / name, json.dumps(status.to_json(), indent=2, default=str))


def read_status(output_dir: Path) -> RunStatus | None:
    """The record in ``output_dir``, or None when there is none or it is not one."""
    path = output_dir / "status.json"
    try:
        return RunStatus.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def record_status(output_dir: Path, status: RunStatus) -> None:
    """Write ``status.json``; a failed attempt to resume a finished run goes to ``status.failed.json``."""
    previous = read_status(output_dir)
    failed = not status.finished and previous is not None and previous.finished
    write_status(output_dir, status, FAILED_RECORD if failed else "status.json")
    if failed and previous is not None:
        print(
            f"{output_dir / 'status.json'} still records the finished run ({previous.status}); this attempt's "
            f"{status.status} record is in status.failed.json",
            file=sys.stderr,
        )


METRICS_FILE = Path("csv") / "metrics.csv"  # under the job's output directory
_NOT_METRICS = ("step", "epoch")  # the columns that say where a row stands, not what it measured


@dataclass(frozen=True)
class LoggedMetrics:
    """``columns``: every metric with a column in the log; ``by_step``: per metric, its value at each step."""

    columns: frozenset[str] = frozenset()
    by_step: dict[str, dict[float, float]] = field(default_factory=dict)

    def values(self, metric: str) -> list[float]:
        """The values of ``metric`` over the run, one per step, in step order (NaN and inf kept)."""
        logged = self.by_step.get(metric, {})
        return [logged[step] for step in sorted(logged)]


def read_logged_metrics(output_dir: Path) -> LoggedMetrics:
    """The metrics in ``output_dir``'s ``csv/metrics.csv`` (none without the file)."""
    path = Path(output_dir) / METRICS_FILE
    if not path.is_file():
        return LoggedMetrics()
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        columns = frozenset(c for c in reader.fieldnames or () if c not in _NOT_METRICS)
        by_step: dict[str, dict[float, float]] = {c: {} for c in columns}
        for row in reader:
            if not row.get("step"):
                continue  # not a step's row: nothing to place it at
            step = float(row["step"])
            for name in columns:
                cell = row.get(name)
                if not cell:  # an empty cell: this row's group did not log the metric
                    continue
                value = float(cell)
                if not (math.isnan(value) and step in by_step[name]):  # NaN never hides a value
                    by_step[name][step] = value  # a later row of the same step wins (a resumed run)
    return LoggedMetrics(columns, by_step)


WORST_STATUSES = ("diverged", "refused", "crashed")
_SHOWN_PREFIXES = ("val/", "test/", "train/")


class MetricNotLoggedError(ValueError):
    """``optimized_metric`` does not appear in anything the job logged."""


def best_metric_value(output_dir: Path, status: RunStatus, metric: str) -> float:
    """The best value of ``metric`` over the run in ``output_dir`` (``csv/metrics.csv`` and ``status``'s
    final metrics); the worst (``+inf``/``-inf``) for a diverged or crashed run or one never finite."""
    if status.status in WORST_STATUSES:  # its log is not read: a crash may have cut it short
        return _worst(metric)
    logged = read_logged_metrics(Path(output_dir))  # csv/metrics.csv
    recorded = status.metrics
    values = logged.values(metric)
    final = recorded.get(metric)
    if final is not None:
        values.append(float(final))
    finite = [v for v in values if math.isfinite(v)]
    if finite:
        return max(finite) if higher_is_better(metric) else min(finite)
    if metric in logged.columns or metric in recorded:  # logged, never a finite number: ranks last
        return _worst(metric)
    names = sorted(logged.columns | set(recorded))
    raise MetricNotLoggedError(
        f"optimized_metric={metric!r} was never logged by the job in {output_dir} (csv/metrics.csv, status.json); "
        f"logged: {_describe(names)}. Set optimized_metric to one of them (e.g. optimized_metric=val/loss), or make "
        "sure validation runs (trainer.val_check_interval <= trainer.max_steps, trainer.limit_val_batches > 0)."
    )


def _worst(metric: str) -> float:
    """What ranks last."""
    return -math.inf if higher_is_better(metric) else math.inf


def _describe(names: list[str]) -> str:
    """The logged metrics a user would optimise (val/, test/, train/), and how many others."""
    shown = [n for n in names if n.startswith(_SHOWN_PREFIXES)]
    others = [n for n in names if n not in shown]
    text = ", ".join(shown) or "no val/, test/ or train/ metric"
    return text + (f" (and {len(others)} others, e.g. {', '.join(others[:3])})" if others else "")
