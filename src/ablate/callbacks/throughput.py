"""Training throughput: ``train/tokens_per_sec`` and, when the device's peak is known, ``train/mfu``.

The rate is measured over a sliding window of recent optimiser steps (wall clock between batch
starts), so a slow validation pass or checkpoint write does not pollute it.
"""

from __future__ import annotations

import time
from collections import deque

import lightning as L
from lightning.pytorch.callbacks import Callback


def flops_per_token(n_params: int, n_layers: int, d_model: int, seq_len: int) -> float:
    """Training FLOPs per token: 6N for the matmuls of forward + backward, plus the attention
    scores and weighted sum, 12 L d T (Kaplan et al. 2020; PaLM, Chowdhery et al. 2022, App. B)."""
    return 6 * n_params + 12 * n_layers * d_model * seq_len


class ThroughputMonitor(Callback):
    """Logs tokens/s over the last ``window`` steps; ``train/mfu`` when ``peak_flops`` is given."""

    def __init__(self, window: int = 10, peak_flops: float | None = None, flops_per_token: float | None = None) -> None:
        self.window = window
        self.peak_flops, self.flops_per_token = peak_flops, flops_per_token
        self.history: deque[tuple[float, int]] = deque(maxlen=window + 1)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        tokens = batch[0].numel() * trainer.world_size
        self.history.append((time.perf_counter(), tokens))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if len(self.history) < 2:
            return
        elapsed = self.history[-1][0] - self.history[0][0]
        tokens = sum(t for _, t in list(self.history)[:-1])  # tokens of the completed steps in the span
        rate = tokens / max(elapsed, 1e-9)
        pl_module.log("train/tokens_per_sec", rate)
        if self.peak_flops and self.flops_per_token:
            pl_module.log("train/mfu", rate * self.flops_per_token / self.peak_flops)
