"""One run per directory: two processes writing one run directory would interleave their metrics,
checkpoints and status.

:class:`RunDirectoryLock` holds an exclusive ``flock`` on ``<run dir>/.lock`` for the life of the
job; a second process is refused, naming the holder. The kernel releases the lock however its
process ends, so a killed process's lock is taken over. The lock file must be the run's own
regular file (``O_NOFOLLOW``, one link): a link elsewhere would have its target truncated.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import stat
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from ablate.errors import UserError
from ablate.writes import LinkOutsideError

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
        handle = _open_own(self.path)
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(handle)
            handle.close()
            raise RunDirectoryBusy(
                f"{self.path.parent} is in use by another process ({holder}): two processes would corrupt one run. "
                "Wait for it, stop it, or run in another directory"
            ) from None
        previous = _holder(handle)
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


def _open_own(path: Path) -> IO[str]:
    """``path`` opened for reading and writing, refused when it is a link or not a regular file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as err:
        if not path.is_symlink():
            raise
        raise LinkOutsideError(
            f"{path} is a symbolic link (to {os.readlink(path)}): refused, so that no file outside the run is "
            "written through it. Remove the link; the run makes its own lock file"
        ) from err
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(fd)
        what = "a hard link to another file" if stat.S_ISREG(info.st_mode) else "not a regular file"
        raise LinkOutsideError(
            f"{path} is {what}: refused, so that no other file is truncated through it. Remove it; the run "
            "makes its own lock file"
        )
    os.set_blocking(fd, True)
    return open(fd, "r+")


def _holder(handle: IO[str]) -> str:
    try:
        handle.seek(0)
        info: dict[str, Any] = json.loads(handle.read() or "{}")
    except (OSError, ValueError):
        return "unknown"
    if not info:
        return "unknown"
    return f"pid {info.get('pid')} on {info.get('host')}, started {info.get('started')}"
