"""One benchmark variant's training loop, in its own thread, run a few steps at a time: the
hand-written reference loop (plain PyTorch) and our Lightning loop (the Trainer, task, callbacks
and loggers ``train.py`` builds), fed by a data loader that times every batch's arrival."""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import lightning as L
import torch
import torch.nn.functional as F
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, Checkpoint, ProgressBar
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, RandomSampler

import ablate  # noqa: F401  (registers the config resolvers)
from ablate.callbacks.checkpointing import ResumeState
from ablate.callbacks.throughput import ThroughputMonitor
from ablate.nn.flops import flops_per_token
from ablate.optim import build_optimizer, build_schedule
from ablate.run.assembly import build_callbacks, build_model, trainer_arguments
from ablate.run.config import RunConfig
from ablate.run.plan import Preflight
from ablate.tracking.loggers import build_loggers

if TYPE_CHECKING:
    from ablate.nn.seq2seq import EncoderDecoder
    from ablate.nn.spec import ModelSpec
    from ablate.nn.transformer import TransformerLM


class TimedLoader(DataLoader):
    """A DataLoader that records how long each batch took to arrive: the time a loop waits for data."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.waits: list[float] = []

    def __iter__(self):
        iterator = super().__iter__()
        while True:
            start = time.perf_counter()
            try:
                batch = next(iterator)
            except StopIteration:
                return
            self.waits.append(time.perf_counter() - start)
            yield batch


def timed_copy(loader: DataLoader, seed: int) -> TimedLoader:
    """The data module's training loader (dataset, sampler, batch size, workers, pinning,
    collate), timed. A fresh ``train_dataloader()`` per variant gives every variant the same
    batches in the same order when its sampler is seeded; an unseeded ``RandomSampler`` (drawing
    from the global RNG) is replaced by one with its own seeded generator."""
    sampler = loader.sampler
    if isinstance(sampler, RandomSampler) and sampler.generator is None:
        sampler = RandomSampler(cast(Sized, loader.dataset), generator=torch.Generator().manual_seed(seed))
    return TimedLoader(
        loader.dataset,
        batch_size=loader.batch_size,
        sampler=sampler,
        drop_last=loader.drop_last,
        num_workers=loader.num_workers,
        pin_memory=loader.pin_memory,
        collate_fn=loader.collate_fn,
        persistent_workers=loader.persistent_workers,
        generator=loader.generator,
    )


# --------------------------------------------------------------------------- one variant


@dataclass
class Variant:
    group: str
    name: str
    loop: str  # "hand" | "lightning"
    overrides: list[str]
    cfg: DictConfig
    checked: Preflight  # ablate.run.plan.check_config of cfg


class Runner:
    """One variant's training loop in its own thread, run ``k`` steps at a time by :meth:`run`.

    The thread owns its floating-point mode (``runtime.flush_denormal`` is set at its start, and
    the OpenMP workers it starts inherit it) and its OpenMP thread team. It stops at every step
    boundary (:meth:`boundary`) and waits there while its turn is over.
    """

    # datamodule: an ablate data module (a LightningDataModule with vocab_size and tokenizer after setup)
    def __init__(self, variant: Variant, datamodule: Any, device: torch.device, max_steps: int) -> None:
        self.variant, self.datamodule, self.device, self.max_steps = variant, datamodule, device, max_steps
        self.loader = timed_copy(datamodule.train_dataloader(), variant.cfg.seed)
        self.spec: ModelSpec | None = None
        self.step = 0  # index of the step about to start (set by the loop before each boundary)
        self.step_times: dict[int, float] = {}  # step index -> duration
        self.times: list[float] = []
        self.error: BaseException | None = None
        self.n_params = 0
        self._budget = 0
        self._last: float | None = None
        self._stop = False
        self._go = threading.Event()
        self._paused = threading.Event()
        self._on_pause: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=self._main, name=f"{variant.group}.{variant.name}", daemon=True)

    # --- main-thread side

    def start(self) -> None:
        """Build the variant (in its thread) and wait for it to reach its first step."""
        self._thread.start()
        self._wait()

    def run(self, steps: int) -> list[float]:
        """Let the loop run ``steps`` steps; returns their durations in seconds."""
        self.times = []
        self._budget = steps
        self._paused.clear()
        self._go.set()
        self._wait()
        if len(self.times) != steps:
            raise RuntimeError(f"{self._thread.name} ended after {len(self.times)} of {steps} steps")
        return self.times

    def close(self) -> None:
        if self._thread.is_alive():
            self._stop = True
            self._paused.clear()
            self._go.set()
            self._thread.join(timeout=600)

    def _wait(self) -> None:
        self._paused.wait()
        if self.error is not None:
            raise RuntimeError(f"variant {self._thread.name} failed: {self.error!r}") from self.error

    # --- worker-thread side

    def _main(self) -> None:
        try:
            torch.set_flush_denormal(bool(self.variant.cfg.runtime.flush_denormal))  # this thread and its OpenMP team
            torch.manual_seed(self.variant.cfg.seed)  # the same initial weights in every variant of a model
            self.train()
        except BaseException as err:
            self.error = err
            traceback.print_exc()
        finally:
            self._paused.set()

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def boundary(self) -> bool:
        """Called at the start of every step: times the step that just ended, and waits while
        this variant's turn is over. Returns False once the benchmark has ended the variant.

        The device is synchronised only where a turn ends, as training does nowhere: within a
        turn a GPU loop queues its steps ahead as it would in a run, so a per-step host sync
        (which training would pay) shows in the timings, and one the benchmark added would not
        hide the loop's own. A step's time is then the host's time between step starts; the
        times of a turn's steps add up to its wall time, device work included."""
        if self._budget <= 1:  # the turn's last step (or the warm-up's) has been queued
            self.sync()
        now = time.perf_counter()
        if self._last is not None:
            self.times.append(now - self._last)
            self.step_times[self.step - 1] = now - self._last
            self._budget -= 1
        if self._budget <= 0 and not self._stop:
            for hook in self._on_pause:
                hook()
            self._paused.set()
            self._go.wait()
            self._go.clear()
            now = time.perf_counter()
        self._last = now
        return not self._stop

    def build_task(self) -> L.LightningModule:
        """The task exactly as ``train.py`` builds it (:func:`ablate.run.assembly.build_model`;
        ``model.compile`` included)."""
        task = build_model(RunConfig.of(self.variant.cfg), self.datamodule, self.variant.checked.max_len)
        self.spec, self.n_params = task.spec, cast("TransformerLM | EncoderDecoder", task.model).num_params()
        return task

    def train(self) -> None:
        raise NotImplementedError


class HandLoop(Runner):
    """A minimal training loop in plain PyTorch, the work of our Lightning loop and nothing else:
    the same model, optimiser, schedule, clipping, precision and batches."""

    def train(self) -> None:
        cfg = self.variant.cfg
        task = self.build_task().to(self.device)
        task.train()
        optim_cfg = cast(dict[str, Any], OmegaConf.to_container(cfg.optim, resolve=True))
        optimizer = build_optimizer(cast(torch.nn.Module, task.model), optim_cfg)
        schedule = build_schedule(optimizer, optim_cfg, self.max_steps)
        clip, smoothing = cfg.optim.get("grad_clip"), cfg.optim.get("label_smoothing", 0.0)
        precision = str(cfg.trainer.get("precision", "32-true"))
        autocast = torch.autocast(
            self.device.type,
            dtype=torch.bfloat16 if precision.startswith("bf16") else torch.float16,
            enabled=precision.endswith("-mixed"),
        )
        batches = iter(self.loader)
        while self.boundary():
            self.step += 1
            x, y = next(batches)
            x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
            with autocast:
                logits = task(x)
            loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), label_smoothing=smoothing)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(task.parameters(), clip)
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)


class _Boundary(Callback):
    """First callback of a Lightning variant: step boundaries at every batch start."""

    def __init__(self, runner: LightningLoop) -> None:
        self.runner = runner

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        self.runner.step = trainer.global_step
        if not self.runner.boundary():
            trainer.should_stop = True  # this last step runs untimed, then fit returns


class _Recorder(Logger):
    """A logger that keeps what the throughput callback logged: ``(step, tokens/s)``."""

    def __init__(self) -> None:
        super().__init__()
        self.tokens_per_sec: list[tuple[int, float]] = []

    @property
    def name(self) -> str:
        return "benchmark"

    @property
    def version(self) -> str:
        return "0"

    def log_hyperparams(self, params: Any, *args: Any, **kwargs: Any) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int | None = None) -> None:
        if "train/tokens_per_sec" in metrics:
            self.tokens_per_sec.append((int(step or 0), float(metrics["train/tokens_per_sec"])))


class LightningLoop(Runner):
    """Our training loop: the Trainer, task, callbacks and loggers that ``train.py`` builds,
    without the progress bar (a terminal display, one per process) and without validation
    and checkpointing (not training steps)."""

    peak_flops: float | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = _Recorder()
        self.window = 0
        self.hook_time: dict[str, float] = {}

    def logged_tokens_per_sec(self, first_timed_step: int, tokens_per_step: int) -> list[tuple[float, float]]:
        """``(logged rate, rate the benchmark timed over the same steps)`` for every logged rate
        whose window lies in timed steps. The rate logged at step s covers steps s-window..s-1."""
        out = []
        for step, value in self.recorder.tokens_per_sec:
            steps = range(step - self.window, step)
            if step - self.window >= first_timed_step and all(i in self.step_times for i in steps):
                out.append((value, self.window * tokens_per_step / sum(self.step_times[i] for i in steps)))
        return out

    def train(self) -> None:
        cfg, variant = self.variant.cfg, self.variant
        task = self.build_task()
        assert self.spec is not None  # set by build_task
        depth = self.spec.n_layers + self.spec.encoder_layers
        flops = flops_per_token(self.n_params, depth, self.spec.d_model, cfg.data.seq_len)
        not_steps = (ProgressBar, Checkpoint, ResumeState)  # a terminal display; what checkpoints hold
        callbacks = [cb for cb in build_callbacks(cfg.get("callbacks")) if not isinstance(cb, not_steps)]
        for cb in callbacks:
            if isinstance(cb, ThroughputMonitor):
                cb.flops_per_token = cb.flops_per_token or flops
                self.window = cb.window
                if cb.peak_flops in (None, "auto"):
                    cb.peak_flops = self.peak_flops  # the benchmark's peak, so logged and measured MFU compare
                self._on_pause.append(cb.pause)
            self._time_hooks(cb)  # about a microsecond per hook call
        output_dir = Path(cfg.paths.output_dir) / variant.group / variant.name
        # CSV only (a config without logger.wandb): W&B allows one run per process
        loggers = [*build_loggers({}, [], output_dir, f"{variant.group}.{variant.name}", None, {}), self.recorder]
        measured = {"max_steps": self.max_steps, "enable_checkpointing": False, "limit_val_batches": 0}
        arguments = {
            **trainer_arguments(cfg.trainer, variant.checked.accumulate),
            **measured,
            "num_sanity_val_steps": 0,
        }
        trainer: L.Trainer = instantiate(
            cfg.trainer,
            logger=loggers,
            callbacks=[_Boundary(self), *callbacks],
            default_root_dir=str(output_dir),
            enable_progress_bar=False,
            **arguments,
        )
        trainer.fit(task, train_dataloaders=self.loader)

    def _time_hooks(self, cb: Callback) -> None:
        """Time every hook the callback implements (for the cost of each callback per step)."""
        name = type(cb).__name__
        self.hook_time[name] = 0.0
        for hook in dir(Callback):
            if hook.startswith("on_") and getattr(type(cb), hook) is not getattr(Callback, hook):
                original = getattr(cb, hook)

                def timed(*args: Any, _original=original, **kwargs: Any) -> Any:
                    start = time.perf_counter()
                    try:
                        return _original(*args, **kwargs)
                    finally:
                        self.hook_time[name] += time.perf_counter() - start

                setattr(cb, hook, timed)
