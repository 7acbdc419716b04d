"""Figures a person reads at a glance (issue 12, item 8), on hand-made jobs whose numbers are
known: the learning rate drawn at every step although ``train/lr`` was logged every 10 steps,
evenly spaced heat-map columns although the gradient norms were logged every step during warmup
then every 10 steps, a log x axis for learning-rate sweeps, the x axis in tokens and in time,
and attention-map titles without paths. The same on a real sweep: ``tests/analysis/test_analysis.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import QuadMesh

from ablate.analysis.attention import checkpoint_label, map_title
from ablate.analysis.figures.comparisons import loss_vs_lr_figure, metric_vs_axis_figure
from ablate.analysis.figures.curves import validation_figure, warmup_figure
from ablate.analysis.figures.depth import grad_norm_heatmap, uniform_steps
from ablate.analysis.job import Job
from ablate.analysis.runs import Sweep
from ablate.analysis.series import job_x, lr_schedule

LR, WARMUP, MAX_STEPS, MIN_RATIO, LOG_EVERY = 1e-3, 50, 200, 0.1, 10
BATCH, SEQ_LEN = 8, 32


def hand_cosine(step: int, lr: float = LR) -> float:
    """The rate of optimiser step ``step``, written out from the definitions in ablate/optim.py's
    docstrings (linear warmup from (step + 1) / (warmup + 1), then cosine to min_lr_ratio)."""
    if step < WARMUP:
        return lr * (step + 1) / (WARMUP + 1)
    progress = min(1.0, (step - WARMUP) / (MAX_STEPS - WARMUP))
    return lr * (MIN_RATIO + 0.5 * (1 - MIN_RATIO) * (1 + math.cos(math.pi * progress)))


def make_job(
    name: str,
    metrics: dict[str, dict[int, float]],
    overrides: dict[str, str] | None = None,
    lr: float = LR,
    status: str = "completed",
    steps: int = MAX_STEPS,
    **record,
) -> Job:
    config = {
        "task": {"name": "lm"},
        "optim": {
            "lr": lr,
            "schedule": "cosine",
            "warmup_steps": WARMUP,
            "decay_steps": None,
            "min_lr_ratio": MIN_RATIO,
        },
        "trainer": {"max_steps": MAX_STEPS, "log_every_n_steps": LOG_EVERY},
        "data": {"batch_size": BATCH, "seq_len": SEQ_LEN},
    }
    frame = pd.DataFrame(metrics).sort_index()
    frame.index.name = "step"
    return Job(
        name=name,
        source=name,
        overrides=dict(overrides or {}),
        status=status,
        record={"status": status, "steps": steps, **record},
        config=config,
        choices={"task": "lm"},
        metrics=frame,
    )


def logged_every(n: int, fn, last: int = MAX_STEPS) -> dict[int, float]:
    """What Lightning writes with log_every_n_steps=n: steps n-1, 2n-1, ..."""
    return {s: fn(s) for s in range(n - 1, last, n)}


# ----------------------------------------------------------------------------- learning rate


def test_lr_schedule_has_every_step_of_the_warmup():
    job = make_job("a", {"train/lr": logged_every(LOG_EVERY, hand_cosine)})
    assert len(job.series("train/lr")[lambda s: s.index < WARMUP]) == WARMUP // LOG_EVERY  # 5 logged points
    schedule = lr_schedule(job)
    assert list(schedule.index) == list(range(MAX_STEPS))
    warmup = schedule[schedule.index < WARMUP]
    assert list(warmup.index) == list(range(WARMUP))  # one point per step
    assert warmup.to_numpy() == pytest.approx([hand_cosine(s) for s in range(WARMUP)], rel=1e-12)
    assert schedule.to_numpy() == pytest.approx([hand_cosine(s) for s in range(MAX_STEPS)], rel=1e-12)


def test_lr_panel_draws_every_step_with_the_logged_points_on_it():
    job = make_job(
        "a",
        {
            "train/lr": logged_every(LOG_EVERY, hand_cosine),
            "train/loss": logged_every(LOG_EVERY, lambda s: 4.0 - s / 100),
        },
    )
    fig = warmup_figure(Sweep.from_jobs("synthetic", [job]))
    ax = fig.axes[0]
    lines = [ln for ln in ax.get_lines() if len(ln.get_xdata())]
    curve = next(ln for ln in lines if ln.get_marker() in ("None", None, ""))
    dots = next(ln for ln in lines if ln.get_marker() == "o")
    x, y = np.asarray(curve.get_xdata()), np.asarray(curve.get_ydata())
    assert list(x[x <= WARMUP]) == list(range(1, WARMUP + 1))  # one point per warmup step, not 5
    assert y == pytest.approx([hand_cosine(s) for s in range(MAX_STEPS)], rel=1e-12)
    # the rate of the k-th optimiser step (logged at Lightning's step k - 1) is drawn at k
    assert list(dots.get_xdata()) == list(range(LOG_EVERY, MAX_STEPS + 1, LOG_EVERY))


def test_lr_panel_falls_back_to_the_logged_points_when_the_config_disagrees():
    # the run logged another schedule than its config describes (e.g. max_steps changed on resume)
    job = make_job("a", {"train/lr": logged_every(LOG_EVERY, lambda s: 2 * hand_cosine(s))})
    ax = warmup_figure(Sweep.from_jobs("synthetic", [job])).axes[0]
    drawn = [ln for ln in ax.get_lines() if len(ln.get_xdata())]
    assert all(ln.get_marker() == "o" for ln in drawn)  # no recomputed line
    assert any("does not match" in t.get_text() for t in ax.texts)


# ----------------------------------------------------------------------------- log x for learning rates


def _lr_sweep(rates: list[float]) -> Sweep:
    jobs = []
    for norm, offset in (("pre", 0.0), ("post", 0.2)):
        for lr in rates:
            for seed in (1, 2):
                loss = {s: 3.0 + offset + abs(math.log10(lr) + 3) / 2 + seed / 100 for s in (99, 199)}
                jobs.append(
                    make_job(
                        f"{norm}-{lr}-{seed}",
                        {"val/loss": loss, "val/ppl": {s: math.exp(v) for s, v in loss.items()}},
                        {"norm": norm, "optim.lr": f"{lr:g}", "seed": str(seed)},
                        lr=lr,
                    )
                )
    jobs.append(
        make_job(
            "post-1-1",
            {"val/loss": {99: float("nan")}},
            {"norm": "post", "optim.lr": "1", "seed": "1"},
            lr=1.0,
            status="diverged",
            steps=120,
        )
    )
    return Sweep.from_jobs("synthetic", jobs)


def test_lr_sweep_figures_have_a_log_x_axis():
    sweep = _lr_sweep([1e-4, 1e-3, 1e-2])
    tuning = loss_vs_lr_figure(sweep)
    ax = tuning.axes[0]
    assert ax.get_xscale() == "log"
    assert metric_vs_axis_figure(sweep, "optim.lr", "val/loss").axes[0].get_xscale() == "log"
    # one line per variant of the other axes: mean over the two seeds, std as the error bar
    table = tuning.table
    pre = table[(table["line"] == "norm=pre") & (table["x"] == 1e-3)].iloc[0]
    assert pre["mean"] == pytest.approx(3.015) and pre["std"] == pytest.approx(np.std([3.01, 3.02], ddof=1))
    assert list(table["failed"][table["x"] == 1.0]) == [1]  # the diverged rate is kept and marked
    crosses = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert [list(ln.get_xdata()) for ln in crosses] == [[1.0]]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["0.0001", "0.001", "0.01", "1"]


def test_narrow_lr_sweep_keeps_a_linear_axis():
    sweep = _lr_sweep([1e-3, 2e-3, 4e-3])
    sweep.jobs = [j for j in sweep.jobs if j.status == "completed"]  # 1e-3 .. 4e-3: less than 10x
    assert loss_vs_lr_figure(sweep, "optim.lr").axes[0].get_xscale() == "linear"


# ----------------------------------------------------------------------------- heat map


def test_grad_norm_heatmap_columns_are_evenly_spaced():
    steps = list(range(20)) + list(range(20, 80, 10))  # dense during warmup, then every 10 steps
    jobs = []
    for norm in ("pre", "post"):
        metrics = {
            f"grad_norm/layer_{layer:02d}/attn": {s: (layer + 1) * 10.0 + s for s in steps} for layer in range(3)
        }
        jobs.append(make_job(norm, metrics, {"norm": norm}))
    assert list(uniform_steps(np.array(steps))) == list(range(0, 80, 10))
    fig = grad_norm_heatmap(Sweep.from_jobs("synthetic", jobs))
    panels = [ax for ax in fig.axes if ax.get_title()]  # not the colour bar
    meshes = [c for ax in panels for c in ax.collections if isinstance(c, QuadMesh)]
    assert len(meshes) == 2
    for mesh in meshes:
        edges = np.asarray(mesh.get_coordinates())[0, :, 0]
        assert list(np.diff(edges)) == pytest.approx([10.0] * 8)  # uniform columns
        values = np.ma.getdata(mesh.get_array()).reshape(3, 8)  # layers x columns
        centres = (edges[:-1] + edges[1:]) / 2
        assert list(centres) == list(range(1, 81, 10))  # at optimiser steps done: metrics.csv step + 1
        assert list(values[1]) == pytest.approx(
            [20.0 + s for s in range(0, 80, 10)]
        )  # the values logged at those steps


# ----------------------------------------------------------------------------- x axis


def test_a_validation_is_drawn_at_the_step_the_console_printed():
    """Issue 35 item 10: debug=smoke validates after optimiser steps 2 and 4 (the console's "val 2/4",
    "val 4/4"); Lightning logs them at metrics.csv steps 1 and 3 (the index of the last step). The
    steps axis counts optimiser steps done, as the console, status.json and --basis steps do."""
    job = make_job("a", {"val/loss": {1: 4.036, 3: 3.963}})
    ax = validation_figure(Sweep.from_jobs("synthetic", [job]), "steps").axes[0]
    line = next(ln for ln in ax.get_lines() if len(ln.get_xdata()))
    assert list(line.get_xdata()) == [2, 4] and ax.get_xlabel() == "optimiser step"


def test_x_tokens_is_step_times_tokens_per_step():
    job = make_job("a", {"val/loss": {49: 3.0, 99: 2.5, 149: 2.2, 199: 2.0}})
    steps = job.series("val/loss").index.to_numpy()
    tokens, source = job_x(job, steps, "tokens")
    assert list(tokens) == [(s + 1) * BATCH * SEQ_LEN for s in steps]  # step s is the (s + 1)-th optimiser step
    assert "256 tokens per step" in source
    ax = validation_figure(Sweep.from_jobs("synthetic", [job]), "tokens").axes[0]
    line = next(ln for ln in ax.get_lines() if len(ln.get_xdata()))
    assert list(line.get_xdata()) == [(s + 1) * BATCH * SEQ_LEN for s in steps]
    assert ax.get_xlabel().startswith("training tokens")


def test_x_tokens_of_a_translation_job_uses_tokens_seen():
    job = make_job("a", {"train/tokens_seen": {9: 1000.0, 19: 2100.0}, "val/loss": {19: 3.0}})
    job.config["task"], job.choices["task"] = {"name": "translation"}, "translation"  # token-budget batches
    tokens, source = job_x(job, [9, 14, 19], "tokens")
    assert list(tokens) == pytest.approx([1000.0, 1550.0, 2100.0]) and source == "train/tokens_seen"
    job.metrics = job.metrics.drop(columns="train/tokens_seen")
    with pytest.raises(ValueError, match="tokens_seen"):
        job_x(job, [9], "tokens")


def test_x_time_from_time_s_else_from_the_rate_else_the_wall_time():
    job = make_job(
        "a",
        {"train/time_s": {9: 2.0, 19: 5.0}, "train/tokens_per_sec": {9: 100.0, 19: 50.0}},
        steps=20,
        wall_time_s=60.0,
    )
    assert list(job_x(job, [9, 19], "time")[0]) == pytest.approx([2.0, 5.0])
    job.metrics = job.metrics.drop(columns="train/time_s")
    # 256 tokens per step: steps 0-9 at 100 tokens/s (2.56 s each), steps 10-19 at 50 (5.12 s each)
    times, source = job_x(job, [0, 9, 19], "time")
    assert list(times) == pytest.approx([2.56, 25.6, 25.6 + 51.2]) and "tokens_per_sec" in source
    job.metrics = job.metrics.drop(columns="train/tokens_per_sec")
    times, source = job_x(job, [9, 19], "time")
    assert list(times) == pytest.approx([30.0, 60.0]) and "wall_time_s" in source


# ----------------------------------------------------------------------------- attention titles


def test_attention_title_names_the_run_and_checkpoint_not_the_path():
    path = "/very/long/home/logs/multirun/2026-11-22/seed=1,norm=pre,model=tiny/checkpoints/best.ckpt"
    assert checkpoint_label(path) == "seed=1,norm=pre,model=tiny/best.ckpt"
    title = map_title("self-attention", "pos=rope, norm=pre", path)
    assert "/very" not in title and "multirun" not in title and "checkpoints" not in title
    assert "run seed=1,norm=pre,model=tiny" in title and "best.ckpt" in title
    long_run = ",".join(f"key{i}=value{i}" for i in range(20))
    assert all(len(line) <= 100 for line in map_title("x", "m", f"/a/{long_run}/checkpoints/last.ckpt").splitlines())


def test_seed_mean_steps_are_in_order_when_seeds_logged_different_steps():
    from ablate.analysis.figures.common import seed_mean

    a = make_job("a", {"train/loss": {9: 4.0, 12: 40.0, 13: 47.0}}, status="diverged", steps=14)
    b = make_job("b", {"train/loss": {9: 4.2, 11: 30.0}}, status="diverged", steps=12)
    stats = seed_mean([a, b], "train/loss")
    assert list(stats.index) == [9, 11, 12, 13]  # a line drawn through them never runs backwards
    assert list(stats["n"]) == [2, 1, 1, 1] and stats.loc[9, "mean"] == pytest.approx(4.1)
