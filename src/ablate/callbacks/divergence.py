"""Divergence detection: a run whose loss is non-finite, or above ``max_ratio`` times its first
loss, is marked diverged and stopped cleanly, so a sweep moves on to its next job."""

from __future__ import annotations

import math

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn


class DivergenceMonitor(Callback):
    """Stops training at the first diverged step and records it in ``diverged_at``."""

    def __init__(self, max_ratio: float | None = 10.0) -> None:
        self.max_ratio = max_ratio
        self.initial_loss: float | None = None
        self.diverged_at: int | None = None
        self.reason = ""

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        loss = outputs["loss"] if isinstance(outputs, dict) else outputs
        # under DDP every rank must decide alike (one stopping alone leaves the others waiting in
        # the next all-reduce): decide on the mean over ranks
        loss = float(trainer.strategy.reduce(loss.detach(), reduce_op="mean"))  # one host sync per step
        if self.initial_loss is None and math.isfinite(loss):
            self.initial_loss = loss
        if not math.isfinite(loss):
            self.reason = f"non-finite loss ({loss})"
        elif self.max_ratio and self.initial_loss and loss > self.max_ratio * self.initial_loss:
            self.reason = f"loss {loss:.3g} > {self.max_ratio} x initial {self.initial_loss:.3g}"
        else:
            return
        self.diverged_at = trainer.global_step
        rank_zero_warn(f"run diverged at step {trainer.global_step}: {self.reason}; stopping this job")
        for logger in trainer.loggers:
            logger.log_metrics({"diverged": 1.0}, step=trainer.global_step)
        trainer.should_stop = True

    def state_dict(self) -> dict:
        return {"initial_loss": self.initial_loss}

    def load_state_dict(self, state_dict: dict) -> None:
        self.initial_loss = state_dict.get("initial_loss")
