"""The CSV logger of a resumed job, which appends to the job's ``metrics.csv`` instead of
starting it over. (A new job uses Lightning's ``CSVLogger`` as it is.)
"""

from __future__ import annotations

import csv
import warnings
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment


class AppendingCSVLogger(CSVLogger):
    """A ``CSVLogger`` that continues an existing ``metrics.csv`` (a resumed job) instead of
    deleting it, as Lightning 2.6's writer does when it starts. Rows logged between the last
    checkpoint and the interruption appear again after the resume, with the same values when
    the resume is exact; readers keep the last row of a step."""

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        if self._experiment is not None:
            return self._experiment
        path = Path(self.log_dir) / "metrics.csv"
        previous = path.read_text(encoding="utf-8") if path.is_file() else ""
        with warnings.catch_warnings():
            # Lightning warns that the previous log files "will be deleted": not here, they are kept
            warnings.filterwarnings("ignore", message=".*Previous log files in this directory will be deleted")
            experiment = super().experiment
        if previous:
            path.write_text(previous, encoding="utf-8")
            experiment.metrics_keys = sorted(next(csv.reader(previous.splitlines())))
        return experiment
