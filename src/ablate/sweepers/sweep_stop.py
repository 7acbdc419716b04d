"""Ctrl-C in a sweep whose jobs run in worker processes (``cpu_parallel``, ``joblib``): every running
job stops after its step and saves it, none starts after, and the parent prints the table and exits 130.

Without this, joblib terminates its workers and a job killed while saving loses its steps. The
request is a file, ``<sweep dir>/.stop``, so that it reaches every process however the signal came:
the first signal writes it, a training job polls it after every step, and a worker with no job yet
ignores Ctrl-C (its death would make loky kill the running jobs). A second Ctrl-C stops at once.
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
    """A loky worker's initializer: ignore SIGINT until a job installs its handler (a dead worker makes
    loky SIGKILL every other one, running jobs included)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@contextmanager
def loky_workers_ignore_ctrl_c_until_a_job_runs() -> Iterator[None]:
    """While a sweep launches, joblib's ``"loky"`` backend (the name Hydra's launcher asks for) starts
    its workers with :func:`ignore_ctrl_c_until_a_job_runs` (``register_parallel_backend``)."""
    from joblib import parallel, register_parallel_backend

    original = parallel.BACKENDS["loky"]  # the LokyBackend class
    register_parallel_backend("loky", functools.partial(original, initializer=ignore_ctrl_c_until_a_job_runs))
    try:
        yield
    finally:
        register_parallel_backend("loky", original)


class SweepStopHandler:
    """In a worker-process sweep's parent: the first SIGINT/SIGTERM writes the stop file; the second stops at once."""

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
