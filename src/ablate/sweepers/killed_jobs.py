"""A sweep's job whose worker process was killed (SIGKILL, the out-of-memory killer) is recorded as
``killed`` instead of ending the sweep in a traceback.

Under the joblib launcher a dead worker breaks loky's pool and loky SIGKILLs the others. No job
writes its own record after SIGKILL, so the main process does: a job still holding its run
directory's lock (:mod:`ablate.run.lock`) when its process ended was killed; it gets ``killed``, the
signal and its last checkpoint's step, and the sweep stops as after Ctrl-C (exit 1).
"""

from __future__ import annotations

import fcntl
import json
import re
import time
from collections.abc import Sequence
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn
from hydra.plugins.launcher import Launcher
from omegaconf import OmegaConf

from ablate.callbacks.stop_file import STOP_FILE, request_stop
from ablate.run.lock import LOCK_FILE
from ablate.run.status import RunStatus, write_status
from ablate.sweepers.sweep_stop import loky_workers_ignore_ctrl_c_until_a_job_runs

KILLED = "killed"
KILLED_REASON = "a job's worker process was killed"  # the stop file's text: the sweep ends with exit code 1
RELEASE_WAIT_S = 30.0  # how long a dying process may take to release its lock (the kernel does it at exit)


def exit_signals(error: BaseException) -> list[str]:
    """The signals named in loky's message (``The exit codes of the workers are {SIGKILL(-9)}``)."""
    return sorted(set(re.findall(r"\b(SIG[A-Z0-9]+)\(", str(error))))


def _released(lock: Path) -> bool:
    """No process holds ``lock``: taking it succeeds (and is given back at once, as the file closes)."""
    with open(lock, "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True


def _abandoned(lock: Path, deadline: float) -> bool:
    """``lock`` still names its holder (a clean exit empties it) and nobody holds it: its process died
    (waiting until ``deadline`` for a dying one's lock to be released)."""
    while lock.read_text().strip():
        if _released(lock):
            return True
        if time.monotonic() > deadline:
            return False  # alive: not one of the killed jobs
        time.sleep(0.2)
    return False


def _saved_step(job_dir: Path) -> int | None:
    """The step of the job's last checkpoint (where a re-run resumes it), or None without one."""
    from ablate.checkpoints.files import inspect_checkpoint  # torch: only when a job was killed

    path = job_dir / "checkpoints" / "last.ckpt"
    if not path.is_file():
        return None
    try:
        return int(inspect_checkpoint(path, weights=False).get("global_step", 0))
    except Exception:  # a checkpoint being written when the process died: the re-run names it
        return None


def record_killed_jobs(sweep_dir: Path, since: float, signals: Sequence[str]) -> list[Path]:
    """``killed`` records for the jobs that took their lock since ``since`` and died holding it; their directories."""
    killed = []
    deadline = time.monotonic() + RELEASE_WAIT_S
    signal = "/".join(signals) or "an unknown signal"
    for lock in sorted(sweep_dir.glob(f"*/{LOCK_FILE}")):
        if lock.stat().st_mtime < since or not _abandoned(lock, deadline):
            continue
        job_dir = lock.parent
        try:
            holder: dict[str, Any] = json.loads(lock.read_text())
        except ValueError:
            holder = {}
        step = _saved_step(job_dir)
        saved = job_dir / ".hydra" / "overrides.yaml"  # as Hydra saved them when the job started
        resume = (
            f"resumes from step {step} (its last checkpoint)" if step is not None else "starts afresh (no checkpoint)"
        )
        record = RunStatus(
            KILLED,
            [str(o) for o in OmegaConf.load(saved)] if saved.is_file() else [],
            signal=signal,
            pid=holder.get("pid"),
            steps=step,
            error=(
                f"its worker process (pid {holder.get('pid')}) was killed by {signal} (the system's out-of-memory "
                f"killer, or kill -9), or stopped by joblib when another worker was; re-running the command {resume}"
            ),
        )
        write_status(job_dir, record)
        killed.append(job_dir)
    return killed


class KilledWorkerGuard(Launcher):
    """Wraps the sweep's launcher: a broken process pool's jobs recorded ``killed``, the sweep stopped."""

    def __init__(self, launcher: Launcher, sweep_dir: Path) -> None:
        self.launcher = launcher
        self.sweep_dir = sweep_dir

    def setup(self, **kwargs: Any) -> None:
        self.launcher.setup(**kwargs)

    def launch(self, job_overrides: Sequence[Sequence[str]], initial_job_idx: int) -> Sequence[JobReturn]:
        since = time.time() - 1  # file systems with 1 s mtime resolution
        try:
            with loky_workers_ignore_ctrl_c_until_a_job_runs():  # an idle worker's Ctrl-C would break the pool
                return self.launcher.launch(job_overrides, initial_job_idx)
        except BrokenProcessPool as err:
            killed = record_killed_jobs(self.sweep_dir, since, exit_signals(err))
            request_stop(self.sweep_dir / STOP_FILE, KILLED_REASON)
            names = ", ".join(d.name for d in killed) or "none found"
            print(
                f"a worker process of the sweep was killed ({'/'.join(exit_signals(err)) or 'no exit signal'}); "
                f"jobs recorded as killed: {names}. No further job starts.",
                flush=True,
            )
            return []  # the jobs' records say what happened; the sweepers stop on the stop file
