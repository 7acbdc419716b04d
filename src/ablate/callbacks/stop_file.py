"""A sweep's stop request: a file, ``<sweep dir>/.stop``, that every process of a sweep run by worker
processes polls (:class:`ablate.callbacks.interrupt.GracefulInterrupt` after each step, the sweepers
before each job). The first signal any of them receives writes it; its text says why. Plain file
operations, no Lightning: the sweepers read it at Hydra's plugin scan, before a command is checked."""

from __future__ import annotations

import os
from pathlib import Path

STOP_FILE = ".stop"  # in the sweep directory: the sweep was asked to stop (its text says why)


def request_stop(path: Path, why: str) -> None:
    """Ask every process of the sweep to stop after its step (idempotent). Created, never opened
    if something is there: a link named ``.stop`` is not written through (O_EXCL), wherever it leads."""
    if path.exists() or path.is_symlink():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:  # another process asked first
        return
    with os.fdopen(fd, "w") as f:
        f.write(f"{why}\n")


def stop_requested(path: Path | None) -> bool:
    return path is not None and path.exists()
