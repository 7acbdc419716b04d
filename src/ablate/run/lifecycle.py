"""A job's life around its training: what it does with its directory, and the record it leaves.

:func:`ablate.run.train.run` goes through it in this order:

1. :func:`recording` -- the job holds its directory (one process per run,
   :class:`~ablate.run.lock.RunDirectoryLock`) for the whole block, and whatever ends the block
   is recorded when it ends (:class:`Record`).
2. :func:`decide` (after the config checks) -- what the job does, as a :class:`Plan`:

   * a job of a sweep (re-running the same command finds the same directories): ``status.json``
     says completed or diverged: skipped, with its stored result (``skip_completed``, default);
     a ``last.ckpt`` without such a status (killed, crashed): resumed from it;
     ``skip_completed=false``: trained from scratch, its previous status and checkpoints removed;
     a sweep run by worker processes that was asked to stop: not started (a re-run runs it);
   * a single run with ``ckpt_path`` (``last`` or a path): resumed; a finished run that a resume
     would not train further (``trainer.max_steps`` not raised) is reported, not retrained;
   * a single run without ``ckpt_path`` into a directory that holds another run: refused, unless
     ``overwrite=true`` (which removes the old record first).

   A resumed checkpoint is read once, here: it must be readable and trained with the same
   run-defining settings (:func:`ablate.config.identity.check_same_run`).
3. The end of the block records the outcome -- completion, divergence, Ctrl-C or SIGTERM
   (``interrupted``, exit code 130, with the command that resumes the run), a crash (in a sweep
   recorded and the sweep goes on; in a single run raised) -- in ``status.json``
   (:mod:`ablate.run.status`), prints the run's summary and sets the value a sweeper optimises.
   A refusal (a bad config, a directory that holds another run, a checkpoint of another run) is a
   user error: exit code 2 and its message.
"""

from __future__ import annotations

import contextlib
import logging
import math
import signal
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType
from typing import Any

from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ablate import cli
from ablate.callbacks.stop_file import request_stop
from ablate.checkpoints.files import (
    CheckpointError,
    abandoned_writes,
    checkpoint_files,
    find_last_checkpoint,
    require_resumable,
    resolve_ckpt_path,
    resume_state,
)
from ablate.cli.console import format_run_summary
from ablate.config.identity import check_same_run
from ablate.errors import ConfigError, UserError
from ablate.run import distributed
from ablate.run.job import CONFIG_DIR, Job, is_rank_zero, job_log_name
from ablate.run.lock import LOCK_FILE, RunDirectoryBusy, RunDirectoryLock
from ablate.run.objective import MetricNotLoggedError, best_metric_value
from ablate.run.status import RunStatus, read_status, record_status, write_status
from ablate.tasks.checkpoints import inspect_checked
from ablate.tracking.options import WandbOptions
from ablate.tracking.relabel import relabel
from ablate.tracking.wandb_run import finish_wandb
from ablate.writes import check_run_folder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Plan:
    """What a job does, decided once (in the process that launches its ranks, so every rank gets
    the same): train, resuming from ``ckpt_path`` (None: from scratch) and logging into the W&B run
    ``wandb_run_id`` (the checkpoint's); or not train: the job is the ``finished`` run it found, or
    its sweep was ``stopped`` before it started."""

    ckpt_path: str | None = None
    wandb_run_id: str | None = None
    finished: RunStatus | None = None
    stopped: bool = False

    @property
    def trains(self) -> bool:
        return self.finished is None and not self.stopped


@dataclass
class Record:
    """What a job leaves: its plan, and the status its training returned or what stopped it (an
    exception with its traceback; a refusal: a user error before it trained)."""

    plan: Plan | None = None
    status: RunStatus | None = None
    stopped_by: BaseException | None = None
    traceback: str | None = None


@contextlib.contextmanager
def recording(job: Job) -> Iterator[Record]:
    """Hold the job's directory for the block (a second process on it is refused, exit 2; in a
    worker-process sweep the first Ctrl-C outside training becomes the sweep's stop request), and
    keep whatever ends the block for :func:`finish`. Rank 0 writes; under SLURM tasks / torchrun
    every rank runs the job."""
    record = Record()
    try:
        with (
            WorkerStopHandler(job.stop_file) if job.stop_file is not None else contextlib.nullcontext(),
            RunDirectoryLock(job.output_dir) if is_rank_zero() else contextlib.nullcontext(),
        ):
            yield record
    except RunDirectoryBusy:
        raise
    except BaseException as err:  # Ctrl-C, SIGTERM, a crash, a refusal: finish says what it was
        record.stopped_by, record.traceback = err, traceback.format_exc()


class WorkerStopHandler:
    """In a worker process, outside training (set-up, evaluation): the first SIGINT/SIGTERM writes
    the sweep's stop file instead of raising ``KeyboardInterrupt`` somewhere in the job, which would
    take the worker down; training's own handler (:class:`~ablate.callbacks.interrupt.GracefulInterrupt`)
    replaces this one while it runs.

    After the job SIGINT stays handled so: a Ctrl-C reaching an idle worker (the terminal sends it to
    every process of the sweep) would otherwise end it, and joblib would report a broken pool.
    SIGTERM (which loky uses to end workers) and SIGHUP go back to what they were."""

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


def decide(job: Job, identity: dict[str, Any]) -> Plan:
    """What this job does with its directory (see the module docstring); ``identity``: the checked
    config's run identity, which a resumed checkpoint's must equal. A refusal raises a
    :class:`~ablate.errors.UserError` and changes nothing; a job that trains then takes the directory:
    a replaced run's files and a killed writer's temporary files go, the run's config is written."""
    control, output_dir = job.control, job.output_dir
    status = read_status(output_dir)
    if job.stop_file is not None and job.stop_file.exists():  # the sweep was asked to stop
        return Plan(stopped=True)
    if job.multirun and control.skip_completed and status is not None and status.finished:
        return Plan(finished=status)
    fresh = (job.multirun and not control.skip_completed) or (not job.multirun and control.ckpt_path is None)
    plan = Plan() if fresh else _resume(job, status, identity)
    found = [*checkpoint_files(control.checkpoint_dirs), *[p for p in (output_dir / "status.json",) if p.exists()]]
    if fresh and found and not job.multirun and not control.overwrite and is_rank_zero():
        raise ConfigError(  # two runs would mix their checkpoints
            f"{output_dir} already holds a run ({', '.join(p.name for p in found[:3])}): continue it with "
            "ckpt_path=last, replace it with overwrite=true, or choose another directory"
        )
    abandoned = abandoned_writes(control.checkpoint_dirs)  # of processes killed while writing a checkpoint
    if plan.trains and is_rank_zero():  # rank 0 takes the directory, before any rank trains
        check_run_folder(output_dir, control.checkpoint_dirs)  # no link out of it: nothing elsewhere is deleted
        if fresh and found:
            why = "skip_completed=false" if job.multirun else "overwrite=true"
            log.info(f"{why}: training {output_dir} from scratch; removing its previous status.json and checkpoints")
        for path in [*(found if fresh else []), *abandoned]:
            path.unlink(missing_ok=True)
        (output_dir / CONFIG_DIR).mkdir(parents=True, exist_ok=True)
        for name, text in job.config_files:  # what Hydra would have written before the checks
            (output_dir / CONFIG_DIR / name).write_text(text)
    return plan


def _resume(job: Job, status: RunStatus | None, identity: dict[str, Any]) -> Plan:
    """The checkpoint a job resumes (a sweep's job: its ``last.ckpt`` when it was killed or crashed),
    read once before any data is read: readable, and trained as the same run. A single run resuming
    a finished run that it would not train further reports it instead (``finished``)."""
    control = job.control
    last = find_last_checkpoint(control.checkpoint_dirs)
    if job.multirun and last is not None and control.ckpt_path is None:  # killed or crashed before
        log.info(f"resuming {job.output_dir} ({status.status if status else 'interrupted'}) from {last}")
        ckpt_path: str | None = str(last)
    else:
        ckpt_path = resolve_ckpt_path(control.ckpt_path, control.checkpoint_dirs)
    if ckpt_path is None and control.ckpt_path == "last":  # a job's first run (a requeue scheme)
        dirs = ", ".join(map(str, control.checkpoint_dirs))
        rank_zero_warn(f"ckpt_path=last: no last checkpoint in {dirs}; starting from scratch")
    more = status is not None and control.max_steps is not None and control.max_steps > int(status.steps or 0)
    finished = status if not job.multirun and status is not None and status.finished else None
    plan = Plan(ckpt_path, finished=None if more and finished and finished.status == "completed" else finished)
    if ckpt_path is None or not Path(ckpt_path).is_file():
        return plan
    checkpoint = inspect_checked(ckpt_path)  # readable, its weights those of the spec it stores, finite
    require_resumable(checkpoint, ckpt_path)  # not best.ckpt's weights alone
    state = resume_state(checkpoint)
    if state.get("run_identity") is None:
        rank_zero_info(f"{ckpt_path} predates the resume check: its settings cannot be compared with this config")
    else:
        changes = check_same_run(state["run_identity"], identity, list(control.resume_allow_changes), ckpt_path)
        if changes:
            rank_zero_info(f"resuming {ckpt_path} with allowed changes: {'; '.join(changes)}")
    return replace(plan, wandb_run_id=state.get("wandb_run_id"))


def finish(job: Job, record: Record) -> float:
    """The end of the job, recorded (see the module docstring): a refusal exits 2; a finished run is
    reported (a sweep's job skipped, a single run not retrained); what ended the training is written
    to ``status.json`` and summarised, and an interrupted run says how to resume it and exits 130.
    Returns the value for a sweeper."""
    plan, err, writer = record.plan, record.stopped_by, is_rank_zero()
    refused = isinstance(err, UserError) and plan is None  # its config or its directory: before it trained
    resume = job.resume_command() if not job.multirun else "re-run the same sweep command to resume it"
    if isinstance(err, (KeyboardInterrupt, SystemExit, SIGTERMException)):  # a second Ctrl-C, SIGTERM, Lightning's exit
        error = f"{type(err).__name__} before the end of a training step"
        status = RunStatus("interrupted", job.overrides, error=error)
    elif err is not None and refused and not job.multirun:  # kept only for a damaged checkpoint (below)
        status = RunStatus("crashed", job.overrides, error=str(err))
    elif err is not None:
        message, rank_trace = distributed.failure_message(err)
        status = RunStatus("crashed", job.overrides, error=message, traceback=rank_trace or record.traceback)
    elif plan is not None and plan.finished is not None:
        status = plan.finished
    elif record.status is not None:
        status = record.status
    else:  # the sweep was asked to stop before this job started: no record, a re-run runs it
        print(f"not started: the sweep was interrupted; re-run the same command to run {job.output_dir.name}")
        return math.nan
    known = status is plan.finished if plan is not None else False  # its record is there already
    if writer and not known and (job.multirun or not refused or isinstance(err, CheckpointError)):
        record_status(job.output_dir, status)  # a damaged checkpoint is recorded; a finished run's record stays
    value, pending = math.nan, None
    if job.multirun and status.status != "interrupted":
        try:  # the best value the run logged; diverged and crashed jobs rank last
            value = best_metric_value(job.output_dir, status, job.control.optimized_metric)
        except MetricNotLoggedError as missing:
            pending = missing if job.optimised else None  # a grid sweep does not use the value
    if plan is not None and plan.trains:  # the W&B run ends with the outcome in its summary (a crash: none)
        interrupted = status.status == "interrupted"
        code = cli.EXIT_INTERRUPTED if interrupted else cli.EXIT_CRASHED if err is not None else cli.EXIT_OK
        finish_wandb(code, status.outcome() if err is None else None)
    if refused and not job.multirun and job.new_directory and writer:  # a refused command leaves no run behind
        for path in (job.output_dir / name for name in (LOCK_FILE, job_log_name()) if name):  # its lock, its log
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # not empty: something that is not this command's is in it
            job.output_dir.rmdir()
    if isinstance(err, UserError) and not job.multirun:  # its message says what to fix: exit 2, no traceback
        cli.report_user_error(err)
    if err is not None and not job.multirun and not isinstance(err, (KeyboardInterrupt, SystemExit, SIGTERMException)):
        raise err  # a crash of a single run: its traceback, exit 1
    if err is not None and status.status == "crashed":
        print(f"job crashed ({status.error}); recorded in {job.output_dir / 'status.json'}; the sweep continues")
    if known:  # a finished run found again: new tags relabel it (ablate.tracking.relabel), nothing else changes
        relabel_finished(job, status)
    if known and job.multirun:
        log.info(
            f"skipped: {job.output_dir} is already {status.status} (its status.json); skip_completed=false retrains it"
        )
    elif known and writer:
        print(
            f"already {status.status}: {job.output_dir} (its status.json: {status.steps} steps of trainer.max_steps="
            f"{job.control.max_steps}); nothing was trained or rewritten. To train it longer: "
            "trainer.max_steps=<more> '+resume_allow_changes=[trainer.max_steps]'",
            flush=True,
        )
    if writer and not (known and job.multirun):
        print(format_run_summary(status, job.output_dir), flush=True)
    if pending is not None:
        raise pending  # a metric the sweeper optimises was never logged: stop the sweep, naming it
    if status.status == "interrupted" and not known:  # where it stopped, and the command that resumes it
        last = find_last_checkpoint(job.control.checkpoint_dirs)
        where = f"step {status.steps}" if status.steps is not None else "mid-step"
        resume = resume if job.multirun else f"resume with: {resume}"
        print(f"interrupted at {where}; last checkpoint: {last or 'none'}; {resume}", file=sys.stderr, flush=True)
        if job.worker_processes:
            return math.nan  # the sweep's main process ends the sweep with its table and exit code 130
        raise SystemExit(cli.EXIT_INTERRUPTED)  # a sweep stops too: the user asked to stop
    return value


def relabel_finished(job: Job, done: RunStatus) -> None:
    """A finished run re-run with other ``tags``: its W&B run and ``status.json`` get them, and
    nothing is trained (:mod:`ablate.tracking.relabel`)."""
    if not is_rank_zero():
        return
    wandb = WandbOptions.from_logger({"wandb": job.wandb_options})
    relabelled = relabel(job.tags, wandb, job.output_dir, done.tags, done.axes, job.labels)
    if relabelled is None:
        return
    tags, where = relabelled
    write_status(job.output_dir, replace(done, tags=tags))
    print(
        f"relabelled {job.output_dir.name} (already {done.status}): tags {tags} on its "
        f"{where or 'record (no W&B run)'}; nothing was trained",
        flush=True,
    )
