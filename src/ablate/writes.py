"""How the project writes into a run's (or a sweep's) folder: never through a link that leaves it,
and a full disk named with the path and the bytes.

* :func:`inside` -- no symbolic link under ``root`` leads a write or delete out of it
  (``<run>/checkpoints`` linked elsewhere would make ``overwrite=true`` delete that folder's
  checkpoints); :func:`check_run_folder` checks a job's folder before it trains.
* :class:`DiskFullError` / :func:`named_disk_full` -- ``ENOSPC``/``EDQUOT`` names the file, the
  bytes it needed and the space left (exit 2) and leaves no partial file; ``EFBIG`` is named as a
  size limit (:func:`size_limit`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

from ablate.errors import UserError

FULL = (errno.ENOSPC, errno.EDQUOT)
RUN_FOLDERS = ("checkpoints", "wandb", "csv", ".hydra")  # what a run writes into as folders


class LinkOutsideError(UserError):
    """A path the project would write or delete leads out of its run or sweep folder through a link."""


class DiskFullError(UserError, OSError):
    """The disk filled up while a file was written; the message names the file and the bytes."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.ENOSPC, message)  # printed as "[Errno 28] <message>"


class FileTooLargeError(UserError, OSError):
    """A write reached a file size limit (``ulimit -f``) with space left; the message names the limit."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EFBIG, message)


def inside(path: str | os.PathLike[str], root: str | os.PathLike[str]) -> Path:
    """``path``, after checking that no symbolic link at or above it, below ``root``, leads out of
    ``root`` (:class:`LinkOutsideError`); a ``path`` not under ``root`` is returned unchecked."""
    path, root = Path(path).absolute(), Path(root).absolute()
    try:
        parts = path.relative_to(root).parts
    except ValueError:
        return path
    real_root, here = root.resolve(), root
    for part in parts:
        here = here / part
        if here.is_symlink():
            target = here.resolve()
            if target != real_root and real_root not in target.parents:
                raise LinkOutsideError(
                    f"{here} is a symbolic link to {target}, outside {root}: refused, so that nothing of another "
                    f"folder is written or deleted through it. Remove the link (or copy what it points to into {root})"
                )
    return path


def check_run_folder(folder: str | os.PathLike[str], checkpoint_dirs: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Before a job writes into ``folder``: no entry of it or of its checkpoint folders is a link out
    of it, and the folders a run writes into are folders. Reads only."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    for entry in [*folder.iterdir(), *(p for d in checkpoint_dirs if Path(d).is_dir() for p in Path(d).iterdir())]:
        inside(entry, folder)
    for name in RUN_FOLDERS:
        path = folder / name
        if path.exists() and not path.is_dir():
            raise UserError(
                f"{path} is a file, not a folder: the run writes its {name} files there. Move it away, or run in "
                "another directory"
            )


def human_bytes(n: float) -> str:
    """``412 B``, ``3.1 kB``, ``12.0 MB``, ``2.10 GB``: a size a person reads at a glance (never "0.00 GB")."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.2f} {unit}" if unit == "GB" else f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def disk_full_message(path: str | os.PathLike[str], needed: int | None, err: OSError | None = None) -> str:
    """``No space left on device writing <path> (about N bytes needed, M free); ...``."""
    try:
        free: int | None = shutil.disk_usage(Path(path).parent).free
    except OSError:
        free = None
    sizes = ", ".join(
        part
        for part in (
            f"about {human_bytes(needed)} needed" if needed else "",
            f"{human_bytes(free)} free" if free is not None else "",
        )
        if part
    )
    why = err.strerror if err is not None and err.errno in FULL and err.strerror else "No space left on device"
    return f"{why} writing {path}{f' ({sizes})' if sizes else ''}; the partial file was removed"


def _short_write(err: OSError) -> bool:
    """numpy's ``tofile`` reports any failed write as an ``OSError`` without an errno."""
    return err.errno is None and "requested and" in str(err) and "written" in str(err)


def size_limit(err: BaseException) -> tuple[str, str] | None:
    """What refused a write for the file's size and the remedy, or None: ``EFBIG`` or (numpy's
    errno-less short write) a file size limit in force, not to be called a full disk."""
    if not isinstance(err, OSError):
        return None
    limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    limited = limit != resource.RLIM_INFINITY
    if err.errno != errno.EFBIG and not (limited and _short_write(err)):
        return None
    if limited:  # bash's ulimit -f counts 1024-byte blocks
        return (
            f"the file size limit (ulimit -f {limit // 1024}, {human_bytes(limit)})",
            "Raise it (ulimit -f unlimited)",
        )
    return "the largest file this filesystem holds", "Write to another filesystem"


def is_disk_full(err: BaseException) -> bool:
    """A full disk or quota; also numpy's ``tofile``, whose short write is an ``OSError`` without an
    errno (unless a file size limit refused it: :func:`size_limit`)."""
    return isinstance(err, OSError) and (err.errno in FULL or _short_write(err)) and size_limit(err) is None


@contextlib.contextmanager
def named_disk_full(
    path: str | os.PathLike[str], needed: int | None = None, partial: Path | None = None
) -> Iterator[None]:
    """Inside the block, a full disk raises :class:`DiskFullError` naming ``path`` and ``needed``
    bytes, after removing ``partial`` (the temporary file being written, when there is one)."""
    try:
        yield
    except OSError as err:
        limit = size_limit(err)
        if not (is_disk_full(err) or limit) or isinstance(err, UserError):
            raise
        if partial is not None:
            partial.unlink(missing_ok=True)
        if limit:
            message = f"File too large writing {path}: it reached {limit[0]}; the partial file was removed. {limit[1]}"
            raise FileTooLargeError(message) from None
        raise DiskFullError(f"{disk_full_message(path, needed, err)}. Free some space and run again") from None


def write_text_atomically(path: str | os.PathLike[str], text: str) -> Path:
    """``text`` into ``path`` through a temporary file beside it, renamed into place: a reader sees
    the old file or the new one, and a full disk (:class:`DiskFullError`) leaves the old one."""
    path = Path(path)
    data = text.encode("utf-8")
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with named_disk_full(path, len(data), tmp):
            tmp.write_bytes(data)
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path
