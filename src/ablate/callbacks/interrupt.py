"""Ctrl-C that loses nothing: stop at the end of the current optimiser step and save a checkpoint.

Lightning's own handling of ``KeyboardInterrupt`` (``trainer/call.py``) can only react where the
exception lands -- possibly halfway through ``optimizer.step()`` -- so it saves nothing, ignores
SIGINT from then on and calls ``sys.exit(1)``, which an ``except Exception`` does not catch. This
callback installs its own SIGINT handler while training runs: the first Ctrl-C only sets a flag;
at the end of that step (parameters, optimiser, schedule and data position consistent) training
stops (``trainer.should_stop``), :class:`~ablate.callbacks.checkpointing.LastCheckpoint` saves ``last.ckpt``
at that step (a mid-epoch checkpoint, which resumes exactly), the validation Lightning would run
before stopping is skipped (:class:`TrainingInterrupted` is raised at its start: the user asked
to stop, not to wait for a validation pass) and ``train.py`` records the job as ``interrupted``. A second Ctrl-C
raises ``KeyboardInterrupt`` at once (the last periodic checkpoint is then the one to resume).

SIGTERM, what a scheduler (SLURM before a kill or a requeue, Kubernetes, ``kill``) sends, and SIGHUP,
what a closed terminal (or a dropped SSH connection) sends, are handled the same way: the job stops
after its step with that step saved and its status recorded (exit 130), instead of dying at once.
(SLURM's requeue signal, ``--signal=USR1@90``, stays Lightning's: its SLURM environment saves an
``hpc`` checkpoint and requeues the job.)

In a sweep whose jobs run in worker processes (``hydra/launcher=cpu_parallel``), a stop request of
the whole sweep is a file, ``<sweep dir>/.stop`` (:data:`STOP_FILE`; the sweep's side is
:mod:`ablate.sweepers.sweep_stop`): the first signal any process of the sweep receives writes it
(:func:`request_stop`), and every job polls it after each step, so that all of them stop and save
however the signal arrived.

Under DDP the ranks must stop at the same step, so they agree on the request with a collective
read on the host (which makes the CPU wait for the GPU): every ``trainer.log_every_n_steps``
steps rather than after every step, so a stop comes up to that many steps after the signal.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from types import FrameType
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from ablate.callbacks.stop_file import STOP_FILE, request_stop, stop_requested

__all__ = ["STOP_FILE", "GracefulInterrupt", "TrainingInterrupted", "request_stop", "stop_requested"]


class TrainingInterrupted(BaseException):
    """Raised after the interrupted step's checkpoint is saved, to end ``trainer.fit`` without
    the validation Lightning runs when training stops early. A ``BaseException`` (as
    ``KeyboardInterrupt``) so that no ``except Exception`` records it as a crash; not a
    ``KeyboardInterrupt``, which Lightning turns into ``sys.exit(1)``."""


class GracefulInterrupt(Callback):
    """Turns the first SIGINT during training into a clean stop after the current step.

    Args:
        stop_file: the sweep's stop-request file (:func:`ablate.run.job.stop_file`), polled
            after every step; None outside a worker-process sweep.

    Attributes:
        interrupted_at: the optimiser step training stopped at because of Ctrl-C, else ``None``.
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal closed

    def __init__(self, stop_file: Path | None = None) -> None:
        self.interrupted_at: int | None = None
        self.stop_file = stop_file
        self._requested = False
        self._signalled = False
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self._signalled:  # the second Ctrl-C (or SIGTERM): stop now
            raise KeyboardInterrupt
        self._signalled = self._requested = True
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        if self.stop_file is not None:
            request_stop(self.stop_file, f"{name} in a job")  # the other jobs of the sweep stop too
        print(
            f"\n{name}: stopping after this step and saving a checkpoint (press Ctrl-C again to stop at once)",
            file=sys.stderr,
            flush=True,
        )

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self._previous = {signum: signal.signal(signum, self._handler) for signum in self.SIGNALS}
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

    def _restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restore()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self._restore()
