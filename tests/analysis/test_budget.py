"""Comparison at equal cost (:mod:`ablate.analysis.budget`, ``summarize.py --basis``) and the size
ladder (``conf/scale``, ``compute_multiplier.py``'s default ``--scale-key``).

Interpolation and matched budgets are checked against hand computations on metrics frames built
here; the point of the feature (a variant cheaper per step loses at equal steps and wins at equal
FLOPs) on a synthetic sweep directory written with ``helpers.sweeps.write_job``, through the library
and through ``scripts/summarize.py``; the ladder by composing the real Hydra configs and counting
the parameters of the models they build (no training run).
"""

from __future__ import annotations

import importlib
import itertools
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from hydra import compose, initialize_config_dir

from ablate.analysis import budget
from ablate.analysis.job import Job
from ablate.analysis.markdown import markdown_table
from ablate.analysis.runs import load_sweep
from ablate.analysis.tables import summarize
from ablate.nn.axes import ACT
from ablate.nn.transformer import TransformerLM
from ablate.run.config import RunConfig
from ablate.run.plan import check_config
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO
from helpers.sweeps import write_job

pytestmark = pytest.mark.usefixtures("one_thread")


# ----------------------------------------------------------------------------- interpolation by hand


def _frame(rows: list[tuple]) -> pd.DataFrame:
    """(step, tokens_seen, time_s, val/loss) rows as ``read_metrics_csv`` gives them (index step)."""
    return pd.DataFrame(rows, columns=["step", "train/tokens_seen", "train/time_s", "val/loss"]).set_index("step")


METRICS = _frame(
    [
        (49, 5000, 6.0, None),  # a training row: no validation value, not a point of the curve
        (99, 10000, 11.0, 3.0),
        (149, 15000, 17.0, None),
        (199, None, None, 2.5),  # a validation row without the counters: interpolated
        (249, 25000, 29.0, None),
        (299, 30000, 35.0, 2.0),
    ]
)


def test_interpolation_at_matched_flops_and_time_by_hand():
    flops = budget.validation_curve(METRICS, "val/loss", "flops", flops_per_token=4.0)
    # 4 FLOPs/token x tokens at the validations; step 199's tokens halfway between 15000 and 25000
    assert list(flops.index) == [40000.0, 80000.0, 120000.0] and list(flops) == [3.0, 2.5, 2.0]
    assert budget.value_at(flops, 60000) == pytest.approx(3.0 + (60000 - 40000) / (80000 - 40000) * (2.5 - 3.0))
    assert budget.value_at(flops, 100000) == pytest.approx(2.25)
    assert budget.value_at(flops, 120000) == 2.0 and budget.final_budget(flops) == 120000
    assert math.isnan(budget.value_at(flops, 30000)) and math.isnan(budget.value_at(flops, 130000))  # no extrapolation

    time = budget.validation_curve(METRICS, "val/loss", "time")
    assert list(time.index) == [11.0, 23.0, 35.0]
    assert budget.value_at(time, 17.0) == pytest.approx(3.0 + (17 - 11) / (23 - 11) * (2.5 - 3.0))
    assert budget.value_at(time, 30.0) == pytest.approx(2.5 + (30 - 23) / (35 - 23) * (2.0 - 2.5))

    steps = budget.validation_curve(METRICS, "val/loss", "steps")
    assert list(steps.index) == [100.0, 200.0, 300.0]  # metrics.csv step s = after s + 1 optimiser steps
    assert budget.value_at(steps, 250) == pytest.approx(2.25)

    with pytest.raises(ValueError, match="no train/time_s logged"):
        budget.validation_curve(METRICS.drop(columns="train/time_s"), "val/loss", "time")
    with pytest.raises(ValueError, match="FLOPs per token"):
        budget.validation_curve(METRICS, "val/loss", "flops")


def _job(name: str, params: int, validations: list[tuple[int, float, float]], status: str = "completed") -> Job:
    """A job with 64 tokens per step (validation rows: step + 1, time_s, val/loss) and a config
    that gives 6 params + 12 x 2 x 8 x 16 FLOPs per token."""
    rows = [(n - 1, 64 * n, t, v) for n, t, v in validations]
    return Job(
        name,
        f"/sweep/{name}",
        {"act": name},
        status,
        record={"params": params, "steps": validations[-1][0]},
        config={"model": {"n_layers": 2, "d_model": 8}, "data": {"seq_len": 16, "batch_size": 4}},
        metrics=_frame(rows),
    )


def test_matched_budget_is_the_minimum_final_budget():
    a = _job("a", 1000, [(100, 5.0, 3.0), (200, 10.0, 2.0)])
    b = _job("b", 500, [(100, 3.0, 3.2), (200, 6.0, 2.6), (300, 9.0, 2.2), (400, 12.0, 2.0)])
    diverged = _job("c", 500, [(100, 1.0, 9.0)], status="diverged")  # ended earliest: not a compared job
    fpt_a, fpt_b = 6 * 1000 + 12 * 2 * 8 * 16, 6 * 500 + 12 * 2 * 8 * 16
    assert budget.job_flops_per_token(a) == fpt_a == 9072 and budget.job_flops_per_token(b) == fpt_b

    flops = budget.match([a, b, diverged], "val/loss", "flops")
    assert flops.final == {a.source: fpt_a * 12800, b.source: fpt_b * 25600}
    assert flops.budget == min(fpt_a * 12800, fpt_b * 25600) == fpt_a * 12800  # a's end of training
    assert flops.value(a) == 2.0  # the cheapest job: its final value
    x0, x1 = fpt_b * 64 * 200, fpt_b * 64 * 300  # b's validations around the budget
    assert flops.value(b) == pytest.approx(2.6 + (flops.budget - x0) / (x1 - x0) * (2.2 - 2.6))
    assert math.isnan(flops.value(diverged)) and diverged.source not in flops.final

    time = budget.match([a, b, diverged], "val/loss", "time")
    assert time.budget == 10.0 and time.value(b) == pytest.approx(2.2 + (10 - 9) / (12 - 9) * (2.0 - 2.2))
    steps = budget.match([a, b], "val/loss", "steps")
    assert steps.budget == 200 and steps.value(b) == 2.6

    assert budget.matched_budget([3.0, math.nan, 1.0, 2.0]) == 1.0 and math.isnan(budget.matched_budget([]))
    late = _job("late", 500, [(400, 12.0, 2.0)])  # first validation after the matched budget: no value
    matched = budget.match([a, late], "val/loss", "time")
    assert matched.budget == 10.0 and math.isnan(matched.value(late)) and matched.late() == [late.source]


# ----------------------------------------------------------------------------- cheaper per step


GELU_PARAMS, RELU_PARAMS, LAYERS, D_MODEL, SEQ, BATCH = 20000, 10000, 2, 16, 16, 4
FPT = {"gelu": 6 * GELU_PARAMS + 12 * LAYERS * D_MODEL * SEQ, "relu": 6 * RELU_PARAMS + 12 * LAYERS * D_MODEL * SEQ}


def write_cost_sweep(root: Path, seeds=(1, 2, 3), test: bool = False) -> Path:
    """act=gelu (twice the parameters and twice the time per step of relu) is 0.05 better than
    act=relu at every step; both train 1000 steps, validating every 200: relu loses at equal
    steps and, at gelu's loss after half the steps, wins at equal FLOPs and time. ``test``: each
    job also logs ``test/loss`` once, after training, as ``eval.test_at_end`` does."""
    rng = np.random.default_rng(0)
    config = {"model": {"n_layers": LAYERS, "d_model": D_MODEL}, "data": {"batch_size": BATCH, "seq_len": SEQ}}
    index = 0
    for act, params, seconds, offset in (("gelu", GELU_PARAMS, 0.2, 0.0), ("relu", RELU_PARAMS, 0.1, 0.05)):
        for seed in seeds:
            rows = [
                {
                    "step": n - 1,
                    "train/tokens_seen": n * BATCH * SEQ,
                    "train/time_s": n * seconds,
                    "val/loss": 1.5 + 4 / math.sqrt(n / 100) + offset + 0.03 * seed + rng.normal(0, 0.005),
                }
                for n in range(200, 1001, 200)
            ]
            if test:
                rows.append({"step": 1000, "test/loss": rows[-1]["val/loss"] + 0.01})
            write_job(
                root,
                index,
                [f"act={act}", f"seed={seed}"],
                "val/loss",
                None,
                params=params,
                steps=1000,
                config=config,
                metrics=pd.DataFrame(rows),
            )
            index += 1
    return root


def _row(frame: pd.DataFrame, act: str) -> pd.Series:
    return frame[frame["act"] == act].iloc[0]


def test_a_metric_measured_once_has_costs_but_no_matched_budget(tmp_path: Path):
    sweep = load_sweep(write_cost_sweep(tmp_path, test=True))
    assert budget.measured_once(sweep.jobs, "test/loss") and not budget.measured_once(sweep.jobs, "val/loss")
    frame = summarize(sweep, "test/loss", baseline="act=gelu")
    assert frame.attrs["matched"] == {} and _row(frame, "relu")["verdict"] == "worse"
    assert _row(frame, "relu")["params"] == RELU_PARAMS  # the costs are still shown
    table = markdown_table(frame, sweep)
    assert "Cost of each variant:" in table and "At equal cost" not in table and "@ —" not in table
    assert "test/loss is measured once, after training" in table
    with pytest.raises(ValueError, match="--basis flops: test/loss is measured once"):
        summarize(sweep, "test/loss", baseline="act=gelu", basis="flops")


def test_cheaper_per_step_loses_at_equal_steps_and_wins_at_equal_flops(tmp_path: Path):
    sweep = load_sweep(write_cost_sweep(tmp_path))
    verdicts = {
        basis: _row(summarize(sweep, "val/loss", baseline="act=gelu", basis=basis), "relu")["verdict"]
        for basis in budget.BASES
    }
    assert verdicts == {"steps": "worse", "flops": "better", "time": "better"}

    frame = summarize(sweep, "val/loss", baseline="act=gelu", basis="flops")
    relu, gelu = _row(frame, "relu"), _row(frame, "gelu")
    assert (relu["params"], relu["flops_per_token"], relu["tokens_seen"], relu["train_time_s"]) == (
        RELU_PARAMS,
        FPT["relu"],
        1000 * BATCH * SEQ,
        100.0,
    )
    assert frame["matched_flops"].unique().tolist() == [FPT["relu"] * 1000 * BATCH * SEQ]  # relu's end: the cheaper
    assert frame["matched_steps"].unique().tolist() == [1000] and frame["matched_time_s"].unique().tolist() == [100.0]
    assert relu["val/loss @flops mean"] == pytest.approx(relu["val/loss final mean"])  # relu at its end ...
    assert gelu["val/loss @flops mean"] > gelu["val/loss final mean"] + 0.3  # ... gelu half-way
    assert gelu["val/loss @steps mean"] == pytest.approx(gelu["val/loss final mean"])
    assert relu["diff"] < -0.3 and relu["val/loss @flops n"] == 3 and (frame["basis"] == "flops").all()
    assert frame.attrs["basis_text"].startswith("val/loss at the matched budget of 4.23e+09 FLOPs")


def _summarize_script(*args: str) -> subprocess.CompletedProcess:
    return forked_python.run(
        [sys.executable, str(REPO / "scripts" / "summarize.py"), *args],
        capture_output=True,
        check=False,
        text=True,
        timeout=HANG_TIMEOUT,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


COMMANDS = {
    "summarize": "ablate.analysis.commands.summarize",
    "plot": "ablate.analysis.commands.plot",
    "compute_multiplier": "ablate.analysis.commands.multiplier",
    "declare": "ablate.analysis.commands.declare",
    "halving_replay": "benchmarks.lr_selection.halving_replay",
}


def _script(name: str):
    """The package module behind ``scripts/<name>.py`` (the scripts are thin entry points)."""
    return importlib.import_module(COMMANDS[name])


@pytest.mark.integration
def test_summarize_script_basis_flops(tmp_path: Path):
    sweep = write_cost_sweep(tmp_path / "sweep")
    out = tmp_path / "out"
    proc = _summarize_script(
        str(sweep), "--metric", "val/loss", "--baseline", "act=gelu", "--basis", "flops", "--out", str(out)
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    heading = "Against the baseline act=gelu (val/loss at the matched budget of 4.23e+09 FLOPs, --basis flops):"
    assert lines[0] == heading  # the answer first: the verdicts at equal FLOPs, their notes, then ...
    assert lines[lines.index("Per variant:") + 2].startswith("| act | seeds |")  # ... the summary table ...
    cost = lines.index(next(line for line in lines if line.startswith("At equal cost")))  # ... the costs ...
    assert lines[cost + 2] == (
        "| act | params | FLOPs/token | tokens seen | train time (s) | val/loss @ 1000 steps | "
        "val/loss @ 4.23e+09 FLOPs | val/loss @ 100 s |"
    )
    assert lines[cost + 5].startswith(f"| relu | 10,000 | {FPT['relu']:.4g} | 64,000 | 100 |")
    header = lines[lines.index(heading) + 2]
    assert "| val/loss @flops |" in header and header.endswith("| verdict |")
    assert next(line for line in lines[lines.index(heading) :] if line.startswith("| relu |")).endswith("| better |")
    summary = pd.read_csv(out / "summary.csv")
    assert (summary["basis"] == "flops").all() and (summary["matched_flops"] == FPT["relu"] * 64000).all()
    assert {
        "params",
        "flops_per_token",
        "tokens_seen",
        "train_time_s",
        "matched_steps",
        "matched_time_s",
        "val/loss @flops n",
        "val/loss @time mean",
        "val/loss @steps std",
    } <= set(summary.columns)

    with pytest.raises(SystemExit):  # --basis without --baseline: nothing to compare
        _script("summarize").parse_args([str(sweep), "--basis", "flops"])
    assert _script("summarize").parse_args([str(sweep)]).basis == "steps"  # the default: final values


def test_missing_counters_are_noted_not_fatal(tmp_path: Path):
    sweep = write_cost_sweep(tmp_path, seeds=(1, 2))
    job = next(p for p in sorted(tmp_path.iterdir()) if p.is_dir())
    metrics = pd.read_csv(job / "csv" / "metrics.csv").drop(columns="train/time_s")
    metrics.to_csv(job / "csv" / "metrics.csv", index=False)
    loaded = load_sweep(sweep)
    frame = summarize(loaded, "val/loss")
    gelu = _row(frame, "gelu")  # its seed without train/time_s has no value @ time, the other one has
    assert math.isfinite(gelu["val/loss @time mean"]) and math.isnan(gelu["val/loss @time std"])
    assert math.isfinite(gelu["val/loss @flops std"])  # both seeds @ FLOPs
    assert f"No time budget for 1 job(s) ({job.name}: no train/time_s logged)" in markdown_table(frame, loaded)


# ----------------------------------------------------------------------------- the size ladder

CONF = REPO / "conf"
SCALES = ["xxs", "xs", "s", "m", "l"]
TOKENS_PER_PARAM, TOLERANCE = 10.0, 0.05  # docs/analysis.md: 10 tokens per non-embedding parameter, within 5%


def non_embedding_params(model: TransformerLM) -> int:
    return sum(p.numel() for module in (model.blocks, model.final_norm) for p in module.parameters())


@pytest.fixture(scope="module")
def hydra_init():
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


@pytest.mark.parametrize("act", sorted(ACT.options()))
def test_scale_ladder_composes_with_a_fixed_tokens_per_parameter(hydra_init, act: str):
    sizes = []
    for scale in SCALES:
        cfg = compose(config_name="train", overrides=[f"scale={scale}", f"act={act}"])
        check_config(cfg)
        trainer = cfg.trainer
        assert trainer.max_steps % trainer.val_check_interval == 0  # the last validation is the end of training
        assert 0 < cfg.optim.warmup_steps < trainer.max_steps / 10
        model = TransformerLM(RunConfig.from_hydra(cfg).model_spec(vocab_size=65, max_len=cfg.data.seq_len))
        params = non_embedding_params(model)
        tokens = trainer.max_steps * cfg.data.batch_size * cfg.data.seq_len
        assert tokens / params == pytest.approx(TOKENS_PER_PARAM, rel=TOLERANCE), (scale, act, params, tokens)
        sizes.append(params)
    assert all(b > 1.7 * a for a, b in itertools.pairwise(sizes)), sizes  # a ladder: each rung ~2x the one below


def test_no_scale_leaves_the_defaults(hydra_init):
    cfg = compose(config_name="train")
    assert (cfg.model.n_layers, cfg.model.d_model, cfg.trainer.max_steps) == (4, 128, 1500)
    assert compose(config_name="train", overrides=["scale=xs"]).model.d_model == 64


# ----------------------------------------------------------------------------- compute_multiplier.py --scale-key


def write_ladder_sweep(root: Path) -> Path:
    """act=gelu,swiglu x scale=xs,s,m x seed=1,2 with losses on one power law, swiglu worth 2x compute."""
    index = 0
    for act, factor in (("gelu", 1.0), ("swiglu", 2.0)):
        for i, scale in enumerate(("xs", "s", "m")):
            params, compute = 1e5 * 4**i, 6 * 1e5 * 4**i * 1000 * 8 * 64
            for seed in (1, 2):
                loss = 1.5 + 0.5 * (6 * 1.6e6 * 1000 * 8 * 64 / (factor * compute)) ** 0.3 + 0.001 * seed
                write_job(
                    root,
                    index,
                    [f"scale={scale}", f"act={act}", f"seed={seed}"],
                    "val/loss",
                    loss,
                    params=int(params),
                    steps=1000,
                    config={"model": {"n_layers": 2, "d_model": 16}, "data": {"batch_size": 8, "seq_len": 64}},
                )
                index += 1
    return root


def test_compute_multiplier_defaults_to_the_scale_axis(tmp_path: Path, capsys):
    script = _script("compute_multiplier")
    ladder = load_sweep(write_ladder_sweep(tmp_path / "ladder"))
    assert script.default_scale_key(ladder) == "scale"
    script.main(
        [ladder.source, "--baseline", "act=gelu", "--flops", "6N", "--bootstrap", "0", "--out", str(tmp_path / "o")]
    )
    assert "| act=swiglu | m |" in capsys.readouterr().out
    result = pd.read_csv(tmp_path / "o" / "compute_multiplier.csv").iloc[0]
    assert result["variant"] == "act=swiglu" and result["multiplier"] == pytest.approx(2.0, rel=0.05)

    other = load_sweep(write_cost_sweep(tmp_path / "no_scale", seeds=(1,)))
    with pytest.raises(ValueError, match="--scale-key not given .* no `scale` axis"):
        script.default_scale_key(other)


def write_tuned_ladder_sweep(root: Path) -> Path:
    """The ladder of :func:`write_ladder_sweep` as a ``tune=lr`` sweep: each (act, scale) at two
    rates, the better one (lower at larger scales) chosen in ``lr_tuning.json``, the other 0.3
    nats worse; swiglu is worth 2x compute at the chosen rates."""
    index, variants = 0, []
    for act, factor in (("gelu", 1.0), ("swiglu", 2.0)):
        for i, scale in enumerate(("xs", "s", "m")):
            params, compute = 1e5 * 4**i, 6 * 1e5 * 4**i * 1000 * 8 * 64
            best, other = ("0.004", "0.002") if i == 0 else ("0.002", "0.004")
            for lr, seeds in ((other, (1,)), (best, (1, 2, 3))):
                for seed in seeds:
                    loss = 1.5 + 0.5 * (6 * 1.6e6 * 1000 * 8 * 64 / (factor * compute)) ** 0.3 + 0.001 * seed
                    write_job(
                        root,
                        index,
                        [f"scale={scale}", f"act={act}", f"optim.lr={lr}", f"seed={seed}"],
                        "val/loss",
                        loss + (0.3 if lr == other else 0.0),
                        params=int(params),
                        steps=1000,
                        config={"model": {"n_layers": 2, "d_model": 16}, "data": {"batch_size": 8, "seq_len": 64}},
                    )
                    index += 1
            variants.append(
                {
                    "variant": f"scale={scale}, act={act}",
                    "overrides": [f"scale={scale}", f"act={act}"],
                    "chosen_override": f"optim.lr={best}",
                }
            )
    (root / "lr_tuning.json").write_text(json.dumps({"key": "optim.lr", "variants": variants}))
    return root


def test_compute_multiplier_of_a_tuned_sweep_joins_each_variants_tuned_rates(tmp_path: Path, capsys):
    """The tuned rate differs between scales: a curve per act through its chosen rates, the other
    rates of the grid left out (with them, or with the rate as a variant, the factor is lost)."""
    sweep = write_tuned_ladder_sweep(tmp_path / "tuned")
    _script("compute_multiplier").main(
        [str(sweep), "--baseline", "act=gelu", "--flops", "6N", "--bootstrap", "0", "--out", str(tmp_path / "o")]
    )
    out = capsys.readouterr().out
    assert "each variant at its tuned learning rate, its seeds there (6 job(s)" in out
    assert "| act=swiglu | m | " in out and "lr=" not in out.split("\n\n")[0]
    result = pd.read_csv(tmp_path / "o" / "compute_multiplier.csv").iloc[0]
    assert result["variant"] == "act=swiglu" and result["multiplier"] == pytest.approx(2.0, rel=0.05)


def test_where_compares_the_variants_within_one_scale(tmp_path: Path, capsys):
    sweep = write_tuned_ladder_sweep(tmp_path / "tuned")
    with pytest.raises(SystemExit) as exit_info:
        _script("summarize").main(
            [str(sweep), "--metric", "val/loss", "--baseline", "act=gelu", "--out", str(tmp_path / "all")]
        )
    assert exit_info.value.code == 2 and "matches 3 configurations" in capsys.readouterr().err  # a user error
    _script("summarize").main(
        [
            str(sweep),
            "--metric",
            "val/loss",
            "--where",
            "scale=m",
            "--baseline",
            "act=gelu",
            "--out",
            str(tmp_path / "m"),
        ]
    )
    frame = pd.read_csv(tmp_path / "m" / "summary.csv")
    assert "scale" not in frame and sorted(frame["act"]) == ["gelu", "swiglu"]  # one scale: not an axis any more
    assert (tmp_path / "m" / "summary.md").read_text().startswith("Only the jobs with scale=m.")
    assert frame["params"].tolist() == [1.6e6, 1.6e6]
    assert set(frame["seeds"]) == {3}  # the tuned rate (0.002 for both: not an axis) with its 3 seeds
    with pytest.raises(SystemExit) as exit_info:
        _script("summarize").main([str(sweep), "--where", "scale=xl", "--out", str(tmp_path / "x")])
    assert exit_info.value.code == 2
    assert re.search(r"--where scale=xl: no job .* scale: m, s, xs", capsys.readouterr().err)


def test_a_job_added_without_tune_lr_joins_its_variant(tmp_path: Path):
    """`tune=lr` says how a job was launched, not what it trained: a rate run later by hand
    (without it) in the same sweep directory is one more rate of the same variant."""
    sweep = write_tuned_ladder_sweep(tmp_path / "tuned")
    for i, job in enumerate(sorted(p for p in sweep.iterdir() if p.is_dir())):
        overrides = yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text())
        if i == 0:
            overrides.append("tune=lr")  # the others as if added by hand
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    loaded = load_sweep(sweep)
    assert loaded.axes == ["scale", "act", "optim.lr"]


def test_plot_of_a_tuned_sweep_draws_the_tuned_rates_and_the_whole_tuning_curve(tmp_path: Path, capsys):
    sweep = write_tuned_ladder_sweep(tmp_path / "tuned")
    _script("plot").main([str(sweep), "--metric", "val/loss", "--out", str(tmp_path / "figs")])
    assert (
        "6 job(s) of the other grid rates left out; loss_vs_lr.png and --all-lrs show them" in capsys.readouterr().out
    )
    tuning = pd.read_csv(tmp_path / "figs" / "loss_vs_lr.csv")
    assert len(tuning) == 12 and tuning["x"].nunique() == 2  # 6 variants x both rates of the grid, not only the chosen
    assert not (tmp_path / "figs" / "metric_vs_lr.png").exists()  # the tuned rate is not an axis of its own
    assert (tmp_path / "figs" / "val_curves.png").exists()
