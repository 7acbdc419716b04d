"""One run per directory: two processes writing one run directory (the same ``hydra.run.dir`` typed
twice, a sweep started twice) would interleave their metrics, checkpoints and status.

:class:`RunDirectoryLock` holds an exclusive ``flock`` on ``<run dir>/.lock`` for the life of the
job; a second process is refused, naming the holder (pid, host, start time). The kernel releases
the lock when its process ends, however it ends, so a lock file left by a killed process is stale
by construction: the next run takes it over and says so.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ablate.errors import UserError

LOCK_FILE = ".lock"


class RunDirectoryBusy(UserError):
    """Another live process holds the run directory."""


class RunDirectoryLock:
    """``with RunDirectoryLock(run_dir): ...``: the job's exclusive hold on its directory."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.path = Path(run_dir) / LOCK_FILE
        self._file: IO[str] | None = None

    def __enter__(self) -> RunDirectoryLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(self.path)
            handle.close()
            raise RunDirectoryBusy(
                f"{self.path.parent} is in use by another process ({holder}): two processes would corrupt one run. "
                "Wait for it, stop it, or run in another directory"
            ) from None
        previous = _holder(self.path)
        if previous != "unknown":  # a lock file whose process ended without releasing it (killed)
            print(f"note: taking over the stale lock of {previous} on {self.path.parent} (that process has ended)")
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%F %T")}))
        handle.flush()
        self._file = handle
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()  # released cleanly: no holder to report
            fcntl.flock(self._file.fileno(), fcntl.LOCK_UN)
            self._file.close()
            self._file = None


def _holder(path: Path) -> str:
    try:
        info: dict[str, Any] = json.loads(path.read_text() or "{}")
    except (OSError, ValueError):
        return "unknown"
    if not info:
        return "unknown"
    return f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}"
