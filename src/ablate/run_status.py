"""A run's record, ``status.json`` in its directory: what happened (completed, diverged, crashed,
interrupted, ...), its steps, metrics and settings; what the sweep report, the re-run of a sweep
(finished jobs are skipped) and the analysis scripts read. Written atomically (a temporary file
renamed), and a finished run's record is final: a failed attempt to resume it goes elsewhere."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

FINISHED = ("completed", "diverged")  # a re-run of the sweep skips these (skip_completed)


def write_status(output_dir: Path, status: dict[str, Any]) -> None:
    tmp = output_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status, indent=2, default=str))
    tmp.replace(output_dir / "status.json")


def read_status(output_dir: Path) -> dict[str, Any] | None:
    path = output_dir / "status.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def record_status(output_dir: Path, status: dict[str, Any]) -> None:
    """Write ``status.json``, unless it records a finished run and ``status`` is a failed or
    interrupted attempt to resume it: that record stays, the attempt goes to ``status.failed.json``."""
    previous = read_status(output_dir)
    if status["status"] not in FINISHED and previous is not None and previous.get("status") in FINISHED:
        (output_dir / "status.failed.json").write_text(json.dumps(status, indent=2, default=str))
        print(
            f"{output_dir / 'status.json'} still records the finished run ({previous['status']}); this attempt's "
            f"{status['status']} record is in status.failed.json",
            file=sys.stderr,
        )
        return
    write_status(output_dir, status)
