"""Metrics computed on the device, written to the loggers once they reach the host. Reading a GPU
tensor on the host blocks the CPU until the GPU is done, and the GPU then idles through the Python
that follows. Here the values are copied to pinned memory without blocking, a CUDA event marking the
copy's end; :meth:`DeferredMetrics.flush` writes the entries whose copy is complete (``wait=True``:
all), each at the step it was computed at. On the CPU it is written at once."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger


@dataclass
class _Entry:
    step: int
    names: Sequence[str]
    values: torch.Tensor  # on the host (pinned, being filled when ``ready`` is a pending event)
    ready: Any  # torch.cuda.Event, or None when the values are already on the host


class DeferredMetrics:
    """A queue of ``(step, names, values)`` on their way from the device to the loggers."""

    def __init__(self) -> None:
        self.pending: deque[_Entry] = deque()

    def put(self, step: int, names: Sequence[str], values: torch.Tensor, loggers: Iterable[Logger]) -> None:
        """Queue ``values`` (a 1-d tensor, one per name) computed at ``step``; on the CPU, write them now."""
        if values.device.type == "cuda":
            host = values.detach().to("cpu", non_blocking=True)  # into pinned memory, asynchronously
            event = torch.cuda.Event()
            event.record()
            self.pending.append(_Entry(step, names, host, event))
        else:
            self.pending.append(_Entry(step, names, values.detach(), None))
        self.flush(loggers)

    def flush(self, loggers: Iterable[Logger], wait: bool = False) -> None:
        """Write the entries whose copy is complete, oldest first (all of them with ``wait``)."""
        loggers = list(loggers)
        while self.pending:
            entry = self.pending[0]
            if entry.ready is not None and not wait and not entry.ready.query():
                return  # still being copied; later entries were queued after it
            if entry.ready is not None:
                entry.ready.synchronize()  # complete already unless wait=True
            self.pending.popleft()
            metrics = dict(zip(entry.names, entry.values.tolist()))  # host memory: no device sync
            for logger in loggers:
                logger.log_metrics(metrics, step=entry.step)

    def clear(self) -> None:
        self.pending.clear()


class DeferredLogging(Callback):
    """A callback logging through :class:`DeferredMetrics` every ``every_n_steps`` steps and at each of the
    first ``dense_steps`` (warmup): flushed after each batch, wholly before validation."""

    def __init__(self, every_n_steps: int = 10, dense_steps: int = 0) -> None:
        self.deferred = DeferredMetrics()
        self.every_n_steps, self.dense_steps = max(1, every_n_steps), dense_steps

    def should_log(self, step: int) -> bool:
        return step < self.dense_steps or step % self.every_n_steps == 0

    def compute_tensor(self) -> tuple[list[str], torch.Tensor] | None:
        """``(names, values)`` on the device (no host sync), or None when there is nothing to log."""
        raise NotImplementedError

    def compute(self) -> dict[str, float]:
        """:meth:`compute_tensor`'s metrics read on the host (a host sync): for callers off the training step."""
        computed = self.compute_tensor()
        if computed is None:
            return {}
        names, values = computed
        return dict(zip(names, values.tolist()))

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self.deferred.flush(trainer.loggers)

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.deferred.flush(trainer.loggers, wait=True)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.deferred.flush(trainer.loggers, wait=True)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.on_train_end(trainer, pl_module)
