"""Divergence detection: a run whose loss is non-finite, or above ``max_ratio`` times its first
finite loss, is marked diverged and stopped cleanly, so a sweep moves on to its next job.

Without a host synchronisation per step: reading the loss on the host (``float(loss)``) every
step would make the CPU wait for the GPU to finish the step before it may queue the next one
(on an H100 at GPT-2 small's shape that wait was 10% of the step: issue 31). The test runs on
the device instead: a two-number record (the first step whose loss failed the test, and that
loss) is updated by a few scalar kernels per step and read on the host only every
``check_every_n_steps`` steps (by default the Trainer's ``log_every_n_steps``, where Lightning
reads its logged values anyway), before each validation and when training ends (a checkpoint
keeps the record, so a resumed run still names the first diverged step). The reference of the
ratio test, the first loss, is read on the host once, at the first step.
``diverged_at`` is still the first step whose loss failed, not the step at which it was read;
training stops at the read, up to ``check_every_n_steps - 1`` steps later (the status's
``steps`` says how many were trained).
"""

from __future__ import annotations

import math
import sys
from typing import ClassVar

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn

from ablate.config.checks import number, optional, positive_int
from ablate.config.types import Rule, check_rules


class DivergenceMonitor(Callback):
    """Stops training once a diverged step is seen and records the first such step in
    ``diverged_at`` (and why in ``reason``).

    Args:
        max_ratio: diverged when the loss exceeds ``max_ratio`` x the first finite loss (None or
            0: only a non-finite loss counts).
        check_every_n_steps: optimiser steps between reads of the device record on the host
            (None: ``trainer.log_every_n_steps``).
    """

    # what each argument takes, checked where the config is typed (ablate.run.config), before the run
    CONFIG_RULES: ClassVar[dict[str, Rule]] = {
        "max_ratio": (
            lambda v: v is None or (number(v) and v >= 0),
            "null or 0 (only a non-finite loss counts), or a positive multiple of the first loss",
        ),
        "check_every_n_steps": (
            optional(positive_int),
            "null (trainer.log_every_n_steps) or a positive number of steps",
        ),
    }

    def __init__(self, max_ratio: float | None = 10.0, check_every_n_steps: int | None = None) -> None:
        check_rules({"max_ratio": max_ratio, "check_every_n_steps": check_every_n_steps}, "", self.CONFIG_RULES)
        self.max_ratio = max_ratio
        self.check_every_n_steps = check_every_n_steps
        self.initial_loss: float | None = None  # the first finite loss (host copy; read at a check or restored)
        self.diverged_at: int | None = None
        self.reason = ""
        self._threshold: float | None = None  # max_ratio x initial loss (or the largest float)
        # on the loss's device, float64 (the test as the host did it in Python floats): the first
        # step whose loss failed (inf: none yet) and that loss
        self._first_step: torch.Tensor | None = None
        self._first_loss: torch.Tensor | None = None
        self._first_bad: tuple[float, float] | None = None  # host copy of (first failed step, its loss)

    # --- on the device, every step

    def update(self, loss: torch.Tensor, step: int) -> None:
        """Fold one step's (rank-averaged) loss into the device record: a few scalar kernels, no
        sync, except at the first step of the process, whose loss is read once on the host (the
        reference of the ratio test, unless a checkpoint restored it)."""
        loss = loss.detach().to(torch.float64)
        if self._threshold is None:
            first = float(loss)  # once per process, at its first step (which logs anyway)
            if self.initial_loss is None and math.isfinite(first):
                self.initial_loss = first
            # as before: a ratio test only against a positive first loss
            ratio_applies = self.max_ratio and self.initial_loss is not None and self.initial_loss > 0
            # the largest float when no ratio applies: then only NaN and +-inf fail
            self._threshold = self.max_ratio * self.initial_loss if ratio_applies else sys.float_info.max  # type: ignore[operator]
            step_at, loss_at = self._first_bad or (math.inf, math.nan)
            self._first_step = torch.full((), step_at, dtype=torch.float64, device=loss.device)
            self._first_loss = torch.full((), loss_at, dtype=torch.float64, device=loss.device)
        assert self._first_step is not None and self._first_loss is not None
        # fails: NaN, +-inf, or above the threshold (NaN compares False, so the test is "not <=")
        first_failure = ~(loss.abs() <= self._threshold) & (self._first_step == math.inf)
        self._first_step.masked_fill_(first_failure, step)
        torch.where(first_failure, loss, self._first_loss, out=self._first_loss)

    # --- on the host, at the checks

    def read(self) -> None:
        """Copy the device record to the host (the one host sync of a check)."""
        if self._first_step is None or self._first_loss is None:
            return
        step, loss = torch.stack([self._first_step, self._first_loss]).tolist()
        self._first_bad = None if math.isinf(step) else (step, loss)

    def check(self, trainer: L.Trainer) -> bool:
        """Read the device record; on a diverged step, record it, log ``diverged`` at that step and
        stop training. Returns whether the run has diverged."""
        if self.diverged_at is not None:
            return True
        self.read()
        if self._first_bad is None:
            return False
        step, loss = self._first_bad
        self.diverged_at = int(step)
        if math.isfinite(loss):
            self.reason = f"loss {loss:.3g} > {self.max_ratio} x initial {self.initial_loss:.3g}"
        else:
            self.reason = f"non-finite loss ({loss})"
        seen = "" if self.diverged_at == trainer.global_step else f" (seen at step {trainer.global_step})"
        rank_zero_warn(f"run diverged at step {self.diverged_at}{seen}: {self.reason}; stopping this job")
        for logger in trainer.loggers:
            logger.log_metrics({"diverged": 1.0}, step=self.diverged_at)
        trainer.should_stop = True
        return True

    def check_due(self, trainer: L.Trainer) -> bool:
        """A check at this step: every ``check_every_n_steps``, when training is stopping anyway
        (another callback, ``max_steps``), never in between."""
        # log_every_n_steps: set on the Trainer at runtime by Lightning, not declared in its types
        every = self.check_every_n_steps or max(int(trainer.log_every_n_steps or 1), 1)  # type: ignore[attr-defined]
        step = trainer.global_step
        return step % every == 0 or trainer.should_stop or 0 < trainer.max_steps <= step

    # --- Lightning hooks

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        # under DDP every rank must decide alike (one stopping alone leaves the others waiting in the
        # next all-reduce): the test runs on the mean over ranks, so every rank holds the same record
        self.update(trainer.strategy.reduce(loss.detach(), reduce_op="mean"), trainer.global_step)
        if self.check_due(trainer):
            self.check(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":  # validation is a host sync anyway; no validation of a diverged model
            self.check(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.check(trainer)

    def state_dict(self) -> dict:
        # a checkpoint keeps the record as of its step (a host sync, as the checkpoint's own copies
        # are): a run resumed from a checkpoint written between a diverged step and its check
        # still reports the first diverged step
        self.read()
        first_step, first_loss = self._first_bad or (None, None)
        return {"initial_loss": self.initial_loss, "first_bad_step": first_step, "first_bad_loss": first_loss}

    def load_state_dict(self, state_dict: dict) -> None:
        self.initial_loss = state_dict.get("initial_loss")
        step = state_dict.get("first_bad_step")
        self._first_bad = None if step is None else (float(step), float(state_dict["first_bad_loss"]))
        self._threshold = self._first_step = self._first_loss = None  # rebuilt from these at the next step
