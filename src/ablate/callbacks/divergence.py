"""Divergence detection: a run whose loss is non-finite, or above ``max_ratio`` times its first
finite loss, is marked diverged and stopped cleanly, so a sweep moves on to its next job.

Without a host synchronisation per step: reading the loss on the host every step makes the CPU
wait for the GPU (10% of a GPT-2 small step on an H100: issue 31), and every kernel launched per
step costs host time (1.8 ms per step for a few scalar kernels with a full queue: issue 39). So
each step's loss is only copied into a window on its device, and the window is tested on the host
every ``check_every_n_steps`` steps, before each validation and at the end (under DDP averaged
over the ranks at each check, so every rank stops alike). ``diverged_at`` is the first step whose
loss failed; training stops at the read, up to ``check_every_n_steps - 1`` steps later.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn

from ablate.config import targets
from ablate.config.types import check_rules


class DivergenceMonitor(Callback):
    """Stops training once a diverged step is seen and records the first such step in
    ``diverged_at`` (and why in ``reason``).

    Args:
        max_ratio: diverged when the loss exceeds ``max_ratio`` x the first finite loss (None or
            0: only a non-finite loss counts).
        check_every_n_steps: optimiser steps between reads of the device window on the host
            (None: ``trainer.log_every_n_steps``).
    """

    CONFIG_RULES = targets.DivergenceMonitor.CONFIG_RULES  # declared with its keys, read without torch

    def __init__(self, max_ratio: float | None = 10.0, check_every_n_steps: int | None = None) -> None:
        check_rules({"max_ratio": max_ratio, "check_every_n_steps": check_every_n_steps}, "", self.CONFIG_RULES)
        self.max_ratio = max_ratio
        self.check_every_n_steps = check_every_n_steps
        self.initial_loss: float | None = None  # the first finite loss
        self.diverged_at: int | None = None
        self.reason = ""
        self._first_bad: tuple[float, float] | None = None  # (first failed step, its loss), as checked on the host
        self._window: torch.Tensor | None = None  # float64, on the loss's device: the losses since the last check
        self._steps: list[int] = []  # the step of each of them

    # --- every step: one copy on the device

    def update(self, loss: torch.Tensor, step: int) -> None:
        """Append one step's loss to the window: one copy kernel (float64, as the host tests it), no sync."""
        count = len(self._steps)
        if self._window is None or count == len(self._window) or self._window.device != loss.device:
            self._grow(loss.device)
        assert self._window is not None
        self._window[count].copy_(loss.detach())
        self._steps.append(step)

    def _grow(self, device: torch.device) -> None:
        """A window twice as long (at least 16), keeping what it holds (rare: checks empty it)."""
        count = len(self._steps)
        window = torch.empty(max(16, 2 * count), dtype=torch.float64, device=device)
        if count:
            assert self._window is not None
            window[:count].copy_(self._window[:count])
        self._window = window

    # --- on the host, at the checks

    def _tested(
        self, steps: list[int], losses: list[float], initial: float | None, first_bad: tuple[float, float] | None
    ) -> tuple[float | None, tuple[float, float] | None]:
        """``(first finite loss, first failure)`` after testing ``losses`` in order: a loss fails when
        it is not finite or above ``max_ratio`` x the first finite loss (when that is positive)."""
        for step, loss in zip(steps, losses):
            if initial is None and math.isfinite(loss):
                initial = loss
            ratio_applies = self.max_ratio and initial is not None and initial > 0
            threshold = self.max_ratio * initial if ratio_applies else sys.float_info.max  # type: ignore[operator]
            if first_bad is None and not abs(loss) <= threshold:  # NaN compares False
                first_bad = (float(step), loss)
        return initial, first_bad

    def read(self, reduce: Callable[..., torch.Tensor] | None = None) -> None:
        """Test the window on the host (one read) and empty it; ``reduce``: the strategy's reduce,
        to average the window over the ranks first (a collective: every rank calls it together)."""
        if not self._steps:
            return
        assert self._window is not None
        window = self._window[: len(self._steps)]
        if reduce is not None:
            window = reduce(window, reduce_op="mean")
        self.initial_loss, self._first_bad = self._tested(
            self._steps, window.tolist(), self.initial_loss, self._first_bad
        )
        self._steps = []

    def check(self, trainer: L.Trainer) -> bool:
        """Read the device record; on a diverged step, record it, log ``diverged`` at that step and
        stop training. Returns whether the run has diverged."""
        if self.diverged_at is not None:
            return True
        # the mean over ranks: every rank holds the same record and decides alike (one stopping alone
        # would leave the others waiting in the next all-reduce)
        self.read(trainer.strategy.reduce)
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
        self.update(loss, trainer.global_step)
        if self.check_due(trainer):
            self.check(trainer)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":  # validation is a host sync anyway; no validation of a diverged model
            self.check(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.check(trainer)

    def state_dict(self) -> dict:
        # the record as of this step, the window not yet checked tested into it (a host read, as the
        # checkpoint's own copies are; this rank's losses, without a collective), so that a run
        # resumed from a checkpoint written between a diverged step and its check still reports it
        window = self._window[: len(self._steps)].tolist() if self._window is not None and self._steps else []
        initial, first_bad = self._tested(self._steps, window, self.initial_loss, self._first_bad)
        first_step, first_loss = first_bad or (None, None)
        return {"initial_loss": initial, "first_bad_step": first_step, "first_bad_loss": first_loss}

    def load_state_dict(self, state_dict: dict) -> None:
        self.initial_loss = state_dict.get("initial_loss")
        step = state_dict.get("first_bad_step")
        self._first_bad = None if step is None else (float(step), float(state_dict["first_bad_loss"]))
        self._window, self._steps = None, []
