"""What a command found at its run folder before Hydra made or wrote anything there, so that a
command that records nothing (a refusal) takes back exactly what it added and nothing else.

Hydra makes the run folder (and ``logs/runs/`` above it) and opens its job log (``train.log``)
before the job runs, so the job alone cannot tell a folder Hydra made from an empty folder the user
made, nor its log lines from the user's. :func:`note` looks first, while the command line is checked
(:func:`ablate.cli.entry_point`); :func:`take_back` then removes what was not there (the folder and
its parents when Hydra made them, ``.lock`` and ``.hydra/`` in a folder that held other things) and
cuts the job log back to its old length. Without a note (``HYDRA_FULL_ERROR=1`` skips the check)
the caller falls back on its own guess.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Found:
    folder: Path  # the run folder, absolute
    existing: Path  # the folder itself, or its nearest ancestor that existed
    entries: dict[str, int] | None  # name -> size of each entry the folder held (None: there was no folder)


_found: Found | None = None


def note(run_dir: str | os.PathLike[str] | None) -> None:
    """Look at ``run_dir`` (a single run's ``hydra.run.dir``; None: a sweep) before Hydra does."""
    global _found
    if run_dir is None:
        _found = None
        return
    folder = Path(run_dir).absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    entries = {p.name: p.lstat().st_size for p in folder.iterdir()} if folder.is_dir() else None
    _found = Found(folder, existing, entries)


def found(folder: str | os.PathLike[str], made: bool) -> Found | None:
    """What :func:`note` saw, if the job's folder is the one it looked at; for a sibling of it (the
    default ``logs/runs/<time>`` may be named a second later than when it was checked), that the
    folder is new when ``made`` (the caller's guess) says so, and which parents were there."""
    folder = Path(folder).absolute()
    if _found is None or _found.folder.parent != folder.parent:
        return None
    if _found.folder == folder:
        return _found
    return Found(folder, _found.existing, None) if made else None


def take_back(found: Found, job_log: str | None) -> None:
    """Remove what the command added to ``found.folder``: the folder and the parents made for it, or,
    in a folder that was there, the entries that were not, and the job log's new lines."""
    folder = found.folder
    if found.entries is None:
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
        for parent in folder.parents:  # logs/runs/ made for this command, up to the folder that existed
            if parent == found.existing or found.existing not in parent.parents:
                break
            try:
                parent.rmdir()  # only if empty
            except OSError:
                break
        return
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.name not in found.entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        elif entry.name == job_log and entry.is_file() and not entry.is_symlink():
            os.truncate(entry, min(entry.stat().st_size, found.entries[entry.name]))  # its lines as they were
