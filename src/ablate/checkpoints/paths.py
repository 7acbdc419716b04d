"""Whether ``ckpt_path=`` names a checkpoint at all: a file, or a sharded checkpoint's folder.

Apart from :mod:`ablate.checkpoints.files` (torch) so that a script refuses a mistyped path in half
a second, not ten.
"""

from __future__ import annotations

import os
from pathlib import Path

from ablate.checkpoints import sharded
from ablate.errors import UserError


class CheckpointFileMissing(UserError, FileNotFoundError):
    """``ckpt_path=`` names no file."""


def looks_sharded(path: Path) -> bool:
    """A folder with what Lightning's sharded FSDP save writes (``meta.pt``, DCP's ``.metadata``, a
    shard): a checkpoint, complete or not, as opposed to a run's or a checkpoints folder."""
    return path.is_dir() and (
        (path / sharded.META_FILE).exists() or (path / sharded.INDEX_FILE).exists() or any(path.glob("*.distcp"))
    )


def require_file(ckpt_path: str | os.PathLike[str], key: str = "ckpt_path") -> None:
    """``ckpt_path`` names a regular file or a sharded checkpoint's folder: a missing path, another
    directory or a device is refused as what it is."""
    path = Path(ckpt_path)
    if path.is_file() or looks_sharded(path):
        return
    if not path.exists():
        raise CheckpointFileMissing(f"{key}={ckpt_path}: no such checkpoint file")
    what = "a directory" if path.is_dir() else "not a regular file (a device, a pipe or a socket)"
    hint = f": give a checkpoint in it, e.g. {key}={path / 'last.ckpt'}" if path.is_dir() else ""
    raise CheckpointFileMissing(f"{key}={ckpt_path} is {what}, not a checkpoint file{hint}")
