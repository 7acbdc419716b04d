"""Measure the training speed of the configured experiment, in one process, and check the budgets.
The library part of ``scripts/benchmark.py`` (its entry point): the runner, the hand-written
reference loop, the report.

    python scripts/benchmark.py                                 # the default experiment
    python scripts/benchmark.py model.n_layers=2 data.seq_len=64 benchmark.compile=true
    python scripts/benchmark.py trainer=gpu model=gpt2_small data.seq_len=1024 benchmark.compile=true

Config: ``conf/benchmark.yaml`` (it composes ``conf/train.yaml``: same groups, same overrides).
Output: a table on the console and ``benchmark.json`` in the Hydra output directory
(``benchmark.json_path``). ``experiments/benchmarks/README.md`` explains every number.

How variants are compared. A laptop-class CPU drifts 8-22% from run to run and another busy
process makes a step several times slower, so absolute times from separate runs cannot be
compared. Every variant of a group (e.g. our Lightning loop and a hand-written loop) is a
complete training loop running in its own thread; the main thread lets exactly one of them run
at a time, ``turn_steps`` steps per turn, round-robin, until each has done the group's ``steps``
steps of the round (the order rotates every round); each loop times its own steps: batch start
to next batch start, which holds one data fetch and one whole optimiser step, and never the time
it was paused. A ratio is the median over rounds of the ratio of two variants' mean step times
in the same round, so drift between rounds cancels and a disturbed round does not move the
median.
"""

from __future__ import annotations

import json
import logging
import math
import os
import platform
import re
import resource
import statistics
import subprocess
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import hydra
import lightning as L
import torch
import torch.nn.functional as F
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback, Checkpoint, ProgressBar
from lightning.pytorch.loggers import Logger
from omegaconf import DictConfig, OmegaConf
from torch.utils.data import DataLoader, RandomSampler

import ablate  # noqa: F401  (registers the config resolvers)
from ablate.callbacks.throughput import ThroughputMonitor, device_peak_flops, measure_cpu_peak
from ablate.config import model_spec
from ablate.flops import flops_per_token
from ablate.tracking.loggers import build_loggers
from ablate.optim import build_optimizer, build_schedule
from ablate.tasks import build_task
from ablate.train import build_callbacks, check_config, eval_max_len

if TYPE_CHECKING:
    from rich.console import JustifyMethod

    from ablate.config import ModelSpec
    from ablate.nn.seq2seq import EncoderDecoder
    from ablate.nn.transformer import TransformerLM

BUDGET_TEXT = {
    "framework_overhead": "Lightning loop overhead vs a hand-written loop",
    "grad_norm_default_interval": "grad-norm logging at the default interval",
    "grad_norm_every_step": "grad-norm logging every step",
    "data_wait": "time waiting for data / step time",
    "logged_tokens_per_sec": "logged train/tokens_per_sec vs timed, same steps",
}


# --------------------------------------------------------------------------- the machine


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        match = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if match:
            return match.group(1).strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict[str, Any]:
    info = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "load_avg_start": list(os.getloadavg()),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


class CpuShare:
    """The share of the machine's CPU time that other processes used between two readings
    (from /proc/stat and this process's own CPU time): the interference a run suffered."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        try:
            fields = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        tick = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)) / tick  # minus idle, iowait
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return time.monotonic(), busy, usage.ru_utime + usage.ru_stime

    def others(self) -> float | None:
        end = self._read()
        if end is None or self.start is None:
            return None
        wall = end[0] - self.start[0]
        other = (end[1] - self.start[1]) - (end[2] - self.start[2])
        return max(0.0, other / (wall * (os.cpu_count() or 1))) if wall > 0 else None


def rss_mb() -> float:
    """The current resident set size."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


# --------------------------------------------------------------------------- data


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
        this variant's turn is over. Returns False once the benchmark has ended the variant."""
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
        """The task exactly as ``train.py`` builds it (:func:`ablate.tasks.build_task`; ``model.compile`` included)."""
        cfg = self.variant.cfg
        spec = model_spec(cfg, vocab_size=self.datamodule.vocab_size, max_len=eval_max_len(cfg))
        task = build_task(cfg, self.datamodule, spec)
        self.spec, self.n_params = spec, cast("TransformerLM | EncoderDecoder", task.model).num_params()
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
        task.tokenizer = self.datamodule.tokenizer
        assert self.spec is not None  # set by build_task
        callbacks = [
            cb for cb in build_callbacks(cfg, self.spec, self.n_params) if not isinstance(cb, (ProgressBar, Checkpoint))
        ]
        for cb in callbacks:
            if isinstance(cb, ThroughputMonitor):
                self.window = cb.window
                if cb.peak_flops in (None, "auto"):
                    cb.peak_flops = self.peak_flops  # the benchmark's peak, so logged and measured MFU compare
                self._on_pause.append(cb.pause)
            self._time_hooks(cb)  # about a microsecond per hook call
        output_dir = Path(cfg.paths.output_dir) / variant.group / variant.name
        # CSV only (a config without logger.wandb): W&B allows one run per process
        loggers = [*build_loggers(None, output_dir, f"{variant.group}.{variant.name}", None, {}), self.recorder]
        trainer: L.Trainer = instantiate(
            cfg.trainer,
            logger=loggers,
            callbacks=[_Boundary(self), *callbacks],
            default_root_dir=str(output_dir),
            max_steps=self.max_steps,
            enable_progress_bar=False,
            enable_checkpointing=False,
            limit_val_batches=0,
            num_sanity_val_steps=0,
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


# --------------------------------------------------------------------------- groups


@dataclass
class Result:
    variant: Variant
    round_means: list[float] = field(default_factory=list)
    steps: list[float] = field(default_factory=list)
    waits: list[float] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def split_override(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def compose_variant(overrides: list[str]) -> DictConfig:
    """The configured experiment (this run's command-line overrides) plus ``overrides``."""
    keys = {split_override(o) for o in overrides}
    base = [o for o in HydraConfig.get().overrides.task if split_override(o) not in keys]
    return hydra.compose(config_name=HydraConfig.get().job.config_name, overrides=[*base, *overrides])


def parse_variants(name: str, spec: DictConfig) -> list[Variant]:
    variants = []
    for vname, value in spec.variants.items():
        if isinstance(value, DictConfig) and "overrides" in value:
            loop, overrides = value.get("loop", spec.get("loop", "hand")), list(value.overrides)
        else:
            loop, overrides = spec.get("loop", "hand"), list(value)
        if loop not in ("hand", "lightning"):
            raise ValueError(f"benchmark.groups.{name}.variants.{vname}: loop must be hand or lightning, got {loop!r}")
        cfg = compose_variant(overrides)
        check_config(cfg)
        variants.append(Variant(name, str(vname), loop, overrides, cfg))
    return variants


def parse_ratios(name: str, spec: DictConfig, names: list[str]) -> dict[str, tuple[str, str]]:
    ratios: dict[str, tuple[str, str]] = {}
    baseline = spec.get("baseline")
    if baseline:
        ratios.update({v: (v, baseline) for v in names if v != baseline})
    for rname, text in (spec.get("ratios") or {}).items():
        parts = [p.strip() for p in str(text).split("/")]
        if len(parts) != 2 or not set(parts) <= set(names):
            raise ValueError(
                f"benchmark.groups.{name}.ratios.{rname}: expected 'variant / variant' of {names}, got {text!r}"
            )
        ratios[str(rname)] = (parts[0], parts[1])
    return ratios


def summarise(values: list[float]) -> dict[str, float]:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


class Benchmark:
    peak_flops: float | None  # set by run()

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg, self.bench = cfg, cfg.benchmark
        self.device = torch.device("cuda" if str(cfg.trainer.get("accelerator")) in ("gpu", "cuda") else "cpu")
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("trainer=gpu needs a CUDA device; none is available")
        devices, nodes = cfg.trainer.get("devices", 1), cfg.trainer.get("num_nodes", 1)
        micro = cfg.data.get("micro_batch_size")
        if devices not in (1, "1", [0]) or nodes not in (None, 1) or micro not in (None, cfg.data.batch_size):
            raise ValueError(
                f"the benchmark measures one device without gradient accumulation (trainer.devices={devices}, "
                f"trainer.num_nodes={nodes}, data.micro_batch_size={micro}): use trainer=cpu or trainer=gpu"
            )
        self.steps_needed = 0

    def setup_data(self) -> None:
        cfg = self.cfg
        self.datamodule = instantiate(cfg.data)
        self.datamodule.prepare_data()
        self.datamodule.setup("fit")
        self.tokens_per_step = cfg.data.batch_size * cfg.data.seq_len

    def make_runner(self, variant: Variant) -> Runner:
        cls = LightningLoop if variant.loop == "lightning" else HandLoop
        return cls(variant, self.datamodule, self.device, self.max_steps)

    def run_group(
        self, name: str, spec: DictConfig, on_built: Callable[[Runner], None] | None = None
    ) -> dict[str, Any]:
        variants = parse_variants(name, spec)
        ratios = parse_ratios(name, spec, [v.name for v in variants])
        steps, rounds = int(spec.get("steps", 4)), int(spec.get("rounds") or self.bench.rounds)
        warmup = int(spec.get("warmup_steps") or self.bench.warmup_steps)
        print(f"[{name}] building {len(variants)} variants: {', '.join(v.name for v in variants)}", flush=True)
        share = CpuShare()
        start = time.perf_counter()
        runners: list[Runner] = []
        try:
            for variant in variants:
                runner = self.make_runner(variant)
                if isinstance(runner, LightningLoop):
                    runner.peak_flops = self.peak_flops
                runner.start()
                if warmup:
                    runner.run(warmup)
                runners.append(runner)
                if on_built is not None:
                    on_built(runner)
            results = {r.variant.name: Result(r.variant) for r in runners}
            first_timed_step: dict[str, int] = {}
            for runner in runners:  # time from here on
                runner.loader.waits.clear()
                if isinstance(runner, LightningLoop):
                    first_timed_step[runner.variant.name] = runner.step
                    runner.hook_time = dict.fromkeys(runner.hook_time, 0.0)
            turn = max(1, min(steps, int(spec.get("turn_steps") or self.bench.turn_steps)))
            turns = [turn] * (steps // turn) + ([steps % turn] if steps % turn else [])
            for rnd in range(rounds):
                order = runners[rnd % len(runners) :] + runners[: rnd % len(runners)]
                in_round: dict[str, list[float]] = {r.variant.name: [] for r in runners}
                for k in turns:  # A B C A B C ...: the steps compared are close in time
                    for runner in order:
                        in_round[runner.variant.name] += runner.run(k)
                for vname, times in in_round.items():
                    results[vname].steps += times
                    results[vname].round_means.append(sum(times) / len(times))
                print(
                    f"[{name}] round {rnd + 1}/{rounds}: "
                    + ", ".join(f"{n} {1e3 * r.round_means[-1]:.1f} ms" for n, r in results.items()),
                    flush=True,
                )
            for runner in runners:
                res = results[runner.variant.name]
                res.waits = list(runner.loader.waits)
                if isinstance(runner, LightningLoop):
                    res.extra["logged_tokens_per_sec"] = runner.logged_tokens_per_sec(
                        first_timed_step[runner.variant.name], self.tokens_per_step
                    )
                    if runner.hook_time:
                        n = rounds * steps
                        res.extra["callback_ms_per_step"] = {k: 1e3 * v / n for k, v in runner.hook_time.items()}
                res.extra["n_params"] = runner.n_params
                res.extra["spec"] = runner.spec
        finally:
            for runner in runners:
                runner.close()
        out: dict[str, Any] = {
            "steps_per_round": steps,
            "steps_per_turn": turn,
            "rounds": rounds,
            "warmup_steps": warmup,
            "wall_s": round(time.perf_counter() - start, 1),
            "load_avg_1min": os.getloadavg()[0],
            "other_processes_cpu_share": share.others(),
            "variants": {},
            "ratios": {},
        }
        for vname, res in results.items():
            mean_step = statistics.median(res.round_means)
            out["variants"][vname] = {
                "loop": res.variant.loop,
                "overrides": res.variant.overrides,
                "params": res.extra["n_params"],
                "step_time_median_s": statistics.median(res.steps),
                "round_mean_step_s": summarise(res.round_means),
                "tokens_per_sec": self.tokens_per_step / mean_step,
                "data_wait_median_ms": 1e3 * statistics.median(res.waits) if res.waits else None,
                "data_wait_max_ms": 1e3 * max(res.waits) if res.waits else None,
                "data_wait_fraction": (sum(res.waits) / sum(res.steps)) if res.waits else None,
                "callback_ms_per_step": res.extra.get("callback_ms_per_step"),
            }
        for rname, (a, b) in ratios.items():
            per_round = [x / y for x, y in zip(results[a].round_means, results[b].round_means)]
            out["ratios"][rname] = {"of": f"{a} / {b}", **summarise(per_round), "per_round": per_round}
        self.results[name] = results
        return out

    def run(self) -> dict[str, Any]:
        cfg, bench = self.cfg, self.bench
        t0 = time.perf_counter()
        if cfg.runtime.flush_denormal:
            torch.set_flush_denormal(True)  # as train.py; every variant sets its own in its thread
        torch.set_float32_matmul_precision(cfg.runtime.matmul_precision)
        logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
        warnings.filterwarnings("ignore", ".*does not have many workers.*")
        warnings.filterwarnings("ignore", ".*isinstance.treespec, LeafSpec.*")
        warnings.filterwarnings("ignore", ".*defined a `validation_step` but have no `val_dataloader`.*")
        report: dict[str, Any] = {"machine": machine_info(self.device)}
        self.setup_data()
        groups = {
            k: v for k, v in bench.groups.items() if v.get("enabled", True) and (not bench.only or k in bench.only)
        }
        longest = max(
            (
                int(g.get("warmup_steps") or bench.warmup_steps)
                + int(g.get("rounds") or bench.rounds) * int(g.get("steps", 4))
                for g in groups.values()
            ),
            default=0,
        )
        self.max_steps = max(int(cfg.trainer.max_steps), longest + 10)
        self.results: dict[str, dict[str, Result]] = {}

        head_group, _, head_variant = str(bench.headline).partition(".")
        memory: dict[str, Any] = {"rss_before_model_mb": rss_mb()}
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

        def after_build(runner: Runner) -> None:
            """Memory right after the headline variant's warm-up, before any other model exists."""
            if runner.variant.name != head_variant or "peak_mb" in memory:
                return
            if self.device.type == "cuda":
                memory.update(
                    kind="max CUDA memory allocated", peak_mb=torch.cuda.max_memory_allocated(self.device) / 2**20
                )
            else:
                memory.update(kind="peak RSS of the process", peak_mb=peak_rss_mb())

        # the device's peak: given, nominal (GPU), or measured (CPU: before any model exists,
        # and again after every group; the best probe counts, as a moment of interference only
        # ever makes a probe slower)
        self.probes: list[dict[str, float]] = []
        if bench.peak_flops:
            self.peak_flops, how = float(bench.peak_flops), "benchmark.peak_flops"
        elif self.device.type == "cpu":
            size = int(bench.peak_matmul_size)
            self.probe_peak(int(bench.peak_matmul_repeats))
            how = (
                f"fp32 {size}x{size} matmul at {torch.get_num_threads()} threads (or {torch.get_num_threads()} x 1 thread "
                f"if higher), best of {bench.peak_matmul_repeats} at start and 3 after each group"
            )
        else:
            self.peak_flops, how = device_peak_flops(self.device)
        memory["rss_before_model_mb"] = rss_mb()

        report["groups"] = {}
        for name, spec in groups.items():
            report["groups"][name] = self.run_group(name, spec, after_build if name == head_group else None)
            if self.probes:
                self.probe_peak(3)
        report["peak_flops"], report["peak_flops_source"] = self.peak_flops, how
        report["peak_flops_probes"] = self.probes
        report["headline"] = self.headline(head_group, head_variant, memory)
        report["budgets"] = self.budgets(report)
        report["config"] = {
            "overrides": list(HydraConfig.get().overrides.task),
            "model": OmegaConf.to_container(cfg.model, resolve=True),
            "axes": self.headline_spec.axes() if self.headline_spec else None,
            "seq_len": cfg.data.seq_len,
            "batch_size": cfg.data.batch_size,
            "tokens_per_step": self.tokens_per_step,
            "trainer": {k: cfg.trainer.get(k) for k in ("accelerator", "precision", "log_every_n_steps")},
        }
        report["machine"]["load_avg_end"] = list(os.getloadavg())
        report["wall_time_s"] = round(time.perf_counter() - t0, 1)
        return report

    def probe_peak(self, repeats: int) -> None:
        peak, at_n = measure_cpu_peak(int(self.bench.peak_matmul_size), repeats)
        self.probes.append({"peak": peak, "at_threads": at_n})
        self.peak_flops = max(p["peak"] for p in self.probes)

    def headline(self, group: str, name: str, memory: dict[str, Any]) -> dict[str, Any]:
        self.headline_spec = None
        if group not in self.results or name not in self.results[group]:
            return {"variant": f"{group}.{name}", "note": "headline variant not run"}
        res = self.results[group][name]
        spec = self.headline_spec = res.extra["spec"]
        fpt = flops_per_token(
            res.extra["n_params"], spec.n_layers + spec.encoder_layers, spec.d_model, self.cfg.data.seq_len
        )
        mean_step = statistics.median(res.round_means)
        tps = self.tokens_per_step / mean_step
        out: dict[str, Any] = {
            "variant": f"{group}.{name}",
            "params": res.extra["n_params"],
            "tokens_per_step": self.tokens_per_step,
            "tokens_per_sec": tps,
            "step_time_median_s": statistics.median(res.steps),
            "step_time_mean_s": mean_step,
            "flops_per_token": fpt,
            "achieved_flops": tps * fpt,
            "mfu": tps * fpt / self.peak_flops if self.peak_flops else None,
            "peak_memory_mb": memory.get("peak_mb"),
            "memory_kind": memory.get("kind"),
            "rss_before_model_mb": memory.get("rss_before_model_mb"),
            "data_wait_median_ms": 1e3 * statistics.median(res.waits) if res.waits else None,
            "data_wait_max_ms": 1e3 * max(res.waits) if res.waits else None,
            "data_wait_fraction": sum(res.waits) / sum(res.steps) if res.waits else None,
        }
        logged = res.extra.get("logged_tokens_per_sec") or []
        out["logged_tokens_per_sec"] = statistics.median(v for v, _ in logged) if logged else None
        out["logged_mfu"] = out["logged_tokens_per_sec"] * fpt / self.peak_flops if logged and self.peak_flops else None
        # the logged rate against the rate the benchmark timed over the same steps (window by window)
        out["logged_vs_timed_same_steps"] = statistics.median(v / t for v, t in logged) - 1 if logged else None
        out["logged_vs_headline"] = out["logged_tokens_per_sec"] / tps - 1 if logged else None
        out["callback_ms_per_step"] = res.extra.get("callback_ms_per_step")
        hand = self.results[group].get("hand")
        if hand is not None:
            hand_tps = self.tokens_per_step / statistics.median(hand.round_means)
            out["hand_loop_tokens_per_sec"] = hand_tps
            out["hand_loop_mfu"] = hand_tps * fpt / self.peak_flops if self.peak_flops else None
        return out

    def budgets(self, report: dict[str, Any]) -> dict[str, Any]:
        limits = self.bench.budgets
        ratios = {k: v for g in report["groups"].values() for k, v in g["ratios"].items()}
        measured: dict[str, float | None] = {}
        for key in ("framework_overhead", "grad_norm_default_interval", "grad_norm_every_step"):
            measured[key] = ratios[key]["median"] - 1 if key in ratios else None
        # direct cost of grad-norm logging: time inside the callback (norms and logger writes)
        # per step over the step time of the same variant
        direct: dict[str, float | None] = {}
        loop = report["groups"].get("loop", {}).get("variants", {})
        for key, vname in (
            ("grad_norm_default_interval", "lightning"),
            ("grad_norm_every_step", "grad_norm_every_step"),
        ):
            v = loop.get(vname) or {}
            ms = (v.get("callback_ms_per_step") or {}).get("GradNormMonitor")
            direct[key] = ms / 1e3 / v["round_mean_step_s"]["median"] if ms is not None else None
        aa = ratios.get("aa_control")
        resolution = abs(aa["median"] - 1) if aa else None
        head = report["headline"]
        measured["data_wait"] = head.get("data_wait_fraction")
        same = head.get("logged_vs_timed_same_steps")
        measured["logged_tokens_per_sec"] = abs(same) if same is not None else None
        out = {}
        for key, value in measured.items():
            limit = float(limits[key])
            met = None if value is None else value <= limit
            out[key] = {
                "what": BUDGET_TEXT[key],
                "measured": value,
                "limit": limit,
                "met": met,
                "missed_by": None if value is None or met else value - limit,
            }
            if key in ("framework_overhead", "grad_norm_default_interval", "grad_norm_every_step"):
                out[key]["aa_control"] = resolution  # |hand_again / hand - 1|: what noise alone gives
                # a miss no larger than the A/A control's deviation is not distinguishable from noise
                out[key]["within_noise"] = bool(
                    not met and resolution is not None and value is not None and value - limit <= resolution
                )
            if key in direct:
                out[key]["direct"] = direct[key]
        return out


# --------------------------------------------------------------------------- output


def pct(x: float | None, signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%"


def print_report(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    console = Console(width=max(150, Console().width))
    m, head = report["machine"], report["headline"]
    console.print(
        f"[bold]machine[/bold] {m['cpu']}, {m['logical_cpus']} logical CPUs, torch {m['torch']} at "
        f"{m['torch_threads']} threads, device {m.get('gpu', m['device'])}; load average "
        f"{m['load_avg_start'][0]:.2f} at start, {m['load_avg_end'][0]:.2f} at end"
    )
    console.print(
        f"[bold]config[/bold] {escape(' '.join(report['config']['overrides'])) or '(defaults)'}; "
        f"{report['config']['tokens_per_step']} tokens per step"
    )
    peak = report["peak_flops"]
    console.print(
        f"[bold]peak[/bold] {peak / 1e9:.1f} GFLOP/s ({report['peak_flops_source']})"
        if peak
        else f"[bold]peak[/bold] unknown ({report['peak_flops_source']})"
    )

    t = Table(title=f"Training speed ({head.get('variant')})")
    t.add_column("metric")
    t.add_column("value", justify="right")
    if "tokens_per_sec" in head:
        rows = [
            ("tokens/s (our loop)", f"{head['tokens_per_sec']:,.0f}"),
            (
                "tokens/s (hand-written loop)",
                f"{head['hand_loop_tokens_per_sec']:,.0f}" if head.get("hand_loop_tokens_per_sec") else "n/a",
            ),
            ("median step time", f"{1e3 * head['step_time_median_s']:.2f} ms"),
            ("model FLOPs per token", f"{head['flops_per_token'] / 1e6:.2f} M"),
            ("achieved", f"{head['achieved_flops'] / 1e9:.1f} GFLOP/s"),
            ("MFU (our loop / hand loop)", f"{pct(head['mfu'], False)} / {pct(head.get('hand_loop_mfu'), False)}"),
            (
                f"peak memory ({head['memory_kind']})",
                f"{head['peak_memory_mb']:,.0f} MB" if head["peak_memory_mb"] else "n/a",
            ),
            ("  of which before the model", f"{head['rss_before_model_mb']:,.0f} MB"),
            (
                "data wait per step (median / max)",
                f"{head['data_wait_median_ms']:.3f} / {head['data_wait_max_ms']:.2f} ms"
                if head["data_wait_median_ms"] is not None
                else "n/a",
            ),
            (
                "logged train/tokens_per_sec (median)",
                f"{head['logged_tokens_per_sec']:,.0f} ({pct(head['logged_vs_headline'])} vs "
                f"tokens/s above, {pct(head['logged_vs_timed_same_steps'])} vs timed over the same steps)"
                if head["logged_tokens_per_sec"]
                else "n/a",
            ),
        ]
        for cb, ms in (head.get("callback_ms_per_step") or {}).items():
            rows.append((f"  {cb} hooks per step", f"{ms:.3f} ms"))
        for row in rows:
            t.add_row(*row)
    console.print(t)

    t = Table(title="Side-by-side ratios (median over rounds of per-round mean step time ratios)")
    for col, just in (
        ("group", "left"),
        ("ratio", "left"),
        ("of", "left"),
        ("median", "right"),
        ("min-max", "right"),
        ("rounds", "right"),
        ("load", "right"),
        ("others' CPU", "right"),
    ):
        t.add_column(col, justify=cast("JustifyMethod", just))
    for gname, g in report["groups"].items():
        for i, (rname, r) in enumerate(g["ratios"].items()):
            t.add_row(
                gname if i == 0 else "",
                rname,
                r["of"],
                f"{r['median']:.3f}",
                f"{r['min']:.3f}-{r['max']:.3f}",
                str(len(r["per_round"])),
                f"{g['load_avg_1min']:.2f}" if i == 0 else "",
                pct(g["other_processes_cpu_share"], False) if i == 0 else "",
            )
    console.print(t)

    busy = [
        g["other_processes_cpu_share"] for g in report["groups"].values() if g["other_processes_cpu_share"] is not None
    ]
    if busy and max(busy) > 0.1:
        console.print(
            f"[yellow]other processes used up to {pct(max(busy), False)} of the machine's CPU during the run: "
            f"ratios are less precise than on a quiet machine (see the min-max column)[/yellow]"
        )

    t = Table(
        title="Budgets (measured: the median ratio minus 1; A/A: the same for two identical hand loops, "
        "i.e. the noise; direct: time inside the callback / step time)"
    )
    for col in ("budget", "measured", "A/A", "direct", "limit", "verdict"):
        t.add_column(col)
    for key, b in report["budgets"].items():
        if b["met"] is None:
            verdict = "[yellow]not measured[/yellow]"
        elif b["met"]:
            verdict = "[green]met[/green]"
        elif b.get("within_noise"):
            verdict = f"[yellow]missed by {100 * b['missed_by']:.1f} points, within this run's noise (A/A)[/yellow]"
        else:
            verdict = f"[red]missed by {100 * b['missed_by']:.1f} points[/red]"
        t.add_row(
            f"{b['what']} ({key})",
            pct(b["measured"], key != "data_wait"),
            pct(b["aa_control"], False) if "aa_control" in b else "",
            pct(b["direct"]) if "direct" in b else "",
            f"<= {pct(b['limit'], False)}",
            verdict,
        )
    console.print(t)


def markdown_report(report: dict[str, Any], command: str) -> str:
    """The tables of :func:`print_report` as Markdown, for experiments/benchmarks/README.md."""
    m, head, cfg = report["machine"], report["headline"], report["config"]
    lines = [
        f"Machine: {m['cpu']} (`lscpu` model name), {m['logical_cpus']} logical CPUs, torch {m['torch']} at "
        f"{m['torch_threads']} threads, Lightning {m['lightning']}, device {m.get('gpu', m['device'])}. Load average "
        f"{m['load_avg_start'][0]:.2f} at start, {m['load_avg_end'][0]:.2f} at end; wall time {report['wall_time_s']:.0f} s.",
        "",
        f"Command: `{command}`",
        "",
        f"Peak: {report['peak_flops'] / 1e9:.1f} GFLOP/s ({report['peak_flops_source']})."
        if report["peak_flops"]
        else "Peak: unknown.",
        "",
        f"**Training speed** (`{head['variant']}`, {cfg['tokens_per_step']} tokens per step)",
        "",
        "| metric | value |",
        "| --- | --- |",
        f"| tokens/s, our loop / hand-written loop | {head['tokens_per_sec']:,.0f} / {head.get('hand_loop_tokens_per_sec') or float('nan'):,.0f} |",
        f"| median step time | {1e3 * head['step_time_median_s']:.1f} ms |",
        f"| model FLOPs per token | {head['flops_per_token'] / 1e6:.2f} M ({head['params']:,} parameters) |",
        f"| achieved | {head['achieved_flops'] / 1e9:.1f} GFLOP/s |",
        f"| MFU, our loop / hand-written loop | {pct(head['mfu'], False)} / {pct(head.get('hand_loop_mfu'), False)} |",
        f"| peak memory ({head['memory_kind']}) | {head['peak_memory_mb']:,.0f} MB ({head['rss_before_model_mb']:,.0f} MB before the model) |",
        f"| data wait per step: median / max / share of step time | {head['data_wait_median_ms']:.2f} ms / "
        f"{head['data_wait_max_ms']:.2f} ms / {pct(head['data_wait_fraction'], False)} |",
        f"| logged `train/tokens_per_sec` (median) | {head['logged_tokens_per_sec']:,.0f}: {pct(head['logged_vs_headline'])} vs "
        f"tokens/s above, {pct(head['logged_vs_timed_same_steps'])} vs the same steps timed |",
    ]
    for cb, ms in (head.get("callback_ms_per_step") or {}).items():
        lines.append(f"| {cb} hooks per step | {ms:.3f} ms |")
    lines += [
        "",
        "**Ratios** (median over rounds of per-round mean step-time ratios; min–max over rounds)",
        "",
        "| group | ratio | of | median | min–max | rounds | load | others' CPU |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for gname, g in report["groups"].items():
        for i, (rname, r) in enumerate(g["ratios"].items()):
            group, load, others = (
                (gname, f"{g['load_avg_1min']:.2f}", pct(g["other_processes_cpu_share"], False))
                if i == 0
                else ("", "", "")
            )
            lines.append(
                f"| {group} | `{rname}` | {r['of']} | {r['median']:.3f} | {r['min']:.3f}–{r['max']:.3f} | "
                f"{len(r['per_round'])} | {load} | {others} |"
            )
    lines += [
        "",
        "**Budgets**",
        "",
        "| budget | measured | A/A control | direct | limit | verdict |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for key, b in report["budgets"].items():
        verdict = (
            "not measured"
            if b["met"] is None
            else "met"
            if b["met"]
            else f"missed by {100 * b['missed_by']:.1f} points"
            + (", within this run's noise (A/A)" if b.get("within_noise") else "")
        )
        lines.append(
            f"| {b['what']} | {pct(b['measured'], key != 'data_wait')} | "
            f"{pct(b['aa_control'], False) if 'aa_control' in b else ''} | {pct(b['direct']) if 'direct' in b else ''} | "
            f"≤ {pct(b['limit'], False)} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)


def main(cfg: DictConfig) -> None:
    """Run the benchmark of a composed ``conf/benchmark.yaml`` config (``scripts/benchmark.py``)."""
    report = Benchmark(cfg).run()
    print_report(report)
    path = Path(cfg.benchmark.json_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(jsonable(report), indent=2))
    command = " ".join(["python scripts/benchmark.py", *report["config"]["overrides"]])
    path.with_suffix(".md").write_text(markdown_report(report, command))
    print(f"wrote {path} and {path.with_suffix('.md').name}")
