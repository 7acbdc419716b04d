"""The end of a sweep: which of this command's jobs failed, and the exit code that says so.

A Hydra callback (``hydra.callbacks.sweep_report``): at the end of the multirun it prints the jobs
*this* command ran (from their ``status.json``, so any launcher) and how to upload offline W&B runs,
and exits 1 when a job crashed or was killed, 2 when every failed job was refused; diverged is a
result (exit 0). With worker processes it also owns the sweep's Ctrl-C (exit 130).
"""

from __future__ import annotations

import json
import sys
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ablate import cli
from ablate.callbacks.stop_file import STOP_FILE
from ablate.cli.console import format_sweep_summary
from ablate.run.plan import launches_worker_processes
from ablate.run.status import RunStatus
from ablate.sweepers import job_dirs
from ablate.sweepers.job_dirs import Signature, job_signature
from ablate.sweepers.killed_jobs import KILLED, KILLED_REASON
from ablate.sweepers.sweep_stop import SweepStopHandler

FAILED = ("refused", "crashed", KILLED)  # the sweep exits with 2 (all refused) or 1; a re-run retries these jobs


SKIPPED = "skipped"  # a finished job this command did not train (its record is older than the command)
RELABELLED = "relabelled"  # skipped, its W&B run given the command's new tags (ablate.tracking.relabel)


def _read(path: Path) -> RunStatus:
    try:
        return RunStatus.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError, AttributeError) as err:
        return RunStatus("crashed", error=f"unreadable {path}: {err}")


def job_records(
    sweep_dir: Path, since: float, launched: Mapping[Path, tuple[Signature, Signature]] | None = None
) -> dict[Path, tuple[str, RunStatus]]:
    """``job dir -> (ran | SKIPPED | RELABELLED, status)`` of ``launched`` (this command's jobs and their
    signatures at launch, :data:`ablate.sweepers.job_dirs.LAUNCHED`), else of the jobs whose
    ``status.json`` changed since ``since``; an unreadable record counts as crashed."""
    records: dict[Path, tuple[str, RunStatus]] = {}
    if launched is None:
        found = [p.parent for p in sorted(sweep_dir.glob("*/status.json")) if p.stat().st_mtime >= since]
        launched = {job_dir: (None, None) for job_dir in found}
    for job_dir, (record_before, metrics_before) in launched.items():
        path = job_dir / "status.json"
        if not path.is_file():
            continue  # never started (the sweep was stopped first)
        record = _read(path)
        record_now, metrics_now = job_signature(job_dir)
        if record_before is not None and record_now == record_before:
            records[job_dir] = (SKIPPED, record)
        elif record_before is not None and record.finished and metrics_now == metrics_before:
            records[job_dir] = (RELABELLED, record)
        else:
            records[job_dir] = ("ran", record)
    return records


class SweepReport(Callback):
    """Prints the jobs of this sweep that crashed and exits with code 1 if there are any."""

    def __init__(self) -> None:
        self._start = time.time()
        self._stop: SweepStopHandler | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        self._start = time.time() - 1  # file systems with 1 s mtime resolution
        cli.mark_started()  # the sweep composed: its exit code 1 from here on means a crashed job
        if launches_worker_processes(config.hydra.launcher):
            self._stop = SweepStopHandler(Path(str(config.hydra.sweep.dir)) / STOP_FILE)
            self._stop.install()

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        stop_reason = self._stop.reason() if self._stop is not None else None
        if self._stop is not None:
            self._stop.restore()
            self._stop.path.unlink(missing_ok=True)  # the records say what ran; a re-run starts afresh
        sweep_dir = Path(str(config.hydra.sweep.dir))
        launched = {d: sig for d, sig in job_dirs.LAUNCHED.items() if d.parent == sweep_dir} or None
        records = job_records(sweep_dir, self._start, launched)
        failed = {d: r for d, (_, r) in records.items() if r.status in FAILED}
        counts = Counter(r.status if what == "ran" else f"{what} ({r.status} before)" for what, r in records.values())
        summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "no job ran"
        if records:
            rows = [
                {**record.to_json(), "job": job_dir, "status": record.status if what == "ran" else what}
                for job_dir, (what, record) in records.items()
            ]
            print(format_sweep_summary(rows), flush=True)
        print(f"sweep {sweep_dir}: {summary}", flush=True)
        offline = sorted(str(p.parent) for p in sweep_dir.glob("*/wandb/offline-run-*/run-*.wandb"))
        if offline:
            print(
                f"W&B runs of this sweep are offline; to upload them: wandb sync {sweep_dir}/*/wandb/offline-run-*",
                flush=True,
            )
        for job_dir, record in failed.items():
            print(f"  {record.status}: {job_dir.name}: {record.error or '?'}", flush=True)
        if stop_reason is not None and not stop_reason.startswith(KILLED_REASON):
            print(
                "sweep interrupted: the running jobs saved their step; re-run the same command to resume them and "
                "run the jobs that did not start",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(cli.EXIT_INTERRUPTED)
        if failed:
            # 2 (a refused run's) when every failed job was refused, else 1
            refused = all(record.status == "refused" for record in failed.values())
            code = cli.EXIT_USER_ERROR if refused else cli.EXIT_CRASHED
            print(
                f"{len(failed)} job(s) refused, crashed or were killed (exit code {code}); fix the cause (a refused "
                "job: its message says what to change; a killed job: often memory; fewer parallel jobs, "
                "hydra.launcher.n_jobs) and re-run the same command: finished jobs are skipped, the others resume "
                "from their last checkpoint",
                file=sys.stderr,
                flush=True,
            )
            raise SystemExit(code)
