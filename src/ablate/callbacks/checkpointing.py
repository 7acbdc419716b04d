"""Checkpoints a killed job can trust, and what an exact resume needs beyond Lightning's own state.

- :class:`ResumeState`: the RNG states and the W&B run id, so that a resumed run draws the same
  random numbers and logs into the same W&B run.
- :class:`LastCheckpoint`: ``last.ckpt`` every ``every_n_train_steps`` steps and at the end.
- :class:`AtomicCheckpointIO`: a temporary file in the checkpoint's own folder, fsync, rename
  (Lightning 2.6's temporary file in the system temp dir makes the rename a *copy* on another file
  system, which a kill truncates); the old ``last.ckpt`` kept as ``last.previous.ckpt``.
"""

from __future__ import annotations

import contextlib
import errno
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any, cast

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, Checkpoint, ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ablate.checkpoints.files import LAST_PATTERN, previous_checkpoint
from ablate.compat import is_local_path
from ablate.errors import ConfigError
from ablate.writes import named_disk_full


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to ``.<name>.tmp-<pid>`` beside the target, fsync, rename; remote paths: Lightning's."""

    def __init__(self) -> None:
        super().__init__()
        self._steps_written: dict[Path, Any] = {}  # path -> global_step of the file this writer put there

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None) -> None:
        if storage_options is not None or not is_local_path(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"  # ablate.checkpoints.files.abandoned_writes
        try:
            # a full disk: DiskFullError names the file and about how many bytes it needs (exit code 2)
            with named_disk_full(path, tensor_bytes(checkpoint), tmp), open(tmp, "wb") as f:
                _save(checkpoint, f, path)
                f.flush()
                os.fsync(f.fileno())
            step = checkpoint.get("global_step")
            # a re-save of the step this writer last wrote there (after that step's validation,
            # LastCheckpoint.on_validation_end) replaces it: the previous file stays the step before
            same_step = step is not None and self._steps_written.get(path) == step
            if LAST_PATTERN.match(path.name) and path.is_file() and not same_step:
                keep_previous(path)
            os.replace(tmp, path)
            self._steps_written[path] = step
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        _fsync_dir(path.parent)


def _save(checkpoint: dict[str, Any], f: Any, path: Path) -> None:
    """``torch.save``, whose zip writer reports a full disk as ``RuntimeError: [enforce fail at
    inline_container.cc] ... unexpected pos``: turned into the OSError it is (Errno 28), which the
    caller names with the path and the bytes (:func:`ablate.writes.named_disk_full`)."""
    try:
        torch.save(checkpoint, f)
    except RuntimeError as err:
        if "unexpected pos" in str(err) or "file write failed" in str(err):
            raise OSError(errno.ENOSPC, "No space left on device") from err
        raise


def tensor_bytes(value: Any) -> int:
    """The bytes of the tensors in a checkpoint (nested containers walked): about its size on disk."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    return 0


def keep_previous(path: Path) -> None:
    """Keep ``path`` as :func:`previous_checkpoint` before it is replaced: a hard link, renamed into place."""
    previous, tmp = previous_checkpoint(path), path.parent / f".{path.name}.previous-{os.getpid()}"
    tmp.unlink(missing_ok=True)
    try:
        os.link(path, tmp)
    except OSError:  # a file system without hard links
        shutil.copy2(path, tmp)
    os.replace(tmp, previous)


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (a crash right after it keeps the new name)."""
    with contextlib.suppress(OSError):  # some file systems do not support fsync on a directory
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class LastCheckpoint(Checkpoint):
    """``last.ckpt`` every ``every_n_train_steps`` steps, where a callback stops training and at the
    end (``None`` or 0: only the last two). A ``Checkpoint`` so that Lightning runs it after every
    other callback; ``ModelCheckpoint(save_last=True)`` writes only along with a top-k checkpoint."""

    FILENAME = "last.ckpt"
    KEEP_PREVIOUS = ("while_training", "always")

    def __init__(
        self,
        dirpath: str | os.PathLike[str],
        every_n_train_steps: int | None = 100,
        keep_previous: str = "while_training",
    ) -> None:
        """``keep_previous``: ``while_training`` (``last.previous.ckpt`` removed at ``max_steps``) or ``always``."""
        if keep_previous not in self.KEEP_PREVIOUS:
            raise ConfigError(
                f"callbacks.checkpoint_last.keep_previous={keep_previous!r}: one of {', '.join(self.KEEP_PREVIOUS)}"
            )
        self.dirpath = Path(dirpath)
        self.every_n_train_steps = every_n_train_steps or 0
        self.keep_previous = keep_previous
        self._saved_at: int | None = None

    def save(self, trainer: L.Trainer) -> None:
        """Save ``last.ckpt`` for the current step, once (every rank calls it: a collective)."""
        if self._saved_at == trainer.global_step or trainer.sanity_checking:
            return
        trainer.save_checkpoint(self.dirpath / self.FILENAME, weights_only=False)  # full: resumable
        self._saved_at = trainer.global_step

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # mid-accumulation: no optimiser step was taken
        periodic = self.every_n_train_steps and trainer.global_step % self.every_n_train_steps == 0
        # A callback stopped training at this step (Ctrl-C: GracefulInterrupt; divergence), or it is
        # the last step (trainer.max_steps): save it now, while the loops are mid-epoch. That
        # checkpoint resumes exactly, like the periodic ones, also with a larger trainer.max_steps
        # (training longer; a successive-halving rung continued, ablate.sweepers.halving); one written
        # in on_train_end is taken after Lightning has closed the epoch, and a resume from it would
        # start the next epoch's data order.
        last_step = 0 < trainer.max_steps <= trainer.global_step
        if periodic or trainer.should_stop or last_step:
            self.save(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A validation right after a save at the same step (the last step, a periodic one): save
        # again, still mid-epoch, so that last.ckpt also holds what the validation changed in the
        # other callbacks (best.ckpt's best score: a resumed run must not overwrite a better best.ckpt).
        if self._saved_at == trainer.global_step and trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._saved_at = None
            self.save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.save(trainer)  # the final state, unless the last save was at this very step
        finished = 0 < trainer.max_steps <= trainer.global_step
        if finished and self.keep_previous == "while_training" and trainer.is_global_zero:
            previous_checkpoint(self.dirpath / self.FILENAME).unlink(missing_ok=True)


class ResumeState(Callback):
    """The RNG states and the W&B run id in every checkpoint; on resume the states are restored when
    training starts (after the data loaders are built), so the first resumed step draws what the
    uninterrupted run drew. Rank 0's states: every rank is seeded and draws alike."""

    def __init__(self, wandb_run_id: str | None = None, run_identity: dict[str, Any] | None = None) -> None:
        self.wandb_run_id = wandb_run_id
        self.run_identity = run_identity  # ablate.config.identity.run_identity: checked before a resume
        self._rng_to_restore: dict[str, Any] | None = None
        self.earlier_s = 0.0  # the wall time of the run's earlier segments, up to the checkpoint resumed
        self._started = time.perf_counter()

    def elapsed_s(self) -> float:
        """The run's wall time so far, its earlier segments' included."""
        return self.earlier_s + (time.perf_counter() - self._started)

    def state_dict(self) -> dict[str, Any]:
        return {
            "rng": collect_rng_states(),
            "wandb_run_id": self.wandb_run_id,
            "run_identity": self.run_identity,
            "wall_time_s": self.elapsed_s(),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._rng_to_restore = state_dict.get("rng")
        self.earlier_s = float(state_dict.get("wall_time_s") or 0.0)  # checkpoints before it had none: 0

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        for callback in trainer.checkpoint_callbacks:  # before their states are loaded
            if isinstance(callback, ModelCheckpoint) and callback.dirpath:
                follow_copied_run(checkpoint.get("callbacks", {}).get(callback.state_key), callback.dirpath)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._rng_to_restore is not None:
            set_rng_states(self._rng_to_restore)
            self._rng_to_restore = None


def follow_copied_run(state: dict[str, Any] | None, dirpath: str | os.PathLike[str]) -> None:
    """A run copied (``cp -a run copy``) and resumed: its ``best.ckpt`` callback's state names the old
    folder, so Lightning restored only the best path and the copy wrote its next best to
    ``best-v1.ckpt``. When the copy holds that best file, the state is moved to the copy's folder."""
    if not state or not state.get("dirpath") or Path(state["dirpath"]) == Path(dirpath):
        return
    old, new = Path(state["dirpath"]), Path(dirpath)
    best = state.get("best_model_path")
    if not best or not Path(best).is_relative_to(old) or not (new / Path(best).relative_to(old)).is_file():
        return  # not a copy of that run (a new run started from its checkpoint): Lightning's own handling

    def moved(path: Any) -> Any:
        return str(new / Path(path).relative_to(old)) if path and Path(path).is_relative_to(old) else path

    for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
        state[key] = moved(state.get(key))
    state["best_k_models"] = {moved(k): v for k, v in (state.get("best_k_models") or {}).items()}
    state["dirpath"] = str(dirpath)


def collect_rng_states() -> dict[str, Any]:
    """The RNG states as tensors and plain Python values (loadable with ``weights_only=True``)."""
    kind, keys, pos, has_gauss, cached = cast(tuple[str, np.ndarray, int, int, float], np.random.get_state())
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "kind": kind,
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached),
        },
        "python": random.getstate(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states["cuda"] = torch.cuda.get_rng_state()  # this rank's device
    return states


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    numpy = states["numpy"]
    keys = numpy["keys"].numpy().astype(np.uint32)
    np.random.set_state((numpy["kind"], keys, numpy["pos"], numpy["has_gauss"], numpy["cached_gaussian"]))
    random.setstate(states["python"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])
