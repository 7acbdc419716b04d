"""The logged metrics of a job's run record, ``csv/metrics.csv``, as the job itself needs them.

A job reads its own log back once, at the end, for the value a sweeper optimises
(:mod:`ablate.run.objective`). The analysis reads the same file with its own reader
(:func:`ablate.analysis.job.read_metrics_csv`): the file is the interface between the two, so the
training path imports no analysis code, and this reader needs the standard library only (pandas
stays off a job's path).

Lightning's ``CSVLogger`` writes one row per group of metrics logged at a step (an empty cell for
the metrics of the other groups), and a resumed run writes again the steps since the checkpoint it
resumed from: each metric's value at a step is the last one written for that step (a NaN only
where the step has no other value).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, field
from pathlib import Path

METRICS_FILE = Path("csv") / "metrics.csv"  # under the job's output directory
_NOT_METRICS = ("step", "epoch")  # the columns that say where a row stands, not what it measured


@dataclass(frozen=True)
class LoggedMetrics:
    """``columns``: every metric that has a column in the log (logged at least once, its values
    finite or not); ``by_step``: per metric, its value at each step it was logged at."""

    columns: frozenset[str] = frozenset()
    by_step: dict[str, dict[float, float]] = field(default_factory=dict)

    def values(self, metric: str) -> list[float]:
        """The values of ``metric`` over the run, one per step, in step order (NaN and inf kept)."""
        logged = self.by_step.get(metric, {})
        return [logged[step] for step in sorted(logged)]


def read_logged_metrics(output_dir: Path) -> LoggedMetrics:
    """The metrics in ``output_dir``'s ``csv/metrics.csv`` (none when the file does not exist: a
    job stopped before its first log)."""
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
