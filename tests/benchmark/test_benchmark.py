"""scripts/benchmark.py runs end to end and reports every field; the instrumentation it measures
stays correct. No timing assertions: speed is what the benchmark reports, not what CI checks."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from ablate.callbacks import throughput
from ablate.callbacks.grad_norm import GradNormMonitor
from ablate.callbacks.throughput import ThroughputMonitor, nominal_peak_flops
from ablate.data.lm_windows import TokenWindows, WindowBatch, collate_windows
from ablate.nn.flops import flops_per_token
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT

pytestmark = pytest.mark.integration  # every test reads one benchmark run (a subprocess)


REPO = Path(__file__).resolve().parents[2]
ROUNDS = 2
TINY = [
    "model=tiny",
    "data.seq_len=16",
    "data.batch_size=4",
    f"benchmark.rounds={ROUNDS}",
    f"benchmark.groups.loop.rounds={ROUNDS}",
    "benchmark.warmup_steps=1",
    "benchmark.peak_matmul_size=256",
    "benchmark.peak_matmul_repeats=2",
]
HEADLINE_FIELDS = {
    "tokens_per_sec",
    "step_time_median_s",
    "step_time_mean_s",
    "flops_per_token",
    "achieved_flops",
    "mfu",
    "peak_memory_mb",
    "memory_kind",
    "rss_before_model_mb",
    "data_wait_median_ms",
    "data_wait_max_ms",
    "data_wait_fraction",
    "logged_tokens_per_sec",
    "logged_mfu",
    "callback_ms_per_step",
    "hand_loop_tokens_per_sec",
    "hand_loop_mfu",
    "params",
    "tokens_per_step",
}


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> dict:
    data_dir = request.getfixturevalue("data_dir")
    tmp = tmp_path_factory.mktemp("benchmark")
    env = {
        **os.environ,
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(tmp / "cache"),
        "WANDB_MODE": "disabled",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
    }
    json_path = tmp / "out" / "bench.json"
    proc = forked_python.run(
        [
            sys.executable,
            str(REPO / "scripts" / "benchmark.py"),
            *TINY,
            f"benchmark.json_path={json_path}",
            f"paths.log_dir={tmp / 'logs'}",
        ],
        cwd=tmp,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 0, f"benchmark failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    for title in ("Training speed", "Side-by-side ratios", "Budgets"):
        assert title in proc.stdout
    return json.loads(json_path.read_text())


def positive(x) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def test_machine_and_peak(report: dict) -> None:
    m = report["machine"]
    assert m["cpu"] and m["logical_cpus"] >= 1 and m["torch_threads"] >= 1 and m["torch"] == torch.__version__
    assert len(m["load_avg_start"]) == 3 and len(m["load_avg_end"]) == 3
    assert positive(report["peak_flops"]) and "matmul" in report["peak_flops_source"]
    assert report["config"]["tokens_per_step"] == 4 * 16 and "model=tiny" in report["config"]["overrides"]


def test_headline(report: dict) -> None:
    head = report["headline"]
    assert set(head) >= HEADLINE_FIELDS, HEADLINE_FIELDS - set(head)
    assert head["variant"] == "loop.lightning"
    for key in (
        "tokens_per_sec",
        "step_time_median_s",
        "flops_per_token",
        "mfu",
        "peak_memory_mb",
        "logged_tokens_per_sec",
        "hand_loop_tokens_per_sec",
    ):
        assert positive(head[key]), key
    assert head["flops_per_token"] == flops_per_token(head["params"], 2, 32, 16)  # model=tiny: 2 layers, d=32
    assert head["mfu"] < 1 and head["peak_memory_mb"] > head["rss_before_model_mb"] > 0
    assert head["tokens_per_sec"] == pytest.approx(16 * 4 / head["step_time_mean_s"])
    assert 0 <= head["data_wait_median_ms"] <= head["data_wait_max_ms"] and 0 <= head["data_wait_fraction"] < 1
    assert set(head["callback_ms_per_step"]) == {
        "GradNormMonitor",
        "ResidualRMSMonitor",
        "ThroughputMonitor",
        "DivergenceMonitor",
        "GracefulInterrupt",
        "EMA",
    }


def test_groups_and_ratios(report: dict) -> None:
    groups = report["groups"]
    assert set(groups) == {"loop", "attention", "ablations", "denormal"}  # compile is off by default
    assert set(groups["loop"]["variants"]) == {
        "lightning",
        "hand",
        "hand_again",
        "grad_norm_off",
        "grad_norm_every_step",
    }
    assert {"rope", "alibi", "relu", "swiglu", "bilinear", "rmsnorm"} <= set(groups["ablations"]["ratios"])
    assert set(groups["denormal"]["ratios"]) == {
        "post_vs_pre_flush",
        "post_vs_pre_no_flush",
        "post_no_flush_vs_flush",
        "pre_no_flush_vs_flush",
    }
    assert groups["attention"]["ratios"]["math_vs_sdpa"]["of"] == "math / sdpa"
    for name, group in groups.items():
        assert group["rounds"] == ROUNDS and group["load_avg_1min"] >= 0
        for vname, v in group["variants"].items():
            assert positive(v["tokens_per_sec"]) and positive(v["step_time_median_s"]), (name, vname)
            assert v["loop"] in ("hand", "lightning")
        for rname, r in group["ratios"].items():
            assert len(r["per_round"]) == ROUNDS and r["min"] <= r["median"] <= r["max"], (name, rname)
            assert all(positive(x) for x in r["per_round"])
    # the same model in both loops, and the variants really differ where they should
    loop = groups["loop"]["variants"]
    assert loop["lightning"]["params"] == loop["hand"]["params"]
    abl = groups["ablations"]["variants"]
    assert abl["rope"]["params"] < abl["baseline"]["params"]  # no learned position table


def test_budgets(report: dict) -> None:
    budgets = report["budgets"]
    assert set(budgets) == {
        "framework_overhead",
        "grad_norm_default_interval",
        "grad_norm_every_step",
        "data_wait",
        "logged_tokens_per_sec",
    }
    for key, b in budgets.items():
        assert isinstance(b["measured"], float) and isinstance(b["met"], bool), key
        assert (b["missed_by"] is None) == b["met"], key
        assert b["limit"] > 0 and b["what"]
    for key in ("framework_overhead", "grad_norm_default_interval", "grad_norm_every_step"):
        assert budgets[key]["aa_control"] >= 0 and isinstance(budgets[key]["within_noise"], bool)
    for key in ("grad_norm_default_interval", "grad_norm_every_step"):
        assert 0 < budgets[key]["direct"] < 1


# --- the instrumentation the benchmark measures ----------------------------------------------


def test_nominal_gpu_peaks() -> None:
    assert nominal_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert nominal_peak_flops("NVIDIA H100 PCIe") == 756e12
    assert nominal_peak_flops("NVIDIA A100-SXM4-80GB") == 312e12
    assert nominal_peak_flops("NVIDIA L4") == 121e12 and nominal_peak_flops("NVIDIA L40S") == 362e12
    assert nominal_peak_flops("Some Future Card") is None


def test_throughput_leaves_out_pauses(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(throughput, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    monitor = ThroughputMonitor(window=4)
    trainer = SimpleNamespace(world_size=1)
    batch = (torch.zeros(2, 8), torch.zeros(2, 8))  # 16 tokens a step
    for step in range(6):
        monitor.on_train_batch_start(trainer, None, batch, step)
        clock.now += 0.5  # every step takes 0.5 s
        if step == 2:
            monitor.pause()  # e.g. a validation pass or another benchmark variant: 100 s
            clock.now += 100.0
    assert monitor.rate() == pytest.approx(16 / 0.5)


def test_grad_norm_with_some_gradients_missing() -> None:
    torch.manual_seed(0)
    model = torch.nn.ModuleDict({"tok_emb": torch.nn.Embedding(10, 4), "head": torch.nn.Linear(4, 3)})
    monitor = GradNormMonitor(every_n_steps=1)
    monitor.setup(None, model, "fit")
    model["head"](model["tok_emb"](torch.arange(5))).sum().backward()
    full = monitor.compute()
    assert full["grad_norm/embed"] == pytest.approx(model["tok_emb"].weight.grad.norm().item(), rel=1e-5)
    head = torch.cat([model["head"].weight.grad.flatten(), model["head"].bias.grad])
    assert full["grad_norm/head"] == pytest.approx(head.norm().item(), rel=1e-5)
    model["tok_emb"].weight.grad = None  # e.g. a frozen embedding
    partial = monitor.compute()
    assert set(partial) == {"grad_norm/head", "grad_norm/total"}
    assert partial["grad_norm/total"] == pytest.approx(head.norm().item(), rel=1e-5)


def test_batched_window_fetch_matches_single(tmp_path: Path) -> None:
    tokens = np.arange(1000, dtype=np.uint16)
    path = tmp_path / "train.bin"
    tokens.tofile(path)
    ds = TokenWindows(path, np.uint16, seq_len=16, stride=3)
    indices = [5, 0, len(ds) - 1, 17]
    batch = ds.__getitems__(indices)
    assert isinstance(batch, WindowBatch) and len(batch) == 4
    x, y = collate_windows(batch)
    assert x.is_contiguous() and y.is_contiguous() and x.dtype == torch.int64
    for row, i in enumerate(indices):
        assert torch.equal(x[row], ds[i][0]) and torch.equal(y[row], ds[i][1])
    x2, y2 = torch.utils.data.default_collate(batch)  # a loader without collate_windows builds the same batch
    assert torch.equal(x2, x) and torch.equal(y2, y)
    with pytest.raises(IndexError):
        ds.__getitems__([0, len(ds)])
