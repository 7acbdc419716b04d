"""Ctrl-C in a sweep whose jobs run in worker processes (``hydra/launcher=cpu_parallel`` or
``joblib``): every running job stops after its step and saves it, no job starts after, and the
parent prints the sweep's table and exits 130.

Without this, joblib turns the parent's ``KeyboardInterrupt`` into terminating its workers: a job
killed while saving loses its steps and its ``status.json``, and the user gets a traceback. The
stop request is a file, ``<sweep dir>/.stop``, so that it reaches every process of the sweep
however the signal arrived (the terminal sends Ctrl-C to all of them; ``kill -INT <parent>`` or a
SIGTERM to one of them reaches only that one):

- the first SIGINT/SIGTERM that any process of the sweep receives writes the file;
- a training job polls it after every optimiser step (:class:`~ablate.callbacks.interrupt.GracefulInterrupt`)
  and stops there as on its own Ctrl-C, recording ``interrupted``;
- a job that has not started training when the file appears is not started (it has no record,
  so re-running the sweep runs it); a worker that has not run a job yet ignores Ctrl-C
  (:func:`ignore_ctrl_c_until_a_job_runs`), else its death would make loky kill the running jobs;
- the parent (:class:`~ablate.sweepers.sweep_report.SweepReport`) keeps waiting for its workers, then prints
  the table and exits 130. A second Ctrl-C in the parent stops at once, as in a single run.

With the basic launcher the jobs run in the sweep's own process and Ctrl-C needs none of this.
"""

from __future__ import annotations

import functools
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from ablate.callbacks.stop_file import request_stop


def ignore_ctrl_c_until_a_job_runs() -> None:
    """A joblib (loky) worker's initializer: ignore SIGINT from the worker's start.

    The terminal's Ctrl-C reaches every process of the sweep. A worker that has not run a job yet
    has no handler (:class:`ablate.run.record.WorkerStopHandler` is installed by a job), so it would die of the
    ``KeyboardInterrupt``, and loky answers a dead worker by SIGKILLing every other one: the running
    jobs would lose the steps since their last checkpoint. With ``n_jobs`` above the number of jobs
    (``n_jobs=-1`` on a large machine) such idle workers are the rule. A job's own handler replaces
    this one, so jobs still stop after their step."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def loky_workers_ignore_ctrl_c_until_a_job_runs() -> Iterator[None]:
    """While a sweep launches: joblib's ``loky`` backend starts its workers with
    :func:`ignore_ctrl_c_until_a_job_runs` as their initializer. Hydra's joblib launcher names the
    backend ``"loky"``, so the name is registered for the launch (joblib's public
    ``register_parallel_backend``) and given back after."""
    from joblib import parallel, register_parallel_backend

    original = parallel.BACKENDS["loky"]  # the LokyBackend class
    register_parallel_backend("loky", functools.partial(original, initializer=ignore_ctrl_c_until_a_job_runs))
    try:
        yield
    finally:
        register_parallel_backend("loky", original)


class SweepStopHandler:
    """In a worker-process sweep's parent: the first SIGINT/SIGTERM writes the stop file (the jobs
    stop after their step and the sweep ends with its table); the second stops at once."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # SIGHUP: the terminal closed

    def __init__(self, path: Path) -> None:
        self.path = path
        self.signalled = False  # this process has had its first SIGINT/SIGTERM
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | None] = {}

    def install(self) -> None:
        self.path.unlink(missing_ok=True)  # an earlier interrupted run of this sweep: this one starts afresh
        self._previous = {signum: signal.signal(signum, self._handle) for signum in self.SIGNALS}

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous = {}

    def reason(self) -> str | None:
        """Why the sweep was asked to stop (the stop file's text), or None if it was not."""
        try:
            return self.path.read_text().strip()
        except FileNotFoundError:
            return None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        # the second signal of this process (a worker may have written the file for the first one)
        if self.signalled:
            raise KeyboardInterrupt  # stop at once (joblib terminates its workers)
        self.signalled = True
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        request_stop(self.path, f"{name} in the sweep's main process")
        print(
            f"\n{name}: the running jobs stop after their step and save it, no new job starts; waiting for them "
            "(press Ctrl-C again to stop at once)",
            file=sys.stderr,
            flush=True,
        )
