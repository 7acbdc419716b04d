"""Ctrl-C that loses nothing: stop at the end of the current optimiser step and save a checkpoint.

Lightning's own ``KeyboardInterrupt`` handling reacts where the exception lands, possibly inside
``optimizer.step()``, so it saves nothing and exits 1. Here the first Ctrl-C (or SIGTERM, SIGHUP)
only sets a flag: at the end of that step training stops, ``last.ckpt`` is saved (it resumes
exactly), the validation Lightning would run is skipped (:class:`TrainingInterrupted`) and the job
is recorded ``interrupted`` (exit 130). A second Ctrl-C raises ``KeyboardInterrupt`` at once.

SLURM's requeue signal (``sbatch --signal=USR1@90``) stops after the agreed step too, then rank 0
runs ``scontrol requeue`` (Lightning's handler saves from inside the signal handler, where under DDP
a rank may be inside another collective). A worker-process sweep's stop file
(:mod:`ablate.callbacks.stop_file`) is polled after each step. Under DDP the ranks agree with a host
read (a GPU sync), so only every ``trainer.log_every_n_steps`` steps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only

from ablate.callbacks.stop_file import request_stop, stop_requested

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal closed
# SLURM's requeue signal where no SLURMEnvironment names it (the ranks a SLURM task launches itself):
# the default requeue_signal of Lightning's SLURMEnvironment, which sbatch --signal=USR1@<s> sends
REQUEUE_SIGNAL = signal.SIGUSR1
_relayed = False  # this process is a rank whose launching process relays stop signals
_held: int | None = None  # a stop signal that reached such a rank before its training started
_held_requeue = False  # ... and it was SLURM's requeue signal


def _hold(signum: int, frame: FrameType | None) -> None:
    global _held, _held_requeue
    _held = _held or signum
    _held_requeue = _held_requeue or signum == REQUEUE_SIGNAL


def in_slurm_job() -> bool:
    """This process runs inside a SLURM job (which may send its requeue signal)."""
    return "SLURM_JOB_ID" in os.environ


def relayed_signals() -> tuple[int, ...]:
    """The signals a job's launching process relays to its ranks: the stop signals (and SLURM's requeue)."""
    return (*STOP_SIGNALS, *((REQUEUE_SIGNAL,) if in_slurm_job() else ()))


def hold_stop_signals() -> None:
    """Make this process a rank of the job's own launcher (:func:`ablate.run.distributed.launch`): a
    stop signal (and SLURM's requeue signal) is from now on a request, held until training starts."""
    global _relayed
    _relayed = True
    if threading.current_thread() is threading.main_thread():
        for signum in relayed_signals():
            signal.signal(signum, _hold)


def slurm_requeue_signal(trainer: L.Trainer) -> int | None:
    """SLURM's signal of the job's end when Lightning's SLURM environment requeues on it, else None."""
    from lightning.fabric.plugins.environments import SLURMEnvironment

    # the environment Lightning's own signal connector reads (not public in Lightning 2.6)
    connector = getattr(trainer, "_accelerator_connector", None)
    environment = getattr(connector, "cluster_environment", None)
    if isinstance(environment, SLURMEnvironment) and environment.auto_requeue and environment.requeue_signal:
        return int(environment.requeue_signal)
    return None


def ignore_sigterm_from_now_on(trainer: L.Trainer | None) -> None:
    """SIGTERM ignored by the whole process (every thread: another thread's default action would end
    it), also after the Trainer puts back the handlers it found (its connector's record, not public)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    originals = getattr(getattr(trainer, "_signal_connector", None), "_original_handlers", None)
    if isinstance(originals, dict):
        originals[signal.SIGTERM] = signal.SIG_IGN


def requeue_slurm_job() -> None:
    """``scontrol requeue <job id>`` (an array task: ``<array job>_<task>``), as Lightning's handler runs it."""
    job = os.environ.get("SLURM_JOB_ID", "")
    if os.environ.get("SLURM_ARRAY_JOB_ID"):
        job = f"{os.environ['SLURM_ARRAY_JOB_ID']}_{os.environ.get('SLURM_ARRAY_TASK_ID', '')}"
    if not job.replace("_", "").isdigit():
        print(f"not requeued: SLURM_JOB_ID={job!r} is not a job id", file=sys.stderr, flush=True)
        return
    try:
        code = subprocess.call(["scontrol", "requeue", job])
        failure = f"exit code {code}"
    except OSError as err:
        code, failure = -1, f"{type(err).__name__}: {err}"
    said = f"requeued SLURM job {job}" if code == 0 else f"requeueing SLURM job {job} failed ({failure})"
    print(said, file=sys.stderr, flush=True)


class TrainingInterrupted(BaseException):
    """Ends ``trainer.fit`` after the interrupted step's checkpoint, skipping Lightning's validation. A
    ``BaseException`` so no ``except Exception`` records a crash; not a ``KeyboardInterrupt`` (exit 1)."""


class GracefulInterrupt(Callback):
    """The first SIGINT during training stops it after the step (``interrupted_at``); polls ``stop_file``."""

    SIGNALS = STOP_SIGNALS

    def __init__(self, stop_file: Path | None = None) -> None:
        self.interrupted_at: int | None = None
        self.stop_file = stop_file
        self._requested = False
        self._signalled = False
        self._requeue_signal: int | None = None  # SLURM's, when Lightning's SLURM environment requeues on it
        self._requeue = False  # that signal came: save, then ask SLURM to requeue the job
        self._previous: dict[int, Any] = {}
        self._trainer: L.Trainer | None = None

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if _relayed:  # the launching process said it, passed it on, and decides about a second one
            self._requested = True
            if signum == self._requeue_signal and not self._requeue:  # then SLURM's SIGTERM: expected
                self._requeue = True
                ignore_sigterm_from_now_on(self._trainer)
            return
        if self._requeue:  # SLURM ends the job it was asked to requeue (SIGTERM): already stopping
            return
        if self._signalled and signum != self._requeue_signal:  # the second Ctrl-C (or SIGTERM): stop now
            raise KeyboardInterrupt
        self._signalled = self._requested = True
        self._requeue = signum == self._requeue_signal
        if self._requeue:  # SLURM ends the job it requeues with SIGTERM: ignored from here to the process's end
            ignore_sigterm_from_now_on(self._trainer)
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if self.stop_file is not None:
            request_stop(self.stop_file, f"{name} in a job")  # the other jobs of the sweep stop too
        if rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # every rank got it; one says it
            after = "requeueing the job" if self._requeue else "press Ctrl-C again to stop at once"
            print(f"\n{name}: stopping after this step and saving a checkpoint ({after})", file=sys.stderr, flush=True)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._trainer = trainer
        self._requeue_signal = slurm_requeue_signal(trainer)
        if self._requeue_signal is None and _relayed and in_slurm_job():  # a SLURM task's own ranks
            self._requeue_signal = int(REQUEUE_SIGNAL)
        signals = (*self.SIGNALS, *((self._requeue_signal,) if self._requeue_signal else ()))
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self._previous = {signum: signal.signal(signum, self._handler) for signum in signals}
        if _held is not None:  # a rank of the job's launcher, asked to stop while it was set up
            self._requested = True
            if _held_requeue and self._requeue_signal is not None:
                self._handler(self._requeue_signal, None)
        self._poll_stop_file()  # requested while the job was being set up: one step, saved, recorded

    def _poll_stop_file(self) -> None:
        if not self._requested and stop_requested(self.stop_file):
            self._requested = True
            print("the sweep was interrupted: this job stops after this step and saves it", file=sys.stderr, flush=True)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # mid-accumulation: stop only where an optimiser step has just been taken
        self._poll_stop_file()
        requested = self._requested
        if trainer.world_size > 1:  # every rank must stop at the same step, or DDP deadlocks
            # the agreement is a collective read on the host (a GPU sync): every log_every_n_steps
            # steps, at the same steps on every rank, not at every step (issue 31)
            every = max(int(trainer.log_every_n_steps or 1), 1)  # type: ignore[attr-defined]  # set at runtime
            if trainer.global_step % every:
                return
            requested = trainer.strategy.reduce_boolean_decision(requested, all=False)
        if requested and self.interrupted_at is None:
            self.interrupted_at = trainer.global_step
            trainer.should_stop = True

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.interrupted_at is not None:  # the validation Lightning runs on should_stop
            raise TrainingInterrupted(f"Ctrl-C at step {self.interrupted_at}")

    def _finish(self, trainer: L.Trainer) -> None:
        """After training: a SLURM requeue, then the signal handlers as they were."""
        if self._requeue and self.interrupted_at is not None and trainer.is_global_zero:
            requeue_slurm_job()
        for signum, previous in self._previous.items():
            signal.signal(signum, signal.SIG_IGN if self._requeue and signum == signal.SIGTERM else previous)
        self._previous = {}

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._finish(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._finish(trainer)
