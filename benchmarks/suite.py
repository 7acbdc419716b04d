"""The benchmark run: every configured group's variants composed and run round-robin in rounds,
the ratios between them, the headline variant's speed, MFU and memory, the budgets checked
(:mod:`benchmarks.budgets`), and :func:`main`, which writes ``benchmark.json`` and its Markdown summary."""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

import ablate  # noqa: F401  (registers the config resolvers)
from ablate.callbacks.throughput import device_peak_flops, measure_cpu_peak
from ablate.config.checks import matmul_precision
from ablate.nn.axes import spec_axes
from ablate.nn.flops import flops_per_token
from ablate.run.assembly import build_datamodule
from ablate.run.config import RunConfig
from ablate.run.plan import check_config
from benchmarks.budgets import check_budgets
from benchmarks.loops import HandLoop, LightningLoop, Runner, Variant
from benchmarks.machine import CpuShare, machine_info, peak_rss_mb, rss_mb
from benchmarks.report import jsonable, markdown_report, print_report


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
        variants.append(Variant(name, str(vname), loop, overrides, cfg, check_config(cfg)))
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


def selected_groups(bench: DictConfig) -> dict[str, Any]:
    """The groups this run measures: those ``benchmark.only`` names (a group switched off by default,
    as ``compile``, included: naming it is asking for it), else every enabled one."""
    if bench.only:
        unknown = sorted(set(bench.only) - set(bench.groups))
        if unknown:
            raise ValueError(f"benchmark.only={list(bench.only)}: no group {unknown}; the groups: {list(bench.groups)}")
        return {k: v for k, v in bench.groups.items() if k in bench.only}
    return {k: v for k, v in bench.groups.items() if v.get("enabled", True)}


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

    def setup_data(self) -> None:
        cfg = self.cfg
        self.datamodule = build_datamodule(RunConfig.of(cfg))  # as train.py builds it
        self.tokens_per_step = cfg.data.batch_size * cfg.data.seq_len

    def make_runner(self, variant: Variant) -> Runner:
        cls = LightningLoop if variant.loop == "lightning" else HandLoop
        return cls(variant, self.datamodule, self.device, self.max_steps)

    def run_group(
        self, name: str, spec: DictConfig, on_built: Callable[[Runner], None] | None = None
    ) -> dict[str, Any]:
        """Build the group's variants, warm each up, then time them round-robin in rounds (each
        round starts with the next variant; within a round the variants take turns of a few steps,
        so that the steps compared are close in time); their times, ratios and the machine's load."""
        variants = parse_variants(name, spec)
        ratios = parse_ratios(name, spec, [v.name for v in variants])
        steps, rounds = int(spec.get("steps", 4)), int(spec.get("rounds") or self.bench.rounds)
        warmup = int(spec.get("warmup_steps") or self.bench.warmup_steps)
        print(f"[{name}] building {len(variants)} variants: {', '.join(v.name for v in variants)}", flush=True)
        share = CpuShare()
        start = time.perf_counter()
        runners: list[Runner] = []
        try:
            self._build_runners(variants, warmup, on_built, runners)
            results = {r.variant.name: Result(r.variant) for r in runners}
            first_timed_step = _start_timing(runners)
            turn = max(1, min(steps, int(spec.get("turn_steps") or self.bench.turn_steps)))
            if self.device.type == "cuda":
                # a turn is the round's steps: the GPU gets them queued back to back, as in training,
                # with one sync at the end (Runner.boundary); a quiet GPU needs no finer interleaving
                turn = steps
            turns = [turn] * (steps // turn) + ([steps % turn] if steps % turn else [])
            for rnd in range(rounds):
                _timed_round(name, rnd, rounds, runners, turns, results)
            for runner in runners:
                self._collect(runner, results[runner.variant.name], first_timed_step, rounds * steps)
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
            "variants": {vname: self._variant_report(res) for vname, res in results.items()},
            "ratios": {},
        }
        for rname, (a, b) in ratios.items():
            per_round = [x / y for x, y in zip(results[a].round_means, results[b].round_means)]
            out["ratios"][rname] = {"of": f"{a} / {b}", **summarise(per_round), "per_round": per_round}
        self.results[name] = results
        return out

    def _build_runners(
        self, variants: list[Variant], warmup: int, on_built: Callable[[Runner], None] | None, runners: list[Runner]
    ) -> None:
        """Build, start and warm up each variant in turn, into ``runners`` (the caller's list, so that
        the runners built before a failure are closed all the same)."""
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

    def _collect(self, runner: Runner, res: Result, first_timed_step: dict[str, int], timed_steps: int) -> None:
        """What ``runner`` measured besides its step times: its data waits, the Lightning loop's
        logged throughput and its callbacks' time per step, the model's size and spec."""
        res.waits = list(runner.loader.waits)
        if isinstance(runner, LightningLoop):
            res.extra["logged_tokens_per_sec"] = runner.logged_tokens_per_sec(
                first_timed_step[runner.variant.name], self.tokens_per_step
            )
            if runner.hook_time:
                res.extra["callback_ms_per_step"] = {k: 1e3 * v / timed_steps for k, v in runner.hook_time.items()}
        res.extra["n_params"] = runner.n_params
        res.extra["spec"] = runner.spec

    def _variant_report(self, res: Result) -> dict[str, Any]:
        """One variant's step times, throughput and data wait, for the report."""
        mean_step = statistics.median(res.round_means)
        return {
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

    def run(self) -> dict[str, Any]:
        cfg, bench = self.cfg, self.bench
        t0 = time.perf_counter()
        _quiet_runtime(cfg)
        report: dict[str, Any] = {"machine": machine_info(self.device)}
        self.setup_data()
        groups = selected_groups(bench)
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

        how = self._first_peak()
        memory["rss_before_model_mb"] = rss_mb()

        report["groups"] = {}
        for name, spec in groups.items():
            report["groups"][name] = self.run_group(name, spec, after_build if name == head_group else None)
            if self.probes:
                self.probe_peak(3)
        report["peak_flops"], report["peak_flops_source"] = self.peak_flops, how
        report["peak_flops_probes"] = self.probes
        report["headline"] = self.headline(head_group, head_variant, memory)
        report["budgets"] = check_budgets(report, self.bench.budgets)
        report["config"] = self._config_summary()
        report["machine"]["load_avg_end"] = list(os.getloadavg())
        report["wall_time_s"] = round(time.perf_counter() - t0, 1)
        return report

    def _first_peak(self) -> str:
        """The device's peak (``self.peak_flops``): given, nominal (GPU), or measured (CPU: before any
        model exists, and again after every group; the best probe counts, as a moment of
        interference only ever makes a probe slower). Returns where it came from."""
        bench = self.bench
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
        return how

    def _config_summary(self) -> dict[str, Any]:
        """The configuration the report measured: overrides, model, axes, batch, trainer."""
        cfg = self.cfg
        return {
            "overrides": list(HydraConfig.get().overrides.task),
            "model": OmegaConf.to_container(cfg.model, resolve=True),
            "axes": spec_axes(self.headline_spec) if self.headline_spec else None,
            "seq_len": cfg.data.seq_len,
            "batch_size": cfg.data.batch_size,
            "tokens_per_step": self.tokens_per_step,
            "trainer": {k: cfg.trainer.get(k) for k in ("accelerator", "precision", "log_every_n_steps")},
        }

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


def _quiet_runtime(cfg: DictConfig) -> None:
    """The runtime settings of ``train.py`` (flush denormals, matmul precision), and none of the
    messages the benchmark's own loops would print on every variant."""
    if cfg.runtime.flush_denormal:
        torch.set_flush_denormal(True)  # as train.py; every variant sets its own in its thread
    torch.set_float32_matmul_precision(matmul_precision(cfg))
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*isinstance.treespec, LeafSpec.*")
    warnings.filterwarnings("ignore", ".*defined a `validation_step` but have no `val_dataloader`.*")


def _start_timing(runners: list[Runner]) -> dict[str, int]:
    """Forget the warm-up: data waits and callback times count from here on. Returns the Lightning
    loops' first timed step (their logged throughput is read from there)."""
    first_timed_step: dict[str, int] = {}
    for runner in runners:
        runner.loader.waits.clear()
        if isinstance(runner, LightningLoop):
            first_timed_step[runner.variant.name] = runner.step
            runner.hook_time = dict.fromkeys(runner.hook_time, 0.0)
    return first_timed_step


def _timed_round(
    name: str, rnd: int, rounds: int, runners: list[Runner], turns: list[int], results: dict[str, Result]
) -> None:
    """Round ``rnd``: starting with variant ``rnd`` (rotated), the variants take turns of ``turns``
    steps (A B C A B C ...: the steps compared are close in time); each variant's step times and
    round mean go to ``results``."""
    order = runners[rnd % len(runners) :] + runners[: rnd % len(runners)]
    in_round: dict[str, list[float]] = {r.variant.name: [] for r in runners}
    for k in turns:
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
