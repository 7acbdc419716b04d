"""A run's checkpoint files: where they are, which one ``ckpt_path=last`` means, and what a file holds.

Reads only (the writers: :mod:`ablate.callbacks.checkpointing`). A checkpoint is opened once,
memory-mapped, with the restricted unpickler (:mod:`ablate.checkpoints.safe_load`); a truncated,
empty or foreign file is a :class:`CheckpointError` naming the file and the intact one before it. A
sharded FSDP checkpoint is a folder in the file's place (``last.ckpt/``), read the same way
(:mod:`ablate.checkpoints.sharded`). Every layer above reads checkpoints through this module.
"""

from __future__ import annotations

import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ablate.checkpoints import safe_load, sharded
from ablate.checkpoints.paths import require_file
from ablate.checkpoints.stored_config import check_stored_config
from ablate.errors import UserError

LAST_PATTERN = re.compile(r"^last(-\d+)?\.ckpt$")  # what Lightning's ckpt_path="last" looks for
# the temporary names of ablate.callbacks.checkpointing's atomic writes: .<name>.tmp-<pid>, .<name>.previous-<pid>
TEMPORARY = re.compile(r"^\..+\.(?:tmp|previous)-(\d+)$")


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be resumed; the message names the file and what to do."""


def previous_checkpoint(path: str | os.PathLike[str]) -> Path:
    """Where the checkpoint before ``path`` is kept: ``last.ckpt`` -> ``last.previous.ckpt``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.previous{path.suffix}")


def find_last_checkpoint(dirs: Sequence[str | os.PathLike[str]]) -> Path | None:
    """The newest ``last.ckpt`` (or ``last-N.ckpt``, file or sharded folder) in ``dirs``, as Lightning's
    ``ckpt_path="last"`` picks it, before the Trainer exists (W&B needs the run id first). A folder
    counts even if its save was cut short: reading it refuses it by name."""
    found = [
        p
        for d in dirs
        if Path(d).is_dir()
        for p in Path(d).iterdir()
        if LAST_PATTERN.match(p.name) and (p.is_file() or p.is_dir())
    ]
    return max(found, key=written_ns) if found else None


def written_ns(path: Path) -> int:
    """When a checkpoint was written: a file's modification time; a sharded folder's, that of its
    ``meta.pt`` (written last) where there is one (a folder's own time changes only with its entries)."""
    meta = path / sharded.META_FILE
    return meta.stat().st_mtime_ns if path.is_dir() and meta.is_file() else path.stat().st_mtime_ns


def resolve_ckpt_path(ckpt_path: str | None, checkpoint_dirs: Sequence[str | os.PathLike[str]]) -> str | None:
    """``"last"`` -> the job's last checkpoint, or ``None`` on its first run; a path -> itself, which must
    exist; ``None`` and Lightning's other special values (``"best"``, ``"hpc"``, a URL) as they are."""
    if ckpt_path is None:
        return None
    ckpt_path = str(ckpt_path)
    if ckpt_path == "last":
        last = find_last_checkpoint(checkpoint_dirs)
        return None if last is None else str(last)
    if ckpt_path in ("best", "hpc") or "://" in ckpt_path:
        return ckpt_path
    require_file(ckpt_path)
    return ckpt_path


def checkpoint_files(dirs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """Every ``*.ckpt`` in ``dirs`` (a run's record, with ``status.json``; a sharded checkpoint's
    folder included), sorted."""
    return sorted({p for d in dirs if Path(d).is_dir() for p in Path(d).iterdir() if p.suffix == ".ckpt"})


def abandoned_writes(dirs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The temporary files (``.<name>.tmp-<pid>``, ``.<name>.previous-<pid>``) in ``dirs`` of writers
    that no longer run (killed while writing); never ``.ckpt``, so nothing resumes from them."""
    found = []
    for folder in map(Path, dirs):
        for path in folder.glob(".*") if folder.is_dir() else ():
            match = TEMPORARY.match(path.name)
            if match and not _alive(int(match.group(1))):
                found.append(path)
    return sorted(found)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # no signal is sent: only whether the process exists
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def inspect_checkpoint(path: str | os.PathLike[str], weights: bool = True) -> dict[str, Any]:
    """The checkpoint's contents, memory-mapped; :class:`CheckpointError` when the file is empty,
    truncated or not a checkpoint, or its stored configuration names something to import or call
    (:mod:`ablate.checkpoints.stored_config`). A sharded folder: :func:`ablate.checkpoints.sharded.load`
    (``weights=False``: its weights not read)."""
    path = Path(path)
    if path.is_dir():
        try:
            checkpoint = sharded.load(path, weights=weights)
            check_stored_config(checkpoint, path)
        except safe_load.UnsafeCheckpointError:
            raise
        except UserError as err:
            raise CheckpointError(str(err)) from None
        return checkpoint
    try:
        checkpoint = safe_load.load(path)  # never runs code from the file (ablate.checkpoints.safe_load)
    except (safe_load.UnsafeCheckpointError, safe_load.NotACheckpointError):
        raise
    except Exception as err:
        size = path.stat().st_size if path.exists() else 0
        previous = previous_checkpoint(path)
        offer = (
            f" The checkpoint before it is intact: resume with ckpt_path={previous}"
            if previous.is_file() and _readable(previous)
            else " No earlier checkpoint of this run is kept."
        )
        layout = "a zip archive, torch's format" if zipfile.is_zipfile(path) else "not a zip archive"
        raise CheckpointError(
            f"{path} is corrupt or truncated ({size:,} bytes, {layout}; {type(err).__name__}: {str(err)[:200]}).{offer}"
        ) from None
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{path} is not a checkpoint: it holds a {type(checkpoint).__name__}, not a dict")
    try:
        check_stored_config(checkpoint, path)
    except UserError as err:
        raise CheckpointError(str(err)) from None
    return checkpoint


def require_resumable(checkpoint: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """A checkpoint with the weights only (``best.ckpt``: ``callbacks.checkpoint.save_weights_only``)
    cannot continue training: refused before any data is read, pointing at ``last.ckpt``."""
    if "optimizer_states" not in checkpoint:
        raise CheckpointError(
            f"{path} holds the weights only (no optimiser state: best.ckpt is saved that way, "
            "callbacks.checkpoint.save_weights_only=true), so training cannot continue from it: resume from the "
            "run's last.ckpt (ckpt_path=last with hydra.run.dir=<its run dir>). eval.py, generate.py, translate.py "
            "and the exports take it as it is"
        )
    from ablate.checkpoints.parts import PartError, check_training_state  # torch: only once a checkpoint is read

    try:  # the training state Lightning and the callbacks restore is what train.py writes
        check_training_state(checkpoint, path)
    except PartError as err:
        raise CheckpointError(str(err)) from None


def _readable(path: Path) -> bool:
    try:
        safe_load.load(path)
        return True
    except Exception:
        return False


def resume_state(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """What :class:`~ablate.callbacks.checkpointing.ResumeState` stored in a loaded checkpoint (W&B
    run id, run identity)."""
    from ablate.checkpoints.parts import RESUME_STATE_KEY

    return checkpoint.get("callbacks", {}).get(RESUME_STATE_KEY) or {}
