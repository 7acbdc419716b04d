"""Training throughput: ``train/tokens_per_sec``, ``train/mfu`` (model FLOPs utilisation) and the
cumulative ``train/tokens_seen`` and ``train/time_s``. The rate is the tokens of the last ``window``
steps over their wall time, validation and announced pauses (:meth:`ThroughputMonitor.pause`) left
out. The cumulative counts are kept in checkpoints and logged with every validation. Under DDP each
value is this rank's, none reduced: every rank counts the same tokens, and a reduction of a host
tensor stops NCCL. ``train/mfu`` is ``tokens/s * flops_per_token / peak_flops`` (``"auto"``: the
card's dense bf16 peak, or a timed fp32 matmul on a CPU). Cost: two clock reads per step, no device
work (the host's pace of queuing steps equals the GPU's over a window)."""

from __future__ import annotations

import re
import time
import warnings
from collections import deque
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback

# Nominal dense (no sparsity) bf16 tensor-core peaks in FLOP/s, from the vendors' data sheets.
# Matched against torch.cuda.get_device_name() in order, first match wins.
NOMINAL_BF16_PEAK: tuple[tuple[str, float], ...] = (
    (r"GH200", 989e12),
    (r"H200", 989e12),
    (r"H100.*PCIe", 756e12),
    (r"H100.*NVL", 835e12),
    (r"H100|H800", 989e12),  # SXM (name "NVIDIA H100 80GB HBM3")
    (r"B200", 2250e12),
    (r"A100|A800", 312e12),
    (r"L40S", 362e12),
    (r"L40", 181e12),
    (r"L4\b", 121e12),
    (r"A10\b", 125e12),
    (r"RTX 4090", 165e12),
    (r"RTX A6000", 155e12),
    (r"RTX 3090", 71e12),
)

MATMUL_SIZE = 2048  # the CPU probe: (n x n) @ (n x n), 17 GFLOP
_measured: dict[tuple[str, int, int], float] = {}


def nominal_peak_flops(device_name: str) -> float | None:
    """The dense bf16 peak of a known GPU from its name, or None."""
    for pattern, flops in NOMINAL_BF16_PEAK:
        if re.search(pattern, device_name):
            return flops
    return None


def measure_matmul_flops(size: int = MATMUL_SIZE, repeats: int = 5) -> float:
    """FLOP/s of the fastest of ``repeats`` timed ``size``-square fp32 CPU matmuls (after one untimed), right now."""
    a, b, out = torch.randn(size, size), torch.randn(size, size), torch.empty(size, size)
    best = float("inf")
    for i in range(repeats + 1):
        start = time.perf_counter()
        torch.mm(a, b, out=out)
        if i:
            best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


def measure_cpu_peak(size: int = MATMUL_SIZE, repeats: int = 5) -> tuple[float, float]:
    """``(peak, measured at n threads)``, the CPU's fp32 matmul peak at the current thread count n:
    ``max(measured at n threads, n x measured at 1 thread)``. A busy machine hurts the n-thread
    probe far more (an OpenMP team waits for its slowest thread): without the second term a loaded
    machine would report half its peak and twice the MFU."""
    threads = torch.get_num_threads()
    at_n = measure_matmul_flops(size, repeats)
    if threads == 1:
        return at_n, at_n
    torch.set_num_threads(1)
    try:
        at_1 = measure_matmul_flops(size, repeats)
    finally:
        torch.set_num_threads(threads)
    return max(at_n, threads * at_1), at_n


def device_peak_flops(device: torch.device | str) -> tuple[float | None, str]:
    """``(peak FLOP/s, how it was found)`` for a device: a GPU's nominal bf16 peak (None for an
    unknown card), a CPU's fp32 matmul peak measured by :func:`measure_cpu_peak` (cached)."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = nominal_peak_flops(name)
        return peak, (f"nominal dense bf16 peak of {name}" if peak else f"unknown GPU {name!r}: no nominal peak")
    if device.type != "cpu":
        return None, f"no peak known for device type {device.type!r}"
    key = ("cpu", torch.get_num_threads(), MATMUL_SIZE)
    if key not in _measured:
        _measured[key] = measure_cpu_peak(MATMUL_SIZE)[0]
    return _measured[key], f"fp32 {MATMUL_SIZE}x{MATMUL_SIZE} matmul at {key[1]} threads (measure_cpu_peak)"


def batch_tokens(pl_module: L.LightningModule, batch: Any) -> int:
    """A training batch's tokens, padding included: the task's ``tokens_in_batch``, else the first tensor's size."""
    count = getattr(pl_module, "tokens_in_batch", None)
    return int(count(batch)) if callable(count) else int(batch[0].numel())


class ThroughputMonitor(Callback):
    """Logs tokens/s over the last ``window`` steps; ``train/mfu`` when ``peak_flops`` (FLOP/s,
    ``"auto"``: :func:`device_peak_flops`) and ``flops_per_token`` (filled in by train.py) are known."""

    def __init__(
        self, window: int = 10, peak_flops: float | str | None = None, flops_per_token: float | None = None
    ) -> None:
        if isinstance(peak_flops, str) and peak_flops != "auto":
            raise ValueError(f"peak_flops must be a number, 'auto' or null, got {peak_flops!r}")
        self.window = window
        self.peak_flops, self.flops_per_token = peak_flops, flops_per_token
        self.history: deque[tuple[float, int]] = deque(maxlen=window + 1)  # (batch start time, tokens)
        self._paused_at: float | None = None
        self.tokens_seen = 0  # tokens of every training batch so far, all ranks (kept in checkpoints)
        self.time_s = 0.0  # training time up to the last batch start, pauses left out (kept in checkpoints)
        self._last_start: float | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.peak_flops == "auto":
            self.peak_flops, how = device_peak_flops(trainer.strategy.root_device)
            if self.peak_flops is None:
                warnings.warn(f"train/mfu is not logged: {how}; set callbacks.throughput.peak_flops", stacklevel=2)

    def pause(self) -> None:
        """Leave out the time from now to the next batch start (the step running now ends here)."""
        if self._paused_at is None:
            self._paused_at = time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit":  # validation inside training (not trainer.validate)
            self.pause()

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        now = time.perf_counter()
        if self._last_start is not None:  # the previous step's time, up to a pause if there was one
            self.time_s += (self._paused_at if self._paused_at is not None else now) - self._last_start
        self._last_start = now
        if self._paused_at is not None:
            # shift the recorded starts by the pause, as if it had not happened
            skipped = now - self._paused_at
            self.history = deque(((t + skipped, n) for t, n in self.history), maxlen=self.window + 1)
            self._paused_at = None
        tokens = batch_tokens(pl_module, batch) * trainer.world_size
        self.tokens_seen += tokens
        self.history.append((now, tokens))

    def elapsed(self) -> float:
        """Training time so far: up to now, or up to the pause if one is running."""
        if self._last_start is None:
            return self.time_s
        until = self._paused_at if self._paused_at is not None else time.perf_counter()
        return self.time_s + until - self._last_start

    def rate(self) -> float | None:
        """Tokens/s over the completed steps in the window (None before two batch starts)."""
        if len(self.history) < 2:
            return None
        elapsed = self.history[-1][0] - self.history[0][0]
        tokens = sum(n for _, n in self.history) - self.history[-1][1]  # the last step has not finished
        return tokens / max(elapsed, 1e-9)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        # only where Lightning writes logged values: every log_every_n_steps steps (global_step already
        # counts this one; set at runtime, not in Lightning's types), and when training stops
        every = max(1, trainer.log_every_n_steps)  # type: ignore[attr-defined]
        if trainer.global_step % every and not trainer.should_stop:
            return
        self._log_progress(pl_module)
        rate = self.rate()
        if rate is None:
            return
        # host tensors: Lightning would copy a plain number to the device (a blocking copy)
        pl_module.log("train/tokens_per_sec", torch.tensor(rate, dtype=torch.float32))
        if self.peak_flops and self.flops_per_token:
            assert not isinstance(self.peak_flops, str)  # setup resolved "auto"
            pl_module.log("train/mfu", torch.tensor(rate * self.flops_per_token / self.peak_flops, dtype=torch.float32))

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # in the validation row too: W&B plots a metric against another only within one row
        if trainer.state.fn == "fit" and not trainer.sanity_checking and self._last_start is not None:
            self._log_progress(pl_module)

    def _log_progress(self, pl_module: L.LightningModule) -> None:
        # float64: Lightning would store a plain number as float32, exact only up to 2**24 tokens.
        # Host tensors, never reduced (the module docstring): every rank holds the run's count already
        for name, value in (("train/tokens_seen", self.tokens_seen), ("train/time_s", self.elapsed())):
            pl_module.log(name, torch.tensor(value, dtype=torch.float64), batch_size=1, sync_dist=False)

    def state_dict(self) -> dict[str, float]:
        return {"tokens_seen": self.tokens_seen, "time_s": self.elapsed()}

    def load_state_dict(self, state_dict: dict[str, float]) -> None:
        self.tokens_seen = int(state_dict.get("tokens_seen", 0))
        self.time_s = float(state_dict.get("time_s", 0.0))
        self._last_start = None
