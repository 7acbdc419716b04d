"""A finished run trained longer is an attempt on a run that already has its record: if the attempt
fails (a full disk, a crash, a user error once it took the folder), the run's files go back to what
its ``status.json`` describes, and the attempt is recorded as one (``status.failed.json``,
:func:`ablate.run.status.record_status`). Without this a failed attempt left ``best.ckpt`` of its
own last validation, ``.hydra/`` saying its ``trainer.max_steps`` and its steps in ``metrics.csv``
beside a record of the finished run.

:func:`keep` runs before the attempt writes: a hard link to each checkpoint (checkpoints are
replaced by a rename, so the link keeps the old file, at no cost in space) and a copy of the files
written in place (``.hydra/*.yaml``, ``csv/``), in ``<run>/.before-attempt/``.
:func:`settle` ends it: after a failure the kept files replace the attempt's and the checkpoints
the attempt added go; otherwise the kept copies go. An interrupted attempt keeps its files: its
``last.ckpt`` is where the next attempt resumes.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from ablate.checkpoints.files import checkpoint_files
from ablate.run.record import METRICS_FILE

KEPT = ".before-attempt"
_MANIFEST = "kept.json"
_CONFIG_DIR = ".hydra"  # ablate.run.job.CONFIG_DIR


def _restorable(run_dir: Path, checkpoint_dirs: Sequence[Path]) -> list[Path]:
    """What an attempt may change: the checkpoints, the run's config, its metrics log and the
    logger's copy of its config (``csv/hparams.yaml``)."""
    logged = (run_dir / METRICS_FILE).parent
    return [
        *checkpoint_files(checkpoint_dirs),
        *sorted((run_dir / _CONFIG_DIR).glob("*.yaml")),
        *sorted(logged.glob("*")),
    ]


def keep(run_dir: Path, checkpoint_dirs: Sequence[Path]) -> Path:
    """Keep the run's files as they are before an attempt changes them; returns the folder."""
    folder = run_dir / KEPT
    if folder.exists():  # a killed attempt's: what it left is the run now
        shutil.rmtree(folder)
    folder.mkdir()
    found = _restorable(run_dir, checkpoint_dirs)
    kept: dict[str, str | None] = {str(p): None for p in found}  # None: there, not kept (a sharded checkpoint)
    for i, path in enumerate(p for p in found if p.is_file()):
        copy = folder / str(i)
        if path.suffix == ".ckpt":
            try:
                os.link(path, copy)
            except OSError:  # a file system without hard links
                shutil.copy2(path, copy)
        else:
            shutil.copy2(path, copy)
        kept[str(path)] = copy.name
    (folder / _MANIFEST).write_text(json.dumps(kept))
    return folder


def settle(run_dir: Path, checkpoint_dirs: Sequence[Path], failed: bool) -> None:
    """End the attempt: ``failed``, the run's files as :func:`keep` found them; either way the
    kept copies go."""
    folder = run_dir / KEPT
    if failed:
        kept: dict[str, str | None] = json.loads((folder / _MANIFEST).read_text())
        for path in {*_restorable(run_dir, checkpoint_dirs), *map(Path, kept)}:
            copy = kept.get(str(path))
            if copy is not None:
                os.replace(folder / copy, path)
            elif str(path) in kept:  # there before, as a folder: left as it is
                continue
            elif path.is_dir() and not path.is_symlink():  # a sharded checkpoint's folder the attempt wrote
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)
