"""Sweep analysis: summary table, figures and attention maps, on one real (tiny) multirun.

The session's sweep: ``norm=pre,post`` x ``seed=1,2`` (4 jobs, pos=rope, grouped-query attention
trained with ``attn=sdpa``, scored at two evaluation lengths with ``eval.seq_lens=[16,32]``), plus
one job appended to the same directory with ``optim.lr=1e4``, which diverges (so ``optim.lr`` is a
numeric axis with a diverged point). The table's and the figures' numbers are checked against a
hand computation from the jobs' own ``metrics.csv`` files, read here with the ``csv`` module, not
with the code under test.
"""

from __future__ import annotations

import csv
import importlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import yaml
from PIL import Image

from ablate.analysis.attention import lm_attention, translation_attention
from ablate.analysis.job import Job, canonical, read_metrics_csv
from ablate.analysis.markdown import markdown_table
from ablate.analysis.paper import load_paper
from ablate.analysis.runs import Sweep, load_sweep
from ablate.analysis.series import (
    axis_series,
    is_stuck,
    length_series,
    numeric_axes,
    paper_rank_correlation,
    paper_series,
    spearman,
    training_length,
)
from ablate.analysis.tables import summarize
from ablate.analysis.wandb_group import WandbUnavailable, overrides_from_name, require_online
from ablate.nn.seq2seq import EncoderDecoder
from ablate.nn.spec import ModelSpec
from ablate.nn.transformer import TransformerLM
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO, TINY

pytestmark = pytest.mark.slow
ARCH = ["pos=rope", "attn=sdpa", "attn.n_kv_heads=2", "logger=csv", "eval.seq_lens=[16,32]"]


def _train(args: list[str], cwd: Path, data_dir: Path) -> None:
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(cwd / "cache"),
        "WANDB_SILENT": "true",
        "OMP_NUM_THREADS": "1",
    }
    proc = forked_python.run(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 0, f"train.py failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"


@pytest.fixture(scope="session")
def sweep_dir(tmp_path_factory, data_dir: Path) -> Path:
    """A 2 variants x 2 seeds sweep plus one diverging job in the same directory; test/ppl@16 and
    test/ppl@32 for the jobs that complete."""
    root = tmp_path_factory.mktemp("analysis")
    sweep = root / "sweep"
    common = ["-m", f"paths.log_dir={root / 'logs'}", f"hydra.sweep.dir={sweep}", *TINY, *ARCH]
    _train([*common, "norm=pre,post", "seed=1,2"], root, data_dir)
    _train([*common, "norm=post", "seed=3", "optim.lr=10000"], root, data_dir)  # appended: diverges
    return sweep


def _hand_final(job_dir: Path, metric: str) -> float:
    with open(job_dir / "csv" / "metrics.csv") as f:
        values = [float(row[metric]) for row in csv.DictReader(f) if row.get(metric)]
    return values[-1]


def _job_dirs(sweep: Path, **axes: str) -> list[Path]:
    found = []
    for job in sweep.iterdir():
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()) if (job / ".hydra").is_dir() else []
        if all(f"{k}={v}" in overrides for k, v in axes.items()) and not any(
            o.startswith("optim.lr=") for o in overrides
        ):
            found.append(job)
    return found


COMMANDS = {
    "summarize": "ablate.analysis.commands.summarize",
    "plot": "ablate.analysis.commands.plot",
    "compute_multiplier": "ablate.analysis.commands.multiplier",
    "declare": "ablate.analysis.commands.declare",
    "halving_replay": "benchmarks.lr_selection.halving_replay",
}


def _load_script(name: str):
    """The package module behind ``scripts/<name>.py`` (the scripts are thin entry points)."""
    return importlib.import_module(COMMANDS[name])


# ----------------------------------------------------------------------------- summary


def test_summary_rows_match_a_hand_computation(sweep_dir: Path):
    sweep = load_sweep(sweep_dir)
    assert sweep.axes == ["norm", "optim.lr"]  # seed is not an axis; the appended job's lr is
    assert [sweep.label(k) for k in sweep.variants()] == [
        "norm=pre, lr=0.002",
        "norm=post, lr=0.002",
        "norm=post, lr=10000",
    ]
    frame = summarize(sweep)
    assert frame.attrs["metric"] == "val/ppl" and frame.attrs["test"] == "test/ppl"
    assert len(frame) == 3  # pre, post, post with lr=1e4
    for norm in ("pre", "post"):
        row = frame[(frame["norm"] == norm) & (frame["optim.lr"] == canonical("0.002"))].iloc[0]
        jobs = _job_dirs(sweep_dir, norm=norm)
        finals = [_hand_final(j, "val/ppl") for j in jobs]
        assert row["seeds"] == 2 and row["completed"] == 2 and row["diverged"] == 0 and row["seed_values"] == "1,2"
        assert row["val/ppl final mean"] == pytest.approx(statistics.mean(finals), rel=1e-9)
        assert row["val/ppl final std"] == pytest.approx(statistics.stdev(finals), rel=1e-9)
        assert row["test/ppl mean"] == pytest.approx(
            statistics.mean(_hand_final(j, "test/ppl") for j in jobs), rel=1e-9
        )
        assert row["steps_min"] == row["steps_max"] == 6
        walls = [json.loads((j / "status.json").read_text())["wall_time_s"] for j in jobs]
        assert row["wall_time_s"] == pytest.approx(statistics.mean(walls))


def test_diverged_job_is_reported_diverged(sweep_dir: Path):
    sweep = load_sweep(sweep_dir)
    frame = summarize(sweep)
    row = frame[frame["optim.lr"] == "10000"].iloc[0]
    assert row["norm"] == "post" and row["seeds"] == 1 and row["diverged"] == 1 and row["completed"] == 0
    assert row["steps_max"] < 6  # stopped early
    table = markdown_table(frame, sweep)
    diverged_line = next(line for line in table.splitlines() if line.startswith("| post | 10000 |"))
    assert "yes (1/1)" in diverged_line
    lines = table.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| norm |") and "| diverged |" in line)
    column = [c.strip() for c in lines[start].split("|")].index("diverged")
    rows = lines[start + 2 : start + 5]  # the summary table's three rows
    cells = [line.split("|")[column].strip() for line in rows]
    assert sorted(cells) == ["no", "no", "yes (1/1)"]  # the diverged column, whichever columns precede it


def test_crashed_job_is_shown_not_dropped(sweep_dir: Path, tmp_path: Path):
    copy = tmp_path / "sweep"
    shutil.copytree(sweep_dir, copy, ignore=shutil.ignore_patterns("checkpoints", "wandb"))
    crashed = copy / "norm=pre,seed=3"  # what Hydra leaves of a job that crashed: its .hydra/ and status.json
    shutil.copytree(_job_dirs(sweep_dir, norm="pre", seed="1")[0] / ".hydra", crashed / ".hydra")
    (crashed / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["norm=pre", "seed=3", *TINY, *ARCH]))
    (crashed / "status.json").write_text(
        json.dumps({"status": "crashed", "error": "RuntimeError: out of memory", "overrides": ["norm=pre", "seed=3"]})
    )
    sweep = load_sweep(copy)
    frame = summarize(sweep)
    row = frame[(frame["norm"] == "pre") & (frame["optim.lr"] != "10000")].iloc[0]
    assert row["seeds"] == 3 and row["crashed"] == 1 and row["completed"] == 2
    table = markdown_table(frame, sweep)
    assert "crashed" in table.splitlines()[0] and "1/3" in table and "RuntimeError: out of memory" in table


def test_summarize_script_writes_table_and_paper_column(sweep_dir: Path, tmp_path: Path):
    paper = tmp_path / "paper.yaml"
    paper.write_text(
        yaml.safe_dump(
            {
                "source": "A et al. 2020, Table 1",
                "metric": "val/ppl",
                "rows": [
                    {"axes": {"norm": "pre"}, "value": 12.5},
                    {"axes": {"norm": "post", "optim.lr": "1e4"}, "value": "diverged"},
                ],
            }
        )
    )
    out = tmp_path / "out"
    proc = forked_python.run(
        [
            sys.executable,
            str(REPO / "scripts" / "summarize.py"),
            str(sweep_dir),
            "--paper",
            str(paper),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("| ") and "paper val/ppl" in lines[0] and "val/ppl final" in lines[0]
    assert lines[0].startswith("| norm | lr | seeds |")
    pre = next(line for line in lines if line.startswith("| pre | 0.002 |"))
    post = next(line for line in lines if line.startswith("| post | 0.002 |"))
    assert "| 12.5 |" in pre and "±" in pre  # 2 seeds: mean ± std
    assert "| — |" in post  # the paper row with lr=1e4 must not match the default lr
    assert any("| diverged |" in line and "10000" in line for line in lines)
    assert "A et al. 2020, Table 1" in proc.stdout
    assert (out / "summary.md").read_text().startswith(lines[0])
    with open(out / "summary.csv") as f:
        assert len(list(csv.DictReader(f))) == 3


def test_paper_csv_format(tmp_path: Path):
    path = tmp_path / "paper.csv"
    path.write_text("norm,optim.lr,metric,value,source\npre,1e-3,test/bleu,35.2,X 2020\npost,,test/bleu,34.1,X 2020\n")
    paper = load_paper(path)
    assert paper.metric == "test/bleu" and paper.source == "X 2020"
    assert paper.rows[0].axes == {"norm": "pre", "optim.lr": "0.001"} and paper.rows[1].axes == {"norm": "post"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("rows: []\n")
    with pytest.raises(ValueError, match="metric"):
        load_paper(bad)


def test_unknown_metric_names_the_logged_ones(sweep_dir: Path):
    with pytest.raises(ValueError, match="val/ppl"):
        summarize(load_sweep(sweep_dir), "val/bleu")


def test_wandb_offline_fails_fast_with_a_clear_message(monkeypatch, capsys):
    monkeypatch.setenv("WANDB_MODE", "offline")
    with pytest.raises(WandbUnavailable, match="offline"):
        require_online()
    with pytest.raises(SystemExit) as exit_info:
        _load_script("summarize").main(["--wandb", "me/ablate", "--group", "sweep"])
    assert "cannot read from W&B" in str(exit_info.value) and "local sweep directory" in str(exit_info.value)


def test_helpers():
    assert canonical("1e-3") == canonical("0.001") == "0.001" and canonical("True") == "true"
    assert overrides_from_name("norm=pre,model.layers=[1,2],seed=1") == {
        "norm": "pre",
        "model.layers": "[1,2]",
        "seed": "1",
    }


def test_metrics_csv_collapses_rows_of_one_step(tmp_path: Path):
    # Lightning writes one row per metric group, and a resumed run repeats steps
    path = tmp_path / "metrics.csv"
    path.write_text("epoch,step,train/loss,val/ppl\n,0,4.0,\n0,0,,50\n,1,3.5,\n,1,3.5,\n")
    frame = read_metrics_csv(path)
    assert list(frame.index) == [0, 1] and frame.loc[0, "val/ppl"] == 50 and frame.loc[1, "train/loss"] == 3.5


# ----------------------------------------------------------------------------- figures


def _paper_file(tmp_path: Path) -> Path:
    paper = tmp_path / "paper.yaml"
    paper.write_text(
        yaml.safe_dump(
            {
                "source": "A et al. 2020, Table 1",
                "metric": "val/ppl",
                "rows": [
                    {
                        "axes": {"norm": "post"},
                        "value": 13.0,
                    },  # matches both post variants (lr=0.002 and the diverged lr=1e4)
                    {"axes": {"norm": "pre"}, "value": 12.5},
                ],
            }
        )
    )
    return paper


def test_plot_script_writes_the_figures(sweep_dir: Path, tmp_path: Path, capsys):
    out = tmp_path / "figures"
    _load_script("plot").main([str(sweep_dir), "--out", str(out), "--paper", str(_paper_file(tmp_path))])
    expected = {
        "val_curves.png",
        "lr_loss_warmup.png",
        "grad_norm_depth.png",
        "grad_norm_heatmap.png",
        "ppl_vs_length.png",
        "metric_vs_lr.png",
        "train_loss_by_lr.png",
        "paper_vs_ours.png",
        "loss_vs_lr.png",
    }
    if any(c.startswith("resid_rms/") for job in load_sweep(sweep_dir).jobs for c in job.metrics.columns):
        expected.add("resid_rms_depth.png")
    written = {p.name for p in out.iterdir()}
    assert expected <= written, written
    assert {
        "ppl_vs_length.csv",
        "metric_vs_lr.csv",
        "paper_vs_ours.csv",
        "loss_vs_lr.csv",
    } <= written  # the numbers drawn
    for name in expected:
        with Image.open(out / name) as image:  # a real picture, not an empty canvas
            assert image.format == "PNG" and image.width >= 500 and image.height >= 300
            assert len(image.convert("RGB").getcolors(maxcolors=1 << 16) or ()) > 8
    assert sorted(capsys.readouterr().out.split()) == sorted(str(out / n) for n in written)
    plotted = pd.read_csv(out / "ppl_vs_length.csv")
    assert set(plotted["length"]) == {16, 32} and (plotted["n"] == 2).all()


def test_plot_script_writes_the_other_figures_when_the_paper_has_no_numbers(sweep_dir: Path, tmp_path: Path, capsys):
    # experiments/depth_stability/paper.yaml: outcomes ("fails to converge"), not numbers
    paper = tmp_path / "paper.yaml"
    paper.write_text(yaml.safe_dump({"metric": "outcome", "rows": [{"axes": {"norm": "post"}, "value": "diverged"}]}))
    out = tmp_path / "figs"
    _load_script("plot").main([str(sweep_dir), "--out", str(out), "--paper", str(paper)])  # no SystemExit: exit 0
    err = capsys.readouterr().err
    assert "paper_vs_ours.png not written" in err and "numeric value" in err
    written = {p.name for p in out.iterdir()}
    assert "paper_vs_ours.png" not in written
    assert {
        "val_curves.png",
        "lr_loss_warmup.png",
        "grad_norm_heatmap.png",
        "metric_vs_lr.png",
        "loss_vs_lr.png",
    } <= written


def test_a_failing_figure_does_not_stop_the_others(sweep_dir: Path, tmp_path: Path, capsys, monkeypatch):
    from ablate.analysis.figures import writing

    def boom(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(writing, "grad_norm_heatmap", boom)  # as sweep_plots finds it
    out = tmp_path / "figs"
    _load_script("plot").main([str(sweep_dir), "--out", str(out)])  # returns: some figures were written
    err = capsys.readouterr().err
    assert "grad_norm_heatmap.png not written: RuntimeError: boom" in err
    written = {p.name for p in out.iterdir()}
    assert "grad_norm_heatmap.png" not in written
    # the figures listed after the failing one too
    assert {
        "val_curves.png",
        "grad_norm_depth.png",
        "ppl_vs_length.png",
        "metric_vs_lr.png",
        "loss_vs_lr.png",
    } <= written
    # nothing can be written: a non-zero exit status that names the failures
    monkeypatch.setattr(writing, "save_png", boom)
    with pytest.raises(SystemExit) as exit_info:
        _load_script("plot").main([str(sweep_dir), "--out", str(tmp_path / "none")])
    assert exit_info.value.code not in (0, None) and "no figure written" in str(exit_info.value.code)
    assert "val_curves.png not written: RuntimeError: boom" in capsys.readouterr().err


def test_lr_schedule_is_what_lightning_logged_at_every_step(sweep_dir: Path):
    from ablate.analysis.series import lr_matches_log, lr_schedule

    for job in load_sweep(sweep_dir).jobs:
        with open(Path(job.source) / "csv" / "metrics.csv") as f:
            logged = {int(row["step"]): float(row["train/lr"]) for row in csv.DictReader(f) if row.get("train/lr")}
        schedule = lr_schedule(job)
        steps = json.loads((Path(job.source) / "status.json").read_text())["steps"]
        assert list(schedule.index) == list(range(steps))  # every optimiser step the job took, warmup included
        assert sorted(logged) == list(range(steps))  # TINY logs every step: the whole schedule is checked
        assert [schedule[s] for s in sorted(logged)] == pytest.approx([logged[s] for s in sorted(logged)], rel=1e-6)
        assert lr_matches_log(job, schedule)


def test_lr_figures_of_the_real_sweep_have_a_log_x_axis(sweep_dir: Path):
    from ablate.analysis.figures.comparisons import loss_vs_lr_figure, metric_vs_axis_figure

    sweep = load_sweep(sweep_dir)  # optim.lr = 0.002 and 10000 (diverged)
    tuning = loss_vs_lr_figure(sweep)
    assert tuning.axes[0].get_xscale() == "log"
    assert metric_vs_axis_figure(sweep, "optim.lr", "val/ppl").axes[0].get_xscale() == "log"
    for norm in ("pre", "post"):
        row = tuning.table[(tuning.table["line"] == f"norm={norm}") & (tuning.table["x"] == 0.002)].iloc[0]
        finals = _hand_seeds(sweep_dir, norm, "val/loss")
        assert (row["mean"], row["std"]) == pytest.approx((statistics.mean(finals), statistics.stdev(finals)), rel=1e-9)
    assert tuning.table[tuning.table["x"] == 10000.0].iloc[0]["failed"] == 1


def test_x_tokens_scales_the_steps_by_tokens_per_step(sweep_dir: Path, tmp_path: Path):
    from ablate.analysis.figures.curves import validation_figure

    sweep = load_sweep(sweep_dir)
    per_step = 4 * 16  # TINY: data.batch_size=4 sequences of data.seq_len=16 tokens
    by_step, by_tokens = (validation_figure(sweep, x).axes[0] for x in ("steps", "tokens"))
    step_lines = [ln for ln in by_step.get_lines() if len(ln.get_xdata())]
    token_lines = [ln for ln in by_tokens.get_lines() if len(ln.get_xdata())]
    assert len(step_lines) == len(token_lines) >= 2  # pre and post (the diverged job may never have validated)
    for steps, tokens in zip(step_lines, token_lines):
        assert list(tokens.get_xdata()) == [s * per_step for s in steps.get_xdata()]  # x: optimiser steps done
        assert list(tokens.get_ydata()) == list(steps.get_ydata())
    # the same count as the throughput callback's train/tokens_seen, where the run logged it
    job_dir = _job_dirs(sweep_dir, norm="pre", seed="1")[0]
    with open(job_dir / "csv" / "metrics.csv") as f:
        seen = {int(r["step"]): float(r["train/tokens_seen"]) for r in csv.DictReader(f) if r.get("train/tokens_seen")}
    for step, tokens in seen.items():
        assert tokens == (step + 1) * per_step
    out = tmp_path / "figs"
    _load_script("plot").main([str(sweep_dir), "--out", str(out)])
    _load_script("plot").main([str(sweep_dir), "--out", str(out), "--x", "time"])
    names = {p.name for p in out.iterdir()}  # the time curves do not overwrite the step curves (issue 35)
    assert {"val_curves.png", "lr_loss_warmup.png", "val_curves_by_time.png", "lr_loss_warmup_by_time.png"} <= names


def _hand_seeds(sweep: Path, norm: str, metric: str) -> list[float]:
    return [_hand_final(job, metric) for job in _job_dirs(sweep, norm=norm)]


def test_ppl_vs_length_series_is_the_seed_mean_and_range(sweep_dir: Path):
    sweep = load_sweep(sweep_dir)
    table = length_series(sweep)
    assert training_length(sweep) == 16
    assert set(table["variant"]) == {"norm=pre, lr=0.002", "norm=post, lr=0.002"}  # the diverged job was not scored
    for norm in ("pre", "post"):
        for length in (16, 32):
            row = table[(table["variant"] == f"norm={norm}, lr=0.002") & (table["length"] == length)].iloc[0]
            seeds = _hand_seeds(sweep_dir, norm, f"test/ppl@{length}")
            assert row["n"] == 2 and row["mean"] == pytest.approx(statistics.mean(seeds), rel=1e-9)
            assert (row["min"], row["max"]) == pytest.approx((min(seeds), max(seeds)), rel=1e-9)
            assert row["std"] == pytest.approx(statistics.stdev(seeds), rel=1e-9)


def test_metric_vs_axis_series_counts_the_diverged_job(sweep_dir: Path):
    sweep = load_sweep(sweep_dir)
    assert numeric_axes(sweep) == ["optim.lr"]  # norm is not a number
    table = axis_series(sweep, "optim.lr", "val/ppl")
    assert list(zip(table["line"], table["x"])) == [("norm=pre", 0.002), ("norm=post", 0.002), ("norm=post", 10000.0)]
    for norm in ("pre", "post"):
        row = table[(table["line"] == f"norm={norm}") & (table["x"] == 0.002)].iloc[0]
        assert row["mean"] == pytest.approx(statistics.mean(_hand_seeds(sweep_dir, norm, "val/ppl")), rel=1e-9)
        assert row["n"] == 2 and row["failed"] == 0
    diverged = table[table["x"] == 10000.0].iloc[0]
    assert diverged["n"] == 0 and np.isnan(diverged["mean"]) and diverged["failed"] == 1
    assert diverged["failed_status"] == "diverged"
    with pytest.raises(ValueError, match="axes are norm, optim.lr"):
        axis_series(sweep, "model.n_layers", "val/ppl")


def test_paper_series_order_and_rank_correlation(sweep_dir: Path, tmp_path: Path):
    sweep = load_sweep(sweep_dir)
    table = paper_series(sweep, load_paper(_paper_file(tmp_path)), "val/ppl")
    # lower perplexity is better: the paper's best (pre, 12.5) first; both post variants share 13.0
    assert list(table["variant"]) == ["norm=pre, lr=0.002", "norm=post, lr=0.002", "norm=post, lr=10000"]
    assert list(table["paper"]) == [12.5, 13.0, 13.0]
    pre, post = (statistics.mean(_hand_seeds(sweep_dir, n, "val/ppl")) for n in ("pre", "post"))
    assert table["mean"].iloc[0] == pytest.approx(pre) and table["mean"].iloc[1] == pytest.approx(post)
    assert np.isnan(table["mean"].iloc[2])  # diverged: no value, left out of the correlation
    # two variants with values: the ranks agree (+1) when our pre beats our post, as the paper's does
    assert paper_rank_correlation(table) == pytest.approx(1.0 if pre < post else -1.0)


def test_spearman_against_hand_computations():
    # untied: 1 - 6 sum d^2 / (n (n^2 - 1)); ranks (1,2,3,4,5) vs (2,1,4,3,5): sum d^2 = 4
    assert spearman([10, 20, 30, 40, 50], [0.2, 0.1, 0.4, 0.3, 0.5]) == pytest.approx(1 - 6 * 4 / (5 * 24))
    assert spearman([1, 2, 3], [30, 20, 10]) == pytest.approx(-1.0)
    # ties share the average rank: x ranks (1, 2.5, 2.5, 4), y ranks (1, 3, 2, 4); Pearson of ranks = 4.5 / sqrt(4.5 * 5)
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(0.9**0.5)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))
    with pytest.raises(ValueError, match="3 values against 2"):
        spearman([1, 2, 3], [1, 2])


def test_stuck_means_the_validation_loss_did_not_fall(tmp_path: Path):
    def job(values: list[float], status: str = "completed") -> Job:
        frame = pd.DataFrame(
            {"val/loss": values}, index=pd.Index([100 * (i + 1) for i in range(len(values))], name="step")
        )
        return Job(name="j", source=str(tmp_path), overrides={}, status=status, metrics=frame)

    assert is_stuck(job([3.353, 3.350]))  # a deep Post-LN model at the unigram loss all run
    assert not is_stuck(job([2.49, 2.369]))  # trained: 5% lower
    assert not is_stuck(job([3.35]))  # one validation: cannot tell
    assert not is_stuck(job([3.353, 3.350], status="diverged"))  # diverged is its own outcome


def test_an_axis_is_found_by_its_full_or_its_short_name(tmp_path: Path):
    def job(**overrides: str) -> Job:
        return Job(name="j", source=str(tmp_path), overrides=overrides, status="completed", metrics=pd.DataFrame())

    sweep = Sweep.from_jobs(
        "synthetic",
        [job(**{"optim.lr": "0.001", "norm": "pre"}), job(**{"optim.lr": "0.002", "norm": "post"})],
    )
    assert sweep.full_name("lr") == "optim.lr"  # the short name that labels show
    assert sweep.full_name("optim.lr") == "optim.lr"
    assert sweep.full_name("norm") == "norm"
    assert sweep.full_name("scale") == "scale"  # no axis: a config key, compared as it is
    ambiguous = Sweep.from_jobs(
        "synthetic",
        [job(**{"optim.lr": "0.001", "probe.lr": "1"}), job(**{"optim.lr": "0.002", "probe.lr": "2"})],
    )
    assert ambiguous.full_name("lr") == "lr"  # two axes end in lr: the short name names neither


# ----------------------------------------------------------------------------- attention


def _assert_distributions(weights: torch.Tensor) -> None:
    assert torch.allclose(weights.sum(-1), torch.ones(weights.shape[:-1]), atol=1e-5)
    assert (weights >= 0).all()


@pytest.mark.parametrize("pos", ["rope", "alibi", "learned"])
def test_lm_attention_is_causal_normalised_and_leaves_the_model_alone(pos: str):
    torch.manual_seed(0)
    spec = ModelSpec.from_flat(
        dict(
            vocab_size=30,
            n_layers=2,
            d_model=32,
            n_heads=4,
            n_kv_heads=2,
            d_ff=64,
            max_len=16,
            pos=pos,
            attn="sdpa",
            dropout=0.1,
        )
    ).validate()
    model = TransformerLM(spec).eval()
    ids = torch.randint(0, 30, (12,))
    before = model(ids[None])
    weights = lm_attention(model, ids)
    assert weights.shape == (2, 4, 12, 12)  # one map per query head (2 kv heads serve 4 query heads)
    assert torch.equal(torch.triu(weights, diagonal=1), torch.zeros_like(weights))  # the future gets exactly 0
    assert (torch.diagonal(weights, dim1=-2, dim2=-1) > 0).all()
    _assert_distributions(weights)
    # the math path that produced the weights computes what sdpa computes; the model is back as it was
    assert torch.allclose(model(ids[None]), before, atol=1e-5)
    assert all(not b.attn.sublayer.kernel.keep_weights and b.attn.sublayer.kernel.weights is None for b in model.blocks)


def test_translation_attention_kinds():
    torch.manual_seed(0)
    spec = ModelSpec.from_flat(
        dict(
            vocab_size=30,
            n_layers=2,
            encoder_layers=1,
            d_model=32,
            n_heads=4,
            d_ff=64,
            max_len=16,
            pos="sinusoidal",
            norm="post",
            attn="sdpa",
        )
    ).validate()
    model = EncoderDecoder(spec)
    maps = translation_attention(model, torch.tensor([5, 6, 7, 8, 2]), torch.tensor([1, 9, 10]))
    assert maps["encoder self-attention"].shape == (1, 4, 5, 5)
    assert maps["decoder self-attention"].shape == (2, 4, 3, 3) and maps["decoder cross-attention"].shape == (
        2,
        4,
        3,
        5,
    )
    assert torch.triu(maps["encoder self-attention"], diagonal=1).sum() > 0  # the encoder sees the whole source
    assert torch.equal(torch.triu(maps["decoder self-attention"], 1), torch.zeros_like(maps["decoder self-attention"]))
    for weights in maps.values():
        _assert_distributions(weights)


def test_attention_maps_script_on_a_sweep_checkpoint(sweep_dir: Path, tmp_path: Path):
    ckpt = _job_dirs(sweep_dir, norm="pre", seed="1")[0] / "checkpoints" / "best.ckpt"
    out = tmp_path / "maps.png"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = forked_python.run(
        [
            sys.executable,
            str(REPO / "scripts" / "attention_maps.py"),
            f"ckpt_path='{ckpt}'",
            "text='ROMEO:\\nBut soft'",
            f"out={out}",
        ],
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    assert out.read_bytes().startswith(b"\x89PNG") and out.stat().st_size > 10_000


def test_attention_maps_dispatch_on_the_checkpoints_task(sweep_dir: Path):
    """``checkpoint_maps`` asks the checkpoint's TaskSpec what to draw; an LM refuses ``target=``
    (a translation option) instead of ignoring it."""
    from ablate.analysis.attention import checkpoint_maps

    ckpt = _job_dirs(sweep_dir, norm="pre", seed="1")[0] / "checkpoints" / "best.ckpt"
    maps, description = checkpoint_maps(ckpt, "ROMEO:", None, 16)
    assert [m.name for m in maps] == ["self-attention"] and "norm=pre" in description
    with pytest.raises(ValueError, match="target= applies to translation checkpoints"):
        checkpoint_maps(ckpt, "ROMEO:", "a target", 16)
