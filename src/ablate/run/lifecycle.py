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
     ``ckpt_path=last`` where there is no checkpoint is refused (it names a run to continue), except
     for a sweep's job and inside a SLURM job, where the same command is also the job's first run;
   * a single run without ``ckpt_path`` into a directory that holds another run: refused, unless
     ``overwrite=true`` (which removes the old record first).

   A resumed checkpoint is read once, here: it must be readable and trained with the same
   run-defining settings (:func:`ablate.config.identity.check_same_run`).
3. :func:`finish` -- the end of the block, by one table (:data:`HANDLING`) of the job's
   :class:`Outcome` (trained, found finished, not started, interrupted, refused, crashed) for a
   single run and for a sweep's job: whether ``status.json`` is written (:mod:`ablate.run.status`),
   the summary printed, the exit code (0; 130 interrupted, with the command that resumes the run;
   2 a user error, its message; 1 a crash, its traceback) or the value a sweeper optimises.
   ``crashed`` records faults of the program or the machine. A user error of a single run -- a bad
   config, no GPU, missing data, a directory that holds another run, a checkpoint of another run --
   records nothing, and what the command added goes (:func:`leave_nothing`), unless it came after
   the run trained (a full disk at step 30): then the run stays, recorded as refused. A command
   that fails before it took its directory changes no run's record, and a failed resume (refused
   before it trained, or an attempt to train a finished run longer) leaves the run's files as they
   were (:mod:`ablate.run.attempt`).
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
import os
import shutil
import signal
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import FrameType
from typing import Any, Literal

from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import SIGTERMException

from ablate import cli
from ablate.callbacks.stop_file import request_stop
from ablate.checkpoints.files import (
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
from ablate.nn.spec import ModelSpec
from ablate.run import attempt, distributed, footprint
from ablate.run.job import CONFIG_DIR, Job, is_rank_zero, job_log_name
from ablate.run.lock import RunDirectoryLock
from ablate.run.objective import MetricNotLoggedError, best_metric_value
from ablate.run.status import FAILED_RECORD, RunStatus, read_status, record_status, write_status
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
    kept: bool = False  # a resume: the run's files are kept until the job ends (ablate.run.attempt)

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
    started_ns: int = field(default_factory=time.time_ns)  # a checkpoint written since: this command trained


@contextlib.contextmanager
def recording(job: Job) -> Iterator[Record]:
    """Hold the job's directory for the block (a second process on it is refused, exit 2; in a
    worker-process sweep the first Ctrl-C outside training becomes the sweep's stop request), and
    keep whatever ends the block for :func:`finish`. Rank 0 writes; under SLURM tasks / torchrun
    every rank runs the job."""
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


def decide(job: Job, identity: dict[str, Any], trainer: Mapping[str, Any] | None = None) -> Plan:
    """What this job does with its directory (see the module docstring); ``identity``: the checked
    config's run identity, which a resumed checkpoint's must equal; ``trainer``: its ``trainer``
    config, which must be able to load the checkpoint (:func:`require_sharded_loader`). A refusal raises a
    :class:`~ablate.errors.UserError` and changes nothing; a job that trains then takes the directory:
    a replaced run's files and a killed writer's temporary files go, the run's config is written."""
    control, output_dir = job.control, job.output_dir
    status = read_status(output_dir)
    if job.stop_file is not None and job.stop_file.exists():  # the sweep was asked to stop
        return Plan(stopped=True)
    if job.multirun and control.skip_completed and status is not None and status.finished:
        return Plan(finished=status)
    fresh = (job.multirun and not control.skip_completed) or (not job.multirun and control.ckpt_path is None)
    plan = Plan() if fresh else _resume(job, status, identity, trainer)
    records = (output_dir / "status.json", output_dir / FAILED_RECORD)
    found = [*checkpoint_files(control.checkpoint_dirs), *[p for p in records if p.exists()]]
    if fresh and found and not job.multirun and not control.overwrite and is_rank_zero():
        raise ConfigError(  # two runs would mix their checkpoints
            f"{output_dir} already holds a run ({', '.join(p.name for p in found[:3])}): continue it with "
            "ckpt_path=last, replace it with overwrite=true, or choose another directory"
        )
    abandoned = abandoned_writes(control.checkpoint_dirs)  # of processes killed while writing a checkpoint
    plan = replace(plan, kept=plan.trains and not fresh)
    if plan.trains and is_rank_zero():  # rank 0 takes the directory, before any rank trains
        check_run_folder(output_dir, control.checkpoint_dirs)  # no link out of it: nothing elsewhere is deleted
        if plan.kept:  # before anything of the run changes: a failed resume puts it back
            attempt.keep(output_dir, control.checkpoint_dirs)
        else:  # a fresh run: what a killed resume kept (hard links to old checkpoints) goes
            attempt.settle(output_dir, control.checkpoint_dirs, failed=False)
        if fresh and found:
            why = "skip_completed=false" if job.multirun else "overwrite=true"
            log.info(f"{why}: training {output_dir} from scratch; removing its previous status.json and checkpoints")
        for path in [*(found if fresh else []), *abandoned]:
            if path.is_dir() and not path.is_symlink():  # a sharded checkpoint's folder
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        (output_dir / CONFIG_DIR).mkdir(parents=True, exist_ok=True)
        for name, text in job.config_files:  # what Hydra would have written before the checks
            (output_dir / CONFIG_DIR / name).write_text(text)
    return plan


def refuse_another_runs_checkpoint(job: Job, ckpt_path: Path) -> None:
    """A single run given ``ckpt_path=<run>/checkpoints/<file>`` of another run folder would resume
    that run in this command's folder: one run in two folders, the new one recorded ``completed``
    (with Lightning's "dirpath has changed" warning only). Refused, naming the command that
    continues it where it is."""
    run = ckpt_path.resolve().parent.parent
    if ckpt_path.resolve().parent.name != "checkpoints" or not (run / CONFIG_DIR).is_dir():
        return  # not a run's checkpoint: a file of the user's, loaded as asked
    if run == job.output_dir.resolve():
        return
    raise ConfigError(
        f"ckpt_path={ckpt_path} is a checkpoint of the run {run}; this command would continue it in another "
        f"folder, {job.output_dir}. Continue it in its own folder: {job.resume_command(run)}"
    )


def _resume(job: Job, status: RunStatus | None, identity: dict[str, Any], trainer: Mapping[str, Any] | None) -> Plan:
    """The checkpoint a job resumes (a sweep's job: its ``last.ckpt`` when it was killed or crashed),
    read once before any data is read: readable, and trained as the same run. A single run resuming
    a finished run that it would not train further reports it instead (``finished``)."""
    control = job.control
    last = find_last_checkpoint(control.checkpoint_dirs)
    announced = False  # the console's one line that says the run resumes (Lightning's own are dropped)
    if job.multirun and last is not None and control.ckpt_path is None:  # killed or crashed before
        log.info(f"resuming {job.output_dir} ({status.status if status else 'interrupted'}) from {last}")
        ckpt_path: str | None = str(last)
        announced = True
    else:
        ckpt_path = resolve_ckpt_path(control.ckpt_path, control.checkpoint_dirs)
    if ckpt_path is None and control.ckpt_path == "last":
        if stopped_before_its_first_checkpoint(job):
            log.info(
                f"ckpt_path=last: {job.output_dir} stopped before its first checkpoint; it starts again from step 0"
            )
        elif first_run_may_resume(job):
            log.info(
                f"ckpt_path=last: no checkpoint in {job.output_dir} yet; this first run of the job starts from step 0"
            )
        else:
            raise ConfigError(nothing_to_resume(job))
    more = status is not None and control.max_steps is not None and control.max_steps > int(status.steps or 0)
    finished = status if not job.multirun and status is not None and status.finished else None
    plan = Plan(ckpt_path, finished=None if more and finished and finished.status == "completed" else finished)
    if ckpt_path is None or not Path(ckpt_path).exists():  # "best", "hpc", a URL: Lightning's to find
        if ckpt_path is not None:
            rank_zero_info(f"resuming {ckpt_path}")
        return plan
    if trainer is not None:
        require_sharded_loader(ckpt_path, trainer)
    checkpoint = inspect_checked(ckpt_path)  # readable, its weights those of the spec it stores, finite
    require_resumable(checkpoint, ckpt_path)  # not best.ckpt's weights alone
    require_same_scales(checkpoint, ckpt_path)
    if not job.multirun:
        refuse_another_runs_checkpoint(job, Path(ckpt_path))
    state = resume_state(checkpoint)
    if state.get("run_identity") is None:
        rank_zero_info(f"{ckpt_path} predates the resume check: its settings cannot be compared with this config")
    else:
        changes = check_same_run(state["run_identity"], identity, list(control.resume_allow_changes), ckpt_path)
        if changes:
            rank_zero_info(f"resuming {ckpt_path} with allowed changes: {'; '.join(changes)}")
            announced = True
    if not announced:
        rank_zero_info(f"resuming {ckpt_path} at step {checkpoint['global_step']}")
    return replace(plan, wandb_run_id=state.get("wandb_run_id"))


def require_same_scales(checkpoint: Mapping[str, Any], ckpt_path: str) -> None:
    """A run trained before the scale contract with a model the contract changes (a unit sinusoid)
    would go on as another model: refused, naming what changed (eval.py, generate.py and the
    exports build it from its stored spec, as it was trained)."""
    stored = (checkpoint.get("hyper_parameters") or {}).get("spec")
    if isinstance(stored, Mapping) and ModelSpec.from_dict(stored).contract_changes_model():
        raise ConfigError(
            f"{ckpt_path} was trained before the scale contract (docs/architecture.md#the-scale-contract): its "
            "additive position signal has the old scale (a unit-amplitude sinusoid, or a learned table not "
            "scaled with model.scale_embeddings), which this version no longer builds for training, so resuming it "
            "would change the model mid-run. Evaluate it as it is (eval.py, generate.py), or train it anew"
        )


def require_sharded_loader(ckpt_path: str | None, trainer: Mapping[str, Any]) -> None:
    """A sharded FSDP checkpoint (a folder of shards) is resumed by Lightning's FSDP strategy only:
    under another strategy Lightning would try to read the folder as one file. Refused by name
    before anything is read, with the two ways on."""
    if ckpt_path is None or not Path(ckpt_path).is_dir():
        return
    strategy = trainer.get("strategy", "auto")
    name = str(strategy.get("_target_", "")) if isinstance(strategy, Mapping) else str(strategy or "")
    if "fsdp" in name.lower():
        return
    raise ConfigError(
        f"{ckpt_path} is a sharded FSDP checkpoint (a folder of shards, written by trainer=fsdp "
        f"trainer.strategy.state_dict_type=sharded), which only FSDP resumes; this run's trainer.strategy is "
        f"{name.rsplit('.', 1)[-1] or 'auto'}. Resume it with trainer=fsdp (on GPUs); eval.py, generate.py and the "
        "exports read it as it is"
    )


def first_run_may_resume(job: Job) -> bool:
    """Whether ``ckpt_path=last`` may find no checkpoint and start the job from step 0: a sweep's job
    (the sweep names its directory; a requeued sweep resumes the jobs that have one) and a run inside a
    SLURM job (the same command is the first submission and every requeue). Typed at a terminal,
    ``ckpt_path=last`` means a run to continue, never a new one."""
    return job.multirun or "SLURM_JOB_ID" in os.environ


def stopped_before_its_first_checkpoint(job: Job) -> bool:
    """The named directory holds a run that started (its config was written when it took the
    directory) and was stopped before it saved a checkpoint (killed, or interrupted in its first
    steps): ``ckpt_path=last`` continues it from step 0, having lost nothing. A mistyped or empty
    folder holds no such run, and is refused (:func:`nothing_to_resume`)."""
    return job.directory_given and (job.output_dir / CONFIG_DIR / "config.yaml").is_file()


def nothing_to_resume(job: Job) -> str:
    """Why a single run's ``ckpt_path=last`` continues nothing, and what to type instead."""
    if job.directory_given:
        return (
            f"ckpt_path=last: {job.output_dir} holds no checkpoint to continue (no last.ckpt in "
            f"{', '.join(dict.fromkeys(map(str, job.control.checkpoint_dirs)))}); nothing was started. Give the directory of the run "
            "to continue (printed at its start and in its summary), or leave out ckpt_path=last to start a new run there"
        )
    return (
        f"ckpt_path=last: no run of this configuration under {job.control.log_dir / 'runs'} holds a checkpoint; "
        "nothing was started. Give the run's directory (hydra.run.dir=<run dir> ckpt_path=last), or leave out "
        "ckpt_path=last to start a new run"
    )


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
    """What :func:`finish` does for one outcome of a single run or of a sweep's job.

    ``writes``: when the job's record (``status.json``) is written: ``always``; ``taken``: only by a
    job that took its directory (its plan trains: :func:`decide` wrote the run's config there), so a
    command that fails before that changes no run's record; ``trained``: only by a job that wrote a
    checkpoint (a full disk at step 30 keeps the run it trained, :func:`trained_here`); ``never``. ``summary``: the run's
    summary block is printed. ``exit_code``: how a single run ends (a sweep's job returns the value
    for its sweeper instead)."""

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
    (Outcome.REFUSED, True): Handling(
        "always", True, cli.EXIT_USER_ERROR
    ),  # `refused`, its message; a re-run retries it
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
    """The end of the job (see the module docstring): the outcome (:func:`outcome_of`) decides, by
    :data:`HANDLING`, what is recorded and printed and how the command ends. Returns the value for a
    sweeper."""
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
        attempt.settle(job.output_dir, job.control.checkpoint_dirs, failed=failed_resume(job, record, outcome))
    if writer and outcome is Outcome.CRASHED:  # the job's log says what its record says (every failed rank's error)
        to_job_log(f"crashed: {status.error}\n{status.traceback or ''}".rstrip())
    if writer and writes:
        record_status(job.output_dir, status)  # a finished run's record stays (a failed attempt: status.failed.json)
    if taken:  # the W&B run ends with the outcome in its summary (a crash: none)
        finish_wandb(
            handling.exit_code if outcome is not Outcome.TRAINED else _trained_exit(status), _summary(status, err)
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
    """``message`` into the job's log files (Hydra's ``train.log``) only: the console has it already
    (the traceback a crash prints), the log file had nothing of the crash."""
    entry = logging.LogRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(entry)


def trained_here(job: Job, record: Record) -> bool:
    """This command wrote a checkpoint into the run (it trained): what it trained is kept and recorded."""
    return any(p.stat().st_mtime_ns >= record.started_ns for p in checkpoint_files(job.control.checkpoint_dirs))


def failed_resume(job: Job, record: Record, outcome: Outcome) -> bool:
    """A resume that failed (a user error or a crash) and whose files go back (:mod:`ablate.run.attempt`):
    one that trained nothing yet (refused on changed data), or an attempt to train a finished run longer,
    whose record stays that of the finished run. An unfinished run that trained on keeps its progress."""
    if outcome not in (Outcome.REFUSED, Outcome.CRASHED):
        return False
    previous = read_status(job.output_dir)
    return not trained_here(job, record) or (previous is not None and previous.finished)


def _trained_exit(status: RunStatus) -> int:
    return cli.EXIT_INTERRUPTED if status.status == "interrupted" else cli.EXIT_OK


def _summary(status: RunStatus, err: BaseException | None) -> dict[str, Any] | None:
    return status.outcome() if err is None else None


def _sweeper_value(job: Job, status: RunStatus) -> tuple[float, MetricNotLoggedError | None]:
    """The best value the job logged (diverged and crashed jobs rank last), and a metric the sweeper
    optimises that was never logged (an interrupted job has no value)."""
    if status.status == "interrupted":
        return math.nan, None
    try:
        return best_metric_value(job.output_dir, status, job.control.optimized_metric), None
    except MetricNotLoggedError as missing:
        return math.nan, missing if job.optimised else None  # a grid sweep does not use the value


def report_finished(job: Job, status: RunStatus) -> None:
    """A finished run found again: new tags relabel it (:mod:`ablate.tracking.relabel`), nothing else changes."""
    relabel_finished(job, status)
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
    """Where an interrupted job stopped and the command that resumes it (one stopped before it took
    its directory: that nothing was recorded); exit 130 (a worker of a parallel sweep returns: the
    sweep's main process ends the sweep with its table and 130)."""
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
    """A single run that recorded nothing takes back what the command added
    (:func:`ablate.run.footprint.take_back`): the directory Hydra made for it (its log, lock and the
    config :func:`decide` wrote) and the parents made with it; in a directory that was there, only
    the entries that were not, and the job log's new lines. Without a note of what was there, a
    directory made for this command goes, and any other is left as it is."""
    found = footprint.found(job.output_dir, made=job.new_directory)
    if found is not None:
        footprint.take_back(found, job_log_name())
    elif job.new_directory:
        shutil.rmtree(job.output_dir, ignore_errors=True)


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
