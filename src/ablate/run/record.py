"""What a job leaves: the record of how it ended, whatever ended it.

:func:`recording` holds the job's directory for the whole job (:class:`~ablate.run.lock.RunDirectoryLock`)
and keeps whatever ends the block (:class:`Record`); :func:`finish` then decides, by one table
(:data:`HANDLING`) of the job's :class:`Outcome`, whether ``status.json`` is written, the summary
printed, and the exit code (0; 130 interrupted; 2 a user error; 1 a crash) or the value a sweeper
optimises. A single run's user error records nothing (:func:`leave_nothing`) unless it came after
the run trained; a failed resume leaves the run's files as they were.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from lightning.pytorch.utilities.exceptions import SIGTERMException

from ablate import cli
from ablate.callbacks.stop_file import request_stop
from ablate.checkpoints.files import checkpoint_files, find_last_checkpoint
from ablate.cli.console import format_run_summary
from ablate.errors import UserError
from ablate.run import distributed
from ablate.run.lock import RunDirectoryLock
from ablate.run.plan import Job, Plan, found, is_rank_zero, job_log_name, settle, take_back
from ablate.run.status import (
    MetricNotLoggedError,
    RunStatus,
    best_metric_value,
    read_status,
    record_status,
    write_status,
)
from ablate.tracking.options import WandbOptions
from ablate.tracking.relabel import relabel
from ablate.tracking.wandb_run import finish_wandb

log = logging.getLogger(__name__)


@dataclass
class Record:
    """What a job leaves: its plan, and the status its training returned or what stopped it."""

    plan: Plan | None = None
    status: RunStatus | None = None
    stopped_by: BaseException | None = None
    traceback: str | None = None
    started_ns: int = field(default_factory=time.time_ns)  # a checkpoint written since: this command trained


@contextlib.contextmanager
def recording(job: Job) -> Iterator[Record]:
    """Hold the job's directory (rank 0) and keep whatever ends the block for :func:`finish`."""
    record, held = Record(), False
    try:
        with (
            WorkerStopHandler(job.stop_file) if job.stop_file is not None else contextlib.nullcontext(),
            RunDirectoryLock(job.output_dir) if is_rank_zero() else contextlib.nullcontext(),
        ):
            held = True
            yield record
    except BaseException as err:  # Ctrl-C, SIGTERM, a crash, a refusal: finish says what it was
        if not held:  # the directory is another process's, or its lock file a link: refused as it is
            raise
        record.stopped_by, record.traceback = err, traceback.format_exc()


class WorkerStopHandler:
    """In a worker process outside training: a stop signal writes the sweep's stop file instead of
    raising ``KeyboardInterrupt``, which would take the worker down. SIGINT stays handled after the
    job (a Ctrl-C reaching an idle worker would break joblib's pool); SIGTERM (loky's) and SIGHUP
    go back to what they were."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal closed

    def __init__(self, path: Path) -> None:
        self.path = path
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def __enter__(self) -> WorkerStopHandler:
        self._previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, self._previous[signum])

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        request_stop(self.path, f"{signal.Signals(signum).name} in a job")


class Outcome(enum.Enum):
    """How a job ended, as :func:`finish` sees it (:func:`outcome_of`)."""

    TRAINED = "trained"  # training returned its status: completed, diverged, or stopped after a step (Ctrl-C)
    FOUND_FINISHED = "found finished"  # its run was finished already: reported (a sweep's job: skipped)
    NOT_STARTED = "not started"  # its sweep was asked to stop before it started
    INTERRUPTED = "interrupted"  # a second Ctrl-C, SIGTERM or Lightning's exit, outside a training step
    REFUSED = "refused"  # a user error (:class:`~ablate.errors.UserError`): its message says what to change
    CRASHED = "crashed"  # anything else: a fault of the program or of the machine


INTERRUPTS = (KeyboardInterrupt, SystemExit, SIGTERMException)


def outcome_of(record: Record) -> Outcome:
    err, plan = record.stopped_by, record.plan
    if isinstance(err, INTERRUPTS):
        return Outcome.INTERRUPTED
    if isinstance(err, UserError):
        return Outcome.REFUSED
    if err is not None:
        return Outcome.CRASHED
    if plan is not None and plan.finished is not None:
        return Outcome.FOUND_FINISHED
    if record.status is not None:
        return Outcome.TRAINED
    return Outcome.NOT_STARTED


@dataclass(frozen=True)
class Handling:
    """What :func:`finish` does for one outcome: when ``status.json`` is written (``taken``: by a job
    that took its directory; ``trained``: by one that wrote a checkpoint), the summary, the exit code."""

    writes: Literal["always", "taken", "trained", "never"]
    summary: bool
    exit_code: int


# (outcome, a job of a sweep?) -> what finish does. A sweep records every job it ran, so that its
# table lists them and a re-run retries the failed ones; a single run records what trained, and a
# user error leaves nothing (a new directory is removed: :func:`leave_nothing`).
HANDLING: dict[tuple[Outcome, bool], Handling] = {
    (Outcome.TRAINED, False): Handling("always", True, cli.EXIT_OK),  # EXIT_INTERRUPTED after a Ctrl-C
    (Outcome.TRAINED, True): Handling("always", True, cli.EXIT_OK),
    (Outcome.FOUND_FINISHED, False): Handling("never", True, cli.EXIT_OK),  # "already completed", not retrained
    (Outcome.FOUND_FINISHED, True): Handling("never", False, cli.EXIT_OK),  # "skipped"
    (Outcome.NOT_STARTED, False): Handling("never", False, cli.EXIT_OK),
    (Outcome.NOT_STARTED, True): Handling("never", False, cli.EXIT_OK),  # a re-run runs it
    (Outcome.INTERRUPTED, False): Handling("taken", True, cli.EXIT_INTERRUPTED),
    (Outcome.INTERRUPTED, True): Handling("taken", True, cli.EXIT_INTERRUPTED),
    (Outcome.REFUSED, False): Handling("trained", False, cli.EXIT_USER_ERROR),  # its message; recorded if it trained
    (Outcome.REFUSED, True): Handling("always", True, cli.EXIT_USER_ERROR),  # `refused`; a re-run retries it
    (Outcome.CRASHED, False): Handling("taken", False, cli.EXIT_CRASHED),  # the traceback instead
    (Outcome.CRASHED, True): Handling("always", True, cli.EXIT_CRASHED),  # the sweep goes on
}


def outcome_status(job: Job, record: Record, outcome: Outcome) -> RunStatus | None:
    """The record an outcome leaves (None: a job its sweep stopped before it started)."""
    err = record.stopped_by
    if outcome is Outcome.INTERRUPTED:
        return RunStatus("interrupted", job.overrides, error=f"{type(err).__name__} before the end of a training step")
    if outcome is Outcome.REFUSED:  # what to change, not where the program was: no traceback
        return RunStatus("refused", job.overrides, error=str(err))
    if outcome is Outcome.CRASHED:
        assert err is not None
        message, rank_trace = distributed.failure_message(err)
        return RunStatus("crashed", job.overrides, error=message, traceback=rank_trace or record.traceback)
    if outcome is Outcome.FOUND_FINISHED:
        assert record.plan is not None
        return record.plan.finished
    return record.status


def finish(job: Job, record: Record) -> float:
    """The end of the job (module docstring); returns the value for a sweeper."""
    outcome = outcome_of(record)
    handling, plan, err, writer = HANDLING[outcome, job.multirun], record.plan, record.stopped_by, is_rank_zero()
    taken = plan is not None and plan.trains
    status = outcome_status(job, record, outcome)
    if status is None:  # the sweep was asked to stop before this job started: no record, a re-run runs it
        print(f"not started: the sweep was interrupted; re-run the same command to run {job.output_dir.name}")
        return math.nan
    writes = handling.writes == "always" or (handling.writes == "taken" and taken)
    writes = writes or (handling.writes == "trained" and taken and trained_here(job, record))
    if writer and plan is not None and plan.kept:  # a failed resume leaves the run's files as they were
        settle(job.output_dir, job.control.checkpoint_dirs, failed=failed_resume(job, record, outcome))
    if writer and outcome is Outcome.CRASHED:  # the job's log says what its record says (every failed rank's error)
        to_job_log(f"crashed: {status.error}\n{status.traceback or ''}".rstrip())
    if writer and writes:
        record_status(job.output_dir, status)  # a finished run's record stays (a failed attempt: status.failed.json)
    if taken:  # the W&B run ends with the outcome in its summary (a crash: none)
        trained = cli.EXIT_INTERRUPTED if status.status == "interrupted" else cli.EXIT_OK
        finish_wandb(
            trained if outcome is Outcome.TRAINED else handling.exit_code, status.outcome() if err is None else None
        )
    if writer and not job.multirun and not writes and outcome is not Outcome.FOUND_FINISHED:
        leave_nothing(job)  # a command that recorded nothing leaves no run folder behind
    value, pending = _sweeper_value(job, status) if job.multirun else (math.nan, None)
    if err is not None and outcome is Outcome.REFUSED and not job.multirun:
        if writer and writes:  # it stopped after it trained: the run and its record stay
            print(
                f"{job.output_dir} keeps what it trained (last checkpoint: "
                f"{find_last_checkpoint(job.control.checkpoint_dirs) or 'none'}), recorded as refused in its "
                f"status; once fixed, resume with: {job.resume_command()}",
                file=sys.stderr,
                flush=True,
            )
        cli.report_user_error(err)  # exit 2, its message
    if err is not None and outcome is Outcome.CRASHED and not job.multirun:
        raise err  # a crash of a single run: its traceback, exit 1
    if outcome in (Outcome.REFUSED, Outcome.CRASHED):  # a sweep's job
        print(f"job crashed ({status.error}); recorded in {job.output_dir / 'status.json'}; the sweep continues")
    if outcome is Outcome.FOUND_FINISHED:
        report_finished(job, status)
    if writer and handling.summary and (writes or outcome is Outcome.FOUND_FINISHED):
        print(format_run_summary(status, job.output_dir), flush=True)
    if pending is not None:
        raise pending  # a metric the sweeper optimises was never logged: stop the sweep, naming it
    if status.status == "interrupted" and outcome is not Outcome.FOUND_FINISHED:
        return report_interrupted(job, status, recorded=writes)
    return value


def to_job_log(message: str) -> None:
    """``message`` into the job's log files only (the console printed it already)."""
    entry = logging.LogRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(entry)


def trained_here(job: Job, record: Record) -> bool:
    """This command wrote a checkpoint into the run (it trained): what it trained is kept and recorded."""
    return any(p.stat().st_mtime_ns >= record.started_ns for p in checkpoint_files(job.control.checkpoint_dirs))


def failed_resume(job: Job, record: Record, outcome: Outcome) -> bool:
    """A failed resume whose files go back: one that trained nothing, or of a finished run."""
    if outcome not in (Outcome.REFUSED, Outcome.CRASHED):
        return False
    previous = read_status(job.output_dir)
    return not trained_here(job, record) or (previous is not None and previous.finished)


def _sweeper_value(job: Job, status: RunStatus) -> tuple[float, MetricNotLoggedError | None]:
    """The best value the job logged, and a metric the sweeper optimises that was never logged."""
    if status.status == "interrupted":
        return math.nan, None
    try:
        return best_metric_value(job.output_dir, status, job.control.optimized_metric), None
    except MetricNotLoggedError as missing:
        return math.nan, missing if job.optimised else None  # a grid sweep does not use the value


def report_finished(job: Job, status: RunStatus) -> None:
    """A finished run found again: new tags relabel it (:mod:`ablate.tracking.relabel`), nothing else changes."""
    if is_rank_zero():
        wandb = WandbOptions.from_logger({"wandb": job.wandb_options})
        relabelled = relabel(job.tags, wandb, job.output_dir, status.tags, status.axes, job.labels)
        if relabelled is not None:
            tags, where = relabelled
            write_status(job.output_dir, replace(status, tags=tags))
            print(
                f"relabelled {job.output_dir.name} (already {status.status}): tags {tags} on its "
                f"{where or 'record (no W&B run)'}; nothing was trained",
                flush=True,
            )
    if job.multirun:
        log.info(
            f"skipped: {job.output_dir} is already {status.status} (its status.json); skip_completed=false retrains it"
        )
    elif is_rank_zero():
        print(
            f"already {status.status}: {job.output_dir} (its status.json: {status.steps} steps of trainer.max_steps="
            f"{job.control.max_steps}); nothing was trained or rewritten. To train it longer: "
            "trainer.max_steps=<more> '+resume_allow_changes=[trainer.max_steps]'",
            flush=True,
        )


def report_interrupted(job: Job, status: RunStatus, recorded: bool) -> float:
    """Where an interrupted job stopped and the command that resumes it; exit 130 (a sweep's worker returns)."""
    if not recorded:
        print("interrupted before training started: nothing was recorded", file=sys.stderr, flush=True)
    else:
        last = find_last_checkpoint(job.control.checkpoint_dirs)
        where = f"step {status.steps}" if status.steps is not None else "mid-step"
        resume = (
            "re-run the same sweep command to resume it" if job.multirun else f"resume with: {job.resume_command()}"
        )
        print(f"interrupted at {where}; last checkpoint: {last or 'none'}; {resume}", file=sys.stderr, flush=True)
    if job.worker_processes:
        return math.nan
    raise SystemExit(cli.EXIT_INTERRUPTED)  # a sweep stops too: the user asked to stop


def leave_nothing(job: Job) -> None:
    """A single run that recorded nothing takes back what the command added (:func:`ablate.run.plan.take_back`)."""
    before = found(job.output_dir, made=job.new_directory)
    if before is not None:
        take_back(before, job_log_name())
    elif job.new_directory:
        shutil.rmtree(job.output_dir, ignore_errors=True)
