"""Training progress on the console: the Rich bar on a terminal, plain-text lines elsewhere.

Redirected to a file (SLURM, ``nohup``), Rich's live bar prints nothing until the end;
:class:`TextProgress` prints one short line every so many steps instead (rank zero, flushed)::

    step   120/1500 (  8%)  loss 2.314  val     -  lr 1.9e-03  17.1k tok/s  elapsed 0:41  eta 7:52
    val    500/1500 ( 33%)  loss 2.401  ppl   11.03  elapsed 2:51
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress import ProgressBar

import ablate.tasks  # noqa: F401  (the tasks declare the metrics the progress lines show)
from ablate.metrics import finite_or_none, lookup, shown

MODES = ("auto", "bar", "text")


def format_duration(seconds: float) -> str:
    """``m:ss`` below an hour, ``h:mm:ss`` above."""
    seconds = max(round(seconds), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def format_rate(value: float) -> str:
    """A rate in 4-5 characters: ``950``, ``17.1k``, ``2.35M``."""
    if value < 1e3:
        return f"{value:.0f}"
    if value < 1e6:
        return f"{value / 1e3:.1f}k"
    return f"{value / 1e6:.2f}M"


def _metric_value(value: Any) -> float | None:
    """A metric as a float (non-finite too: a NaN loss must show as nan), or None."""
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _fmt_metric(label: str, value: float | None) -> str:
    """A loss-like column of the training line (``loss 2.401``, ``val 2.398``)."""
    return f"{label}     -" if value is None else f"{label} {value:5.3f}"


class TextProgress(ProgressBar):
    """A line at each multiple of ``every_n_steps`` (None: ``log_every_n_steps``) at least
    ``every_n_seconds`` after the previous one, at the first and last step and after each
    validation, to ``stream`` (None: ``sys.stdout``); ``clock``: seconds (tests give a fake one)."""

    def __init__(
        self,
        every_n_steps: int | None = None,
        every_n_seconds: float = 30.0,
        stream: Any = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__()
        if every_n_steps is not None and (not isinstance(every_n_steps, int) or every_n_steps < 1):
            raise ValueError(f"every_n_steps must be a positive integer or null, got {every_n_steps!r}")
        if every_n_seconds is None or every_n_seconds < 0:
            raise ValueError(f"every_n_seconds must be >= 0, got {every_n_seconds!r}")
        self.every_n_steps = every_n_steps
        self.every_n_seconds = float(every_n_seconds)
        self.stream = stream
        self.clock = clock
        self._enabled = True
        self._start_time: float | None = None
        self._start_step = 0
        self._seen_step: int | None = None  # global_step at the last train batch end (accumulation: many batches)
        self._printed_step: int | None = None  # the step of the last step line
        self._printed_time: float | None = None

    # ProgressBar's interface (the tuner disables the bar while it runs trial steps)
    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def print(self, *args: Any, **kwargs: Any) -> None:
        print(*args, file=self.stream or sys.stdout, flush=True, **kwargs)

    # what is printed
    def total_steps(self, trainer: L.Trainer) -> int | None:
        """The optimiser steps of the run: ``max_steps``, else Lightning's estimate (None if unknown)."""
        if trainer.max_steps and trainer.max_steps > 0:
            return int(trainer.max_steps)
        try:
            total = trainer.estimated_stepping_batches
        except Exception:
            return None
        return int(total) if total and math.isfinite(total) else None

    def _position(self, trainer: L.Trainer, step: int) -> str:
        total = self.total_steps(trainer)
        if total is None:
            return f"{step:>5}"
        width = len(str(total))
        return f"{step:>{width}}/{total} ({100 * step / total:3.0f}%)"

    def _elapsed(self) -> float:
        return self.clock() - self._start_time if self._start_time is not None else 0.0

    def _eta(self, trainer: L.Trainer, step: int) -> str:
        total = self.total_steps(trainer)
        done = step - self._start_step
        elapsed = self._elapsed()
        if total is None or done <= 0 or elapsed <= 0:
            return "-"
        return format_duration((total - step) * elapsed / done)

    def step_line(self, trainer: L.Trainer, step: int) -> str:
        metrics = trainer.callback_metrics
        loss = _metric_value(metrics.get("train/loss"))
        val = _metric_value(metrics.get("val/loss"))
        lr = self._lr(trainer)
        rate = finite_or_none(metrics.get("train/tokens_per_sec"))
        if rate is None:
            rate = finite_or_none(trainer.logged_metrics.get("train/tokens_per_sec"))
        parts = [
            f"step  {self._position(trainer, step)}",
            _fmt_metric("loss", loss),
            _fmt_metric("val", val),
            f"lr {lr:.1e}" if lr is not None else "lr       -",
            f"{format_rate(rate) if rate is not None else '-':>5} tok/s",
            f"elapsed {format_duration(self._elapsed())}",
            f"eta {self._eta(trainer, step):>4}",
        ]
        return "  ".join(parts)

    def val_line(self, trainer: L.Trainer, step: int) -> str:
        metrics = trainer.callback_metrics
        parts = [f"val   {self._position(trainer, step)}"]
        # every declared metric the task logged for validation, in declaration order (ablate.metrics)
        parts += [lookup(key).progress_text(_metric_value(metrics[key])) for key in shown("val") if key in metrics]
        parts.append(f"elapsed {format_duration(self._elapsed())}")
        return "  ".join(parts)

    @staticmethod
    def _lr(trainer: L.Trainer) -> float | None:
        """The rate the last step used (``train/lr``), else the optimiser's current one."""
        lr = finite_or_none(trainer.callback_metrics.get("train/lr"))
        if lr is None and trainer.optimizers:
            lr = finite_or_none(trainer.optimizers[0].param_groups[0].get("lr"))
        return lr

    # when it is printed
    def due(self, step: int, now: float, total: int | None, every_n_steps: int) -> bool:
        """Whether a step line is due at ``step`` (the rule of :class:`TextProgress`)."""
        if self._printed_step is None or (total is not None and step >= total):
            return True
        if step % every_n_steps:
            return False
        return self._printed_time is None or now - self._printed_time >= self.every_n_seconds

    def _emit_step(self, trainer: L.Trainer, step: int, now: float) -> None:
        self._printed_step, self._printed_time = step, now
        self.print(self.step_line(trainer, step))

    def _should_write(self, trainer: L.Trainer) -> bool:
        return self._enabled and trainer.is_global_zero

    # Lightning hooks
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start_time = self.clock()
        self._start_step = trainer.global_step  # a resumed run starts here; its ETA counts from here
        self._seen_step = trainer.global_step
        self._printed_step = self._printed_time = None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        step = trainer.global_step
        if step == self._seen_step:  # gradient accumulation: no optimiser step at this batch
            return
        self._seen_step = step
        if not self._should_write(trainer):
            return
        now = self.clock()
        # log_every_n_steps: set on the Trainer at runtime by Lightning, not declared in its types
        every = self.every_n_steps or max(int(trainer.log_every_n_steps or 1), 1)  # type: ignore[attr-defined]
        if self.due(step, now, self.total_steps(trainer), every):
            self._emit_step(trainer, step, now)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.state.fn != "fit" or not self._should_write(trainer):
            return
        self.print(self.val_line(trainer, trainer.global_step))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # stopped before max_steps (divergence, max_epochs, ...): the last step still gets its line
        step = trainer.global_step
        if self._should_write(trainer) and step > self._start_step and self._printed_step != step:
            self._emit_step(trainer, step, self.clock())


def stdout_is_terminal() -> bool:
    try:
        return bool(sys.stdout and sys.stdout.isatty())
    except (AttributeError, ValueError):  # replaced or closed stdout
        return False


class StepsRichProgressBar(RichProgressBar):
    """Lightning's Rich bar, labelled by optimiser steps: Lightning 2.6 labels it ``Epoch 0/-2`` when
    ``max_steps`` bounds training (every run here); the description is the one private method touched."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._in_train_batch_end = False
        self._metrics: dict[str, Any] | None = None

    def _get_train_description(self, current_epoch: int) -> str:
        trainer = self.trainer
        if trainer.max_steps and trainer.max_steps > 0:
            return f"train (max_steps={trainer.max_steps})"  # set once per epoch: no live step count
        return super()._get_train_description(current_epoch)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        self._in_train_batch_end = True
        try:
            super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        finally:
            self._in_train_batch_end = False

    def get_metrics(self, trainer: L.Trainer, pl_module: L.LightningModule) -> dict[str, Any]:
        """What the bar shows, with ``train/loss`` (not logged with ``prog_bar``, which would read it on
        the host every batch); the numbers change only on logging steps, so no other step waits for the GPU."""
        # log_every_n_steps: set on the Trainer at runtime by Lightning, not declared in its types
        every = max(int(trainer.log_every_n_steps or 1), 1)  # type: ignore[attr-defined]
        if self._in_train_batch_end and self._metrics is not None and trainer.global_step % every:
            return self._metrics
        metrics: dict[str, Any] = dict(super().get_metrics(trainer, pl_module))
        loss = _metric_value(trainer.callback_metrics.get("train/loss"))
        if loss is not None:
            metrics = {"train/loss": loss, **metrics}
        self._metrics = metrics
        return metrics


def progress_callback(
    mode: str = "auto", every_n_steps: int | None = None, every_n_seconds: float = 30.0
) -> ProgressBar:
    """``callbacks.progress_bar``: ``auto`` the Rich bar on a terminal, else :class:`TextProgress`."""
    if mode not in MODES:
        raise ValueError(
            f"callbacks.progress_bar.mode must be one of {', '.join(MODES)}, got {mode!r} "
            "(callbacks.progress_bar=null: no progress output)"
        )
    if mode == "auto":
        mode = "bar" if stdout_is_terminal() else "text"
    if mode == "bar":
        return StepsRichProgressBar()
    return TextProgress(every_n_steps=every_n_steps, every_n_seconds=every_n_seconds)


def wants_progress_bar(callbacks: Iterable[Any]) -> bool:
    """``enable_progress_bar``: whether a progress callback is among ``callbacks`` (else Lightning adds its own)."""
    return any(isinstance(cb, ProgressBar) for cb in callbacks)
