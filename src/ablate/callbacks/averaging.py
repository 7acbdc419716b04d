"""Weight averaging: the last N checkpoints averaged after training, or an EMA kept during it.

- :class:`StepCheckpoints` (``callbacks.checkpoint_keep``): the newest ``checkpoints/step-*.ckpt``.
- :func:`average_checkpoints`: fairseq's ``scripts/average_checkpoints.py`` recipe, the mean of the
  floating-point weights of one run's checkpoints, without optimiser state (not for resuming).
- :class:`EMA` (``callbacks.ema``): Lightning's ``EMAWeightAveraging``, inert with ``decay: null``,
  and a checkpoint written after training keeps the trained weights as ``current_model_state``
  (Lightning has copied the EMA over them by then: such a ``last.ckpt`` would resume from the EMA).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Checkpoint, EMAWeightAveraging
from lightning.pytorch.utilities import rank_zero_info

from ablate.callbacks.checkpointing import AtomicCheckpointIO
from ablate.checkpoints.files import LAST_PATTERN, CheckpointError, inspect_checkpoint, resume_state
from ablate.checkpoints.parts import PartError
from ablate.config.identity import change_allowed, identity_differences
from ablate.data.stored_tokenizer import check_tokenizer, load_tokenizer
from ablate.data.tokenizers import TOKENIZERS
from ablate.errors import UserError

STEP_PATTERN = re.compile(r"^step-(\d+)\.ckpt$")
# what an averaged checkpoint leaves out: training state that belongs to the newest file's weights only
TRAINING_STATE = ("optimizer_states", "lr_schedulers", "current_model_state", "averaging_state")


class AveragingError(UserError, ValueError):
    """Checkpoints that cannot be averaged; the message names the files and the differences."""


# ------------------------------------------------------------------------------ keep the last N


def step_checkpoint_name(step: int) -> str:
    return f"step-{step:07d}.ckpt"


def step_checkpoints(folder: str | os.PathLike[str]) -> list[tuple[int, Path]]:
    """``(step, path)`` of the ``step-XXXXXXX.ckpt`` files in ``folder``, oldest first."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in folder.iterdir() if (m := STEP_PATTERN.match(p.name)) and p.is_file()]
    return sorted(found)


class StepCheckpoints(Checkpoint):
    """``step-XXXXXXX.ckpt`` every ``every_n_train_steps`` steps and at the end, the newest
    ``keep_last_n`` kept (0: none). A ``Checkpoint`` so that it runs after the other callbacks (the
    EMA updated first); step files beyond the starting step, of another trajectory, are deleted."""

    def __init__(self, dirpath: str | os.PathLike[str], every_n_train_steps: int = 100, keep_last_n: int = 0) -> None:
        if keep_last_n < 0 or (keep_last_n and not (every_n_train_steps or 0) > 0):
            raise ValueError(
                f"callbacks.checkpoint_keep: keep_last_n={keep_last_n} (>= 0) and every_n_train_steps="
                f"{every_n_train_steps} (> 0) expected"
            )
        self.dirpath = Path(dirpath)
        self.every_n_train_steps = every_n_train_steps
        self.keep_last_n = keep_last_n
        self._saved_at: int | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.keep_last_n or not trainer.is_global_zero:
            return
        stale = [p for step, p in step_checkpoints(self.dirpath) if step > trainer.global_step]
        if stale:
            rank_zero_info(
                f"removing {len(stale)} step checkpoint(s) beyond step {trainer.global_step} in {self.dirpath} "
                "(another trajectory)"
            )
        for path in stale:
            path.unlink(missing_ok=True)

    def save(self, trainer: L.Trainer) -> None:
        if not self.keep_last_n or trainer.sanity_checking or trainer.global_step in (0, self._saved_at):
            return
        # full (weights_only=False, said explicitly: Lightning logs a line per save otherwise); a collective
        trainer.save_checkpoint(self.dirpath / step_checkpoint_name(trainer.global_step), weights_only=False)
        self._saved_at = trainer.global_step
        if trainer.is_global_zero:
            for _, path in step_checkpoints(self.dirpath)[: -self.keep_last_n]:
                path.unlink(missing_ok=True)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self.keep_last_n or (batch_idx + 1) % trainer.accumulate_grad_batches:
            return  # off, or mid-accumulation (no optimiser step was taken)
        if trainer.global_step % self.every_n_train_steps == 0:
            self.save(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.save(trainer)  # the final weights, unless saved at this very step


# ------------------------------------------------------------------------------ average


def _load(path: Path) -> dict[str, Any]:
    try:
        checkpoint = inspect_checkpoint(path)  # memory-mapped: optimiser states are never read
    except CheckpointError as err:
        raise AveragingError(str(err)) from None
    state = checkpoint.get("state_dict") if isinstance(checkpoint, dict) else None
    if not isinstance(state, dict) or not any(
        isinstance(v, torch.Tensor) and v.is_floating_point() for v in state.values()
    ):
        raise AveragingError(
            f"{path} holds no model weights (no floating-point tensors in its state_dict): not averaged"
        )
    spec = (checkpoint.get("hyper_parameters") or {}).get("spec") if isinstance(checkpoint, dict) else None
    if not isinstance(spec, dict):  # a bare state_dict: the output would load nowhere (and claim to be ours)
        raise AveragingError(
            f"{path} is not an ablate checkpoint (no hyper_parameters.spec, the model's architecture): not averaged"
        )
    _check_tokenizer(checkpoint, spec, path)
    return checkpoint


def _check_tokenizer(checkpoint: dict[str, Any], spec: dict[str, Any], path: Path) -> None:
    """The tokenizer the output will carry is a known kind and (when stored) valid for the model's
    vocabulary (:mod:`ablate.checkpoints.parts`): an altered one is not copied into the average."""
    state = checkpoint.get("tokenizer")
    if state is None:
        return
    kind = state.get("kind") if isinstance(state, dict) else None
    try:
        if "content" in (state if isinstance(state, dict) else {}):
            check_tokenizer(checkpoint, spec.get("vocab_size"), path)
        elif kind not in TOKENIZERS:
            load_tokenizer(state, path)  # refuses it, naming what is wrong
    except PartError as err:
        raise AveragingError(f"{err}: not averaged") from None


def _check_finite(paths: Sequence[Path], checkpoints: Sequence[dict[str, Any]], weights: str) -> None:
    """Every floating-point weight to average is finite: one NaN makes the mean NaN."""
    for path, ckpt in zip(paths, checkpoints):
        for key, value in model_weights(ckpt, weights).items():
            if isinstance(value, torch.Tensor) and value.is_floating_point():
                bad = int((~torch.isfinite(value)).sum())
                if bad:
                    raise AveragingError(
                        f"{path}: {key} holds {bad} NaN/inf value(s) of {value.numel()}: the weights are damaged or "
                        "the run diverged; not averaged (leave this checkpoint out)"
                    )


def model_weights(checkpoint: dict[str, Any], weights: str = "state_dict") -> dict[str, torch.Tensor]:
    """The weights to average: ``state_dict`` (evaluation's: the EMA if kept) or ``raw`` (the trained ones)."""
    if weights == "state_dict":
        return checkpoint["state_dict"]
    if weights == "raw":
        return checkpoint.get("current_model_state") or checkpoint["state_dict"]
    raise AveragingError(f"weights={weights!r}; valid options: state_dict, raw")


def check_compatible(
    paths: Sequence[Path], checkpoints: Sequence[dict[str, Any]], weights: str, allow_changes: Iterable[str] = ()
) -> None:
    """Refuse checkpoints of different runs or architectures, naming the files and the keys."""
    allow = list(allow_changes)
    ref_path, ref = paths[-1], checkpoints[-1]
    identities = [resume_state(c).get("run_identity") for c in checkpoints]
    if any(i is None for i in identities) and not all(i is None for i in identities):
        missing = [str(p) for p, i in zip(paths, identities) if i is None]
        raise AveragingError(
            f"cannot tell whether these are one run's checkpoints: {', '.join(missing)} carry no run "
            f"identity (ResumeState) and the others do"
        )
    for path, ckpt, identity in zip(paths, checkpoints, identities):
        if path is ref_path:
            continue
        if identity is not None:
            reference = identities[-1]
            assert reference is not None  # all carry an identity, or none does (checked above)
            diffs = {k: v for k, v in identity_differences(identity, reference).items() if not change_allowed(k, allow)}
            if diffs:
                lines = "\n".join(
                    f"  {k}: {old!r} in {path.name}, {new!r} in {ref_path.name}" for k, (old, new) in diffs.items()
                )
                raise AveragingError(
                    f"refusing to average checkpoints of different runs: {path} and {ref_path} differ in "
                    f"{', '.join(diffs)}:\n{lines}\nAverage one run's checkpoints; if the difference is harmless "
                    f"(e.g. a resume that trained longer) allow it: 'allow_changes=[{','.join(diffs)}]'"
                )
        if ckpt.get("task") != ref.get("task"):
            raise AveragingError(f"{path} is a task={ckpt.get('task')} checkpoint, {ref_path} task={ref.get('task')}")
        spec, ref_spec = ((c.get("hyper_parameters") or {}).get("spec") for c in (ckpt, ref))
        if identity is None and spec != ref_spec:
            diffs = identity_differences(dict(spec or {}), dict(ref_spec or {}))
            raise AveragingError(
                f"refusing to average models of different architectures: {path} and {ref_path} "
                f"differ in spec.{', spec.'.join(diffs)}"
            )
        sd, ref_sd = model_weights(ckpt, weights), model_weights(ref, weights)
        if set(sd) != set(ref_sd):
            only = sorted(set(sd) ^ set(ref_sd))
            raise AveragingError(
                f"{path} and {ref_path} hold different weights: {', '.join(only[:10])}"
                f"{' ...' if len(only) > 10 else ''} in one only"
            )
        bad = [k for k in ref_sd if sd[k].shape != ref_sd[k].shape or sd[k].dtype != ref_sd[k].dtype]
        if bad:
            raise AveragingError(f"{path} and {ref_path} differ in the shape or dtype of {', '.join(bad[:10])}")
        if ckpt.get("tokenizer") != ref.get("tokenizer"):
            raise AveragingError(
                f"{path} and {ref_path} carry different tokenizers: their token ids do not mean the same; not averaged"
            )
    _check_finite(paths, checkpoints, weights)


def average_checkpoints(
    paths: Sequence[str | os.PathLike[str]], weights: str = "state_dict", allow_changes: Iterable[str] = ()
) -> dict[str, Any]:
    """The newest (last) of ``paths`` with its floating weights replaced by their mean, no training state."""
    files = [Path(p) for p in paths]
    if not files:
        raise AveragingError("no checkpoints to average")
    checkpoints = [_load(p) for p in files]
    check_compatible(files, checkpoints, weights, allow_changes)
    newest = model_weights(checkpoints[-1], weights)
    # a state_dict names one tensor under several keys (tied embeddings, the task's ``forward_fn``
    # alias of ``model``): average each tensor once and keep the keys sharing it, as torch.save did
    owner: dict[tuple, str] = {}
    first = {key: owner.setdefault(_tensor_id(value), key) for key, value in newest.items()}  # key -> first alias
    sums = {
        k: torch.zeros(v.shape, dtype=torch.float64)
        for k, v in newest.items()
        if v.is_floating_point() and first[k] == k
    }
    for ckpt in checkpoints:
        sd = model_weights(ckpt, weights)
        for k, total in sums.items():
            total += sd[k].to(torch.float64)
    unique = {
        k: (sums[k] / len(paths)).to(v.dtype) if k in sums else v.clone() for k, v in newest.items() if first[k] == k
    }
    averaged = {k: unique[first[k]] for k in newest}
    out = {k: v for k, v in checkpoints[-1].items() if k not in TRAINING_STATE}
    out["state_dict"] = averaged
    out["averaged_checkpoints"] = {
        "files": [p.name for p in files],
        "global_steps": [c.get("global_step") for c in checkpoints],
        "weights": weights,
    }
    return out


def _tensor_id(t: torch.Tensor) -> tuple:
    return ("tensor", t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(), t.dtype)


def last_step_checkpoints(ckpt_dir: str | os.PathLike[str], last_n: int) -> list[Path]:
    """The newest ``last_n`` ``step-*.ckpt`` files of ``ckpt_dir``, oldest first."""
    if last_n < 1:
        raise AveragingError(f"last_n={last_n}: give at least 1")
    found = step_checkpoints(ckpt_dir)
    if len(found) < last_n:
        hint = "" if found else " (train with callbacks.checkpoint_keep.keep_last_n=N to keep them)"
        raise AveragingError(f"last_n={last_n}, but {ckpt_dir} holds {len(found)} step-*.ckpt file(s){hint}")
    return [p for _, p in found[-last_n:]]


def write_averaged(checkpoint: dict[str, Any], out: str | os.PathLike[str]) -> Path:
    """Write atomically; names that ``ckpt_path=last`` or the step rotation would pick up are refused."""
    out = Path(out)
    if LAST_PATTERN.match(out.name) or STEP_PATTERN.match(out.name):
        raise AveragingError(
            f"out={out}: {out.name} is a name resuming or the step-checkpoint rotation uses; "
            "choose another one (e.g. averaged.ckpt)"
        )
    AtomicCheckpointIO().save_checkpoint(checkpoint, out)
    return out


# ------------------------------------------------------------------------------ EMA


class EMA(EMAWeightAveraging):
    """Lightning's EMA of the weights (``decay``; ``null``: off). See the module docstring."""

    def __init__(
        self,
        decay: float | None = None,
        update_every_n_steps: int = 1,
        update_starting_at_step: int | None = None,
        device: str | None = None,
        use_buffers: bool = True,
    ) -> None:
        if decay is not None and not 0.0 < decay < 1.0:
            raise ValueError(f"callbacks.ema.decay={decay}: give a value in (0, 1), e.g. 0.999, or null (off)")
        self.enabled = decay is not None
        self.decay = decay
        super().__init__(
            device=device,
            use_buffers=use_buffers,
            decay=decay if decay is not None else 0.999,
            update_every_n_steps=update_every_n_steps,
            update_starting_at_step=update_starting_at_step,
        )
        self._trained_state: dict[str, torch.Tensor] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "fit":
            self._trained_state = None
        if self.enabled:
            super().setup(trainer, pl_module, stage)

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        return self.enabled and super().should_update(step_idx, epoch_idx)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._average_model is None:
            return
        # the trained weights, for checkpoints written after this (LastCheckpoint's final save)
        self._trained_state = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}
        super().on_train_end(trainer, pl_module)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if self._average_model is None:
            return
        super().on_save_checkpoint(trainer, pl_module, checkpoint)
        if self._trained_state is not None:
            checkpoint["current_model_state"] = self._trained_state

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if self.enabled:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)

    def state_dict(self) -> dict[str, Any]:
        return super().state_dict() if self.enabled else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if self.enabled and "latest_update_step" in state_dict:
            super().load_state_dict(state_dict)
