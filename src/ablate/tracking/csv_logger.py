"""The CSV logger of a job (``<run>/csv/metrics.csv``): its rows written whole or not at all, and
a resumed job's appended to the job's file instead of starting it over.

Lightning's writer appends, and rewrites the file in place for a new column: a full disk leaves a
half row or a truncated file. :class:`MetricsWriter` cuts the file back to its last whole row, and
rewrites through a temporary file; the error names the file and the bytes (``DiskFullError``).
"""

from __future__ import annotations

import csv
import io
import os
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only

from ablate.writes import DiskFullError, named_disk_full, write_text_atomically


def _rows_text(keys: list[str], rows: Iterable[Mapping[str, Any]], header: bool) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=keys)
    if header:
        writer.writeheader()
    writer.writerows(rows)
    return buffer.getvalue()


class MetricsWriter(ExperimentWriter):
    """Lightning's CSV experiment writer, its ``metrics.csv`` never left with a partial row (see the module)."""

    def save(self) -> None:
        if not self.metrics:
            return
        path = Path(self.metrics_file_path)
        new_keys = self._record_new_keys()
        if new_keys and path.is_file():  # a new column: the whole file again, through a temporary one
            with open(path, newline="", encoding="utf-8") as f:
                rows = list(csv.DictReader(f))
            write_text_atomically(path, _rows_text(self.metrics_keys, [*rows, *self.metrics], header=True))
        else:
            existed = path.is_file()
            size = path.stat().st_size if existed else 0
            text = _rows_text(self.metrics_keys, self.metrics, header=not existed)
            try:
                with (
                    named_disk_full(path, len(text.encode("utf-8"))),
                    open(path, "a", newline="", encoding="utf-8") as f,
                ):
                    f.write(text)
            except DiskFullError:
                if existed:
                    os.truncate(path, size)  # back to its last whole row (shrinking needs no space)
                else:
                    path.unlink(missing_ok=True)
                raise
        self.metrics = []


class AppendingCSVLogger(CSVLogger):
    """A ``CSVLogger`` that continues a resumed job's ``metrics.csv`` (Lightning 2.6's deletes it); rows
    after the last checkpoint appear again (readers keep a step's last row)."""

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
            self._fs.makedirs(self.root_dir, exist_ok=True)
            experiment = self._experiment = MetricsWriter(log_dir=self.log_dir)
        if previous:
            path.write_text(previous, encoding="utf-8")
            experiment.metrics_keys = sorted(next(csv.reader(previous.splitlines())))
        return experiment


def whole_rows(logger: CSVLogger) -> CSVLogger:
    """``logger`` (a new job's ``CSVLogger``) writing with :class:`MetricsWriter`, made now on rank 0."""
    if isinstance(logger, AppendingCSVLogger):
        return logger  # a resumed job's: its own experiment keeps the file's rows, then writes so
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # set by lightning at import, not in its types
        logger._fs.makedirs(logger.root_dir, exist_ok=True)
        logger._experiment = MetricsWriter(log_dir=logger.log_dir)
    return logger
