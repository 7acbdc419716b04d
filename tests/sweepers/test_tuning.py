"""Learning-rate tuning: ``tune=lr`` (each variant at its own tuned learning rate, in one command),
the selection behind it, the objective a sweeper optimises (:func:`ablate.run.status.best_metric_value`) and the
Optuna alternative (``hparams_search=lr_optuna``).

The end-to-end sweeps run train.py as a user does, and their expectations are computed here from
the jobs' own ``status.json`` and ``.hydra/overrides.yaml`` files, not with the code under test."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir

from ablate.run.status import MetricNotLoggedError, RunStatus, best_metric_value
from ablate.sweepers.lr_selection import LRResult, log_grid, read_outcome, save_selection, select_lr
from helpers import forked_python
from helpers.runs import REPO, TINY

HAS_OPTUNA = importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is not None


def r(lr: float, status: str = "completed", value: float | None = None) -> LRResult:
    return LRResult(lr, f"{lr:g}", status, value)


# --------------------------------------------------------------------------- selection (pure)


def test_select_lr_picks_the_best_finished_rate():
    """Lowest final loss among completed jobs; a diverged job never wins, even with a low value
    recorded before it diverged, and neither does a crashed one or one without a finite value."""
    results = [
        r(1e-3, value=2.5),
        r(2e-3, value=2.3),
        r(4e-3, "diverged", 1.0),
        r(8e-3, "crashed"),
        r(1.6e-2, value=float("nan")),
        r(5e-4, value=2.9),
    ]
    sel = select_lr(results)
    assert sel.chosen.lr == 2e-3 and sel.edge is None and sel.note is None and sel.extend_with is None
    # the same grid for a metric where higher is better (BLEU): the highest completed value
    bleu = select_lr(
        [r(1e-3, value=20.0), r(2e-3, value=25.0), r(4e-3, value=22.0), r(8e-3, "diverged", 99.0)],
        higher_is_better=True,
    )
    assert bleu.chosen.lr == 2e-3 and bleu.edge is None


def test_select_lr_flags_an_optimum_at_the_edge():
    grid = [r(5e-4, value=3.0), r(1e-3, value=2.8), r(2e-3, value=2.6), r(4e-3, value=2.5), r(8e-3, value=2.4)]
    high = select_lr(grid, also="hydra.sweep.dir=/x")
    assert high.chosen.lr == 8e-3 and high.edge == "highest"
    assert high.extend_with == "optim.lr=0.0005,0.001,0.002,0.004,0.008,0.016,0.032 hydra.sweep.dir=/x"
    assert "the optimum may be outside the grid: extend it with optim.lr=" in high.note
    # the top of the grid diverged: the best finished rate is not at the edge of the grid
    capped = select_lr([*grid[:-1], r(8e-3, "diverged")])
    assert capped.chosen.lr == 4e-3 and capped.edge is None
    low = select_lr([r(5e-4, value=2.0), *grid[1:]])
    assert low.chosen.lr == 5e-4 and low.edge == "lowest"
    assert low.extend_with == "optim.lr=0.000125,0.00025,0.0005,0.001,0.002,0.004,0.008"
    only = select_lr([r(1e-3, value=2.0)], factor=2.0)
    assert only.edge == "only" and only.extend_with == "optim.lr=0.0005,0.001,0.002"
    # a grid of the user's own: extended by hydra.sweeper.lr_factor, whatever its spacing
    own = select_lr([r(1e-4, value=3.0), r(3e-4, value=2.9), r(1e-3, value=2.8)], factor=3.0)
    assert own.edge == "highest" and own.extend_with == "optim.lr=0.0001,0.0003,0.001,0.003,0.009"


def test_select_lr_reports_a_variant_with_nothing_usable():
    diverged = select_lr([r(4e-3, "diverged"), r(8e-3, "diverged"), r(1.6e-2, "diverged")])
    assert diverged.chosen is None and "every learning rate diverged" in diverged.note
    assert diverged.extend_with == "optim.lr=0.0005,0.001,0.002"  # a grid below this one
    mixed = select_lr([r(1e-3, "crashed"), r(2e-3, "diverged"), r(4e-3, "incomplete")])
    assert mixed.chosen is None and "crashed, diverged, incomplete" in mixed.note and mixed.extend_with is None


def test_a_second_command_in_the_sweep_dir_keeps_the_others_selections(tmp_path):
    """One size of a ladder re-tuned over a grid of its own (or a variant added later) replaces
    that variant's selection in lr_tuning.json and keeps the others'."""

    def record(scale: str, best: float) -> dict:
        return {"variant": f"scale={scale},act=relu", "overrides": [f"scale={scale}", "act=relu"], "chosen_lr": best}

    def chosen() -> dict[str, float]:
        records = json.loads((tmp_path / "lr_tuning.json").read_text())["variants"]
        return {v["variant"]: v["chosen_lr"] for v in records}

    save_selection(tmp_path / "lr_tuning.json", {"variants": [record("xs", 4e-3), record("m", 2e-3)]})
    save_selection(tmp_path / "lr_tuning.json", {"variants": [record("xs", 1.6e-2)]})
    assert chosen() == {"scale=m,act=relu": 2e-3, "scale=xs,act=relu": 1.6e-2}
    # the same variant spelled in another order is the same variant
    save_selection(
        tmp_path / "lr_tuning.json", {"variants": [{**record("m", 1e-3), "overrides": ["act=relu", "scale=m"]}]}
    )
    assert chosen() == {"scale=xs,act=relu": 1.6e-2, "scale=m,act=relu": 1e-3}


def test_log_grid():
    assert log_grid(2e-3, 5, 2.0) == ["0.0005", "0.001", "0.002", "0.004", "0.008"]
    assert log_grid(3e-4, 3, 10.0) == ["3e-05", "0.0003", "0.003"]
    with pytest.raises(ValueError, match="positive"):
        log_grid(0.0, 5, 2.0)


def test_read_outcome(tmp_path):
    def job(name: str, record: dict | None) -> Path:
        path = tmp_path / name
        path.mkdir()
        if record is not None:
            (path / "status.json").write_text(json.dumps(record))
        return path

    assert read_outcome(job("done", {"status": "completed", "metrics": {"val/loss": 2.5}}), "val/loss") == (
        "completed",
        2.5,
    )
    assert read_outcome(job("div", {"status": "diverged", "metrics": {"val/loss": 1.0}}), "val/loss") == (
        "diverged",
        None,
    )
    assert read_outcome(job("none", None), "val/loss") == ("incomplete", None)
    assert read_outcome(job("failed", None), "val/loss", failed=True) == ("crashed", None)
    # Hydra says the job failed, and its record is an earlier, unfinished attempt's
    stale = job("stale", {"status": "interrupted", "metrics": {}})
    assert read_outcome(stale, "val/loss", failed=True) == ("crashed", None)
    assert read_outcome(stale, "val/loss") == ("interrupted", None)
    assert read_outcome(None, "val/loss", failed=True) == ("crashed", None)
    # the final value missing from status.json: the last one in metrics.csv
    csv_job = job("csv", {"status": "completed", "metrics": {}})
    (csv_job / "csv").mkdir()
    (csv_job / "csv" / "metrics.csv").write_text("epoch,step,val/loss\n0,2,3.0\n0,5,2.75\n")
    assert read_outcome(csv_job, "val/loss") == ("completed", 2.75)


# --------------------------------------------------------------------------- the objective


def write_metrics(job: Path, rows: list[dict[str, object]]) -> None:
    """A Lightning-style metrics.csv: one row per group of metrics logged at a step, empty cells
    for the metrics of other groups."""
    (job / "csv").mkdir(parents=True)
    columns = ["epoch", "step"] + sorted({k for row in rows for k in row} - {"epoch", "step"})
    with open(job / "csv" / "metrics.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        for row in rows:
            writer.writerow({"epoch": 0, **row})


def test_best_metric_value(tmp_path):
    write_metrics(
        tmp_path,
        [
            {"step": 1, "train/loss": 4.0},
            {"step": 2, "val/loss": 3.0, "val/bleu": 10.0},
            {"step": 3, "train/loss": 1.0},
            {"step": 5, "val/loss": 2.5, "val/bleu": 14.0},
            {"step": 8, "val/loss": 2.7, "val/bleu": 12.0},
            {"step": 9, "grad_norm/total": 0.5},
        ],
    )
    done = RunStatus("completed", metrics={"val/loss": 2.7, "test/loss": 2.6})
    assert best_metric_value(tmp_path, done, "val/loss") == 2.5  # the best over the run, not the final 2.7
    assert best_metric_value(tmp_path, done, "val/bleu") == 14.0  # higher is better
    assert best_metric_value(tmp_path, done, "test/loss") == 2.6  # only in status.json
    for status, metric, worst in (
        ("diverged", "val/loss", math.inf),
        ("diverged", "val/bleu", -math.inf),
        ("crashed", "val/loss", math.inf),
    ):
        assert best_metric_value(tmp_path, RunStatus(status), metric) == worst
    with pytest.raises(MetricNotLoggedError) as err:
        best_metric_value(tmp_path, done, "val/los")
    message = str(err.value)
    assert "optimized_metric='val/los'" in message and "1 others, e.g. grad_norm/total" in message
    assert "test/loss" in message and "val/loss" in message and "train/loss" in message


def test_best_metric_value_never_finite(tmp_path):
    write_metrics(tmp_path, [{"step": 2, "val/loss": "nan"}, {"step": 3, "val/loss": "inf"}])
    assert best_metric_value(tmp_path, RunStatus("completed", metrics={"val/loss": None}), "val/loss") == math.inf


# --------------------------------------------------------------------------- configs


def compose_train(overrides: list[str]):
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose("train", overrides, return_hydra_config=True)


def test_tune_lr_selects_the_sweeper():
    cfg = compose_train(["experiment=shazeer2020_glu_cpu", "tune=lr"])
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_ == "hydra_plugins.ablate_sweepers.tuned_lr.TunedLRSweeper"
    assert sweeper.num_lrs == 5 and sweeper.lr_factor == 2.0 and list(sweeper.seeds) == [1, 2, 3]
    assert sweeper.selection_seed == 0  # held out: never one of the verdict seeds
    assert sweeper.params.seed == "1,2" and "swiglu" in sweeper.params.act  # the experiment's sweep values
    assert str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    assert compose_train([]).hydra.sweeper._target_.endswith("ValidatingSweeper")  # the default grid sweeper


@pytest.mark.skipif(not HAS_OPTUNA, reason="hydra-optuna-sweeper not installed (pip install -e '.[optuna]')")
def test_hparams_search_lr_optuna_search_space():
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from optuna.distributions import IntUniformDistribution, LogUniformDistribution, UniformDistribution

    from hydra_plugins.hydra_optuna_sweeper._impl import create_optuna_distribution_from_override

    cfg = compose_train(["hparams_search=lr_optuna"])
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "minimize"
    assert cfg.optimized_metric == "val/loss" and str(cfg.hydra.mode) == "RunMode.MULTIRUN"
    parser = OverridesParser.create()
    space = {
        k: create_optuna_distribution_from_override(parser.parse_override(f"{k}={v}"))
        for k, v in sweeper.params.items()
    }
    assert space["optim.lr"] == LogUniformDistribution(1e-4, 1e-2)
    assert isinstance(space["optim.warmup_steps"], IntUniformDistribution)  # warmup_steps must be an integer
    assert isinstance(space["optim.weight_decay"], UniformDistribution)


# --------------------------------------------------------------------------- end to end


def jobs_by_overrides(sweep: Path) -> dict[tuple[str, str, str], Path]:
    """``(act, optim.lr, seed) -> job dir`` from the overrides Hydra saved in each job."""
    found = {}
    for job in sweep.iterdir():
        saved = job / ".hydra" / "overrides.yaml"
        if saved.is_file():
            items = dict(o.split("=", 1) for o in yaml.safe_load(saved.read_text()))
            key = (items.get("act", ""), items["optim.lr"], items["seed"])
            assert key not in found, key
            found[key] = job
    return found


def final_loss(job: Path, metric: str = "val/loss") -> float | None:
    record = json.loads((job / "status.json").read_text())
    value = (record.get("metrics") or {}).get(metric)
    return value if record["status"] == "completed" and value is not None else None


def the_sweep(log_dir: Path) -> Path:
    sweeps = list((log_dir / "multirun").iterdir())
    assert len(sweeps) == 1, sweeps
    return sweeps[0]


@pytest.mark.slow
def test_tuned_sweep_end_to_end(run_train, tmp_path):
    """2 variants x 3 learning rates (a factor 30 apart around the configured optim.lr) x the
    selection seed 0, then each variant at its best rate with seeds 1 and 2, both trained fresh
    (no verdict seed is the run that won the selection); lr_tuning.json matches the jobs' own records;
    the same command again skips every job of both stages and changes nothing."""
    command = [
        "act=relu,gelu",
        "tune=lr",
        "hydra.sweeper.num_lrs=3",
        "hydra.sweeper.lr_factor=30",
        "hydra.sweeper.seeds=[1,2]",
        "hydra.sweeper.extend_edges=0",  # the grid as given (the extension past an edge: the next test)
        "hydra.sweeper.selection=shared",  # one grid per variant, on seed 0 (nested: test_nested_selection_...)
        *TINY,
        "logger=csv",
    ]
    first = run_train(*command)
    sweep = the_sweep(tmp_path / "logs")
    jobs = jobs_by_overrides(sweep)
    grid = sorted({lr for _, lr, seed in jobs if seed == "0"}, key=float)
    center = compose_train([*TINY]).optim.lr
    assert [float(x) for x in grid] == pytest.approx([center / 30, center, center * 30], rel=1e-2)

    expected = {}
    for act in ("relu", "gelu"):
        losses = {lr: final_loss(jobs[(act, lr, "0")]) for lr in grid}
        usable = {lr: v for lr, v in losses.items() if v is not None}
        expected[act] = min(usable, key=usable.get)
    # (which rate wins at 6 steps depends on the seed of the selection runs: the test takes it from them)
    assert set(jobs) == {(act, lr, "0") for act in ("relu", "gelu") for lr in grid} | {
        (act, lr, s) for act, lr in expected.items() for s in ("1", "2")
    }

    tuning = json.loads((sweep / "lr_tuning.json").read_text())
    assert tuning["metric"] == "val/loss" and tuning["seeds"] == [1, 2] and tuning["stage2"] == "done"
    assert tuning["selection_seed"] == 0
    by_variant = {v["variant"]: v for v in tuning["variants"]}
    assert set(by_variant) == {"act=relu", "act=gelu"}
    for act, lr in expected.items():
        record = by_variant[f"act={act}"]
        assert record["grid"] == [float(x) for x in grid]
        assert record["chosen_override"] == f"optim.lr={lr}" and record["chosen_lr"] == float(lr)
        edge = {grid[0]: "lowest", grid[-1]: "highest"}.get(lr)
        assert record["edge"] == edge and (record["warning"] is None) == (edge is None)
        assert [s["value"] for s in record["stage1"]] == [final_loss(jobs[(act, x, "0")]) for x in grid]
        assert [(s["seed"], s["value"]) for s in record["seeds"]] == [
            (1, final_loss(jobs[(act, lr, "1")])),
            (2, final_loss(jobs[(act, lr, "2")])),
        ]
        assert record["completed_seeds"] == 2
    assert "LR tuning, stage 1" in first.stdout and "LR tuning, stage 2" in first.stdout

    # scripts/summarize.py's view: the learning rate is an axis, each variant has its rate
    from ablate.analysis.runs import load_sweep

    assert set(load_sweep(sweep).axes) == {"act", "optim.lr"}

    # summarize.py on a tuned sweep: each variant at its tuned rate, so --baseline names a variant
    import sys

    from helpers.runs import REPO

    proc = forked_python.run(
        [
            sys.executable,
            str(REPO / "scripts" / "summarize.py"),
            str(sweep),
            "--baseline",
            "act=gelu",
            "--metric",
            "val/loss",
            "--out",
            str(tmp_path / "summary"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "each variant at its tuned learning rate, seeds 1,2, each trained at that rate after the selection; "
        "the selection ran on seed 0, whose 2 job(s)" in proc.stdout
    )
    assert "(4 job(s) of the other grid rates left out" in proc.stdout
    assert "the selection ran on seed 0" in (tmp_path / "summary" / "summary.md").read_text()  # written, not only shown
    import pandas as pd

    summary = pd.read_csv(tmp_path / "summary" / "summary.csv")
    assert len(summary) == 2  # relu + gelu, each at its chosen rate with 2 seeds, the selection seed left out
    assert set(summary["seed_values"]) == {"1,2"} and set(summary["mean_seeds"]) == {"1,2"}

    before = {job: (job / "status.json").read_bytes() for job in jobs.values()}
    tuning_before = (sweep / "lr_tuning.json").read_bytes()
    again = run_train(*command)
    assert the_sweep(tmp_path / "logs") == sweep and jobs_by_overrides(sweep) == jobs
    assert again.stdout.count("skipped: ") == len(jobs) == 10, again.stdout[-3000:]
    assert {job: (job / "status.json").read_bytes() for job in jobs.values()} == before
    assert (sweep / "lr_tuning.json").read_bytes() == tuning_before


@pytest.mark.slow
def test_tuned_sweep_edge_and_all_diverged(run_train, tmp_path):
    """Variant max_ratio=10: 1e-3 completes and 1e4 diverges, so 1e-3 is chosen at the edge of the
    grid, and tune=lr extends the grid below it by itself before stage 2 (issue 43 item 4: one rate
    at a time, a factor lr_factor apart, at most extend_edges=2), recorded in lr_tuning.json.
    Variant max_ratio=0.5 (a loss above half the first one counts as diverged): every rate
    diverges, so it gets no stage 2 and no extension. The sweep ends normally (exit code 0:
    diverged is a result, not a crash)."""
    proc = run_train(
        "tune=lr",
        "callbacks.divergence.max_ratio=10,0.5",
        "optim.lr=1e-3,1e4",
        "optim.grad_clip=null",
        "hydra.sweeper.seeds=[1,2]",
        "hydra.sweeper.num_lrs=7",
        "hydra.sweeper.selection=shared",
        *TINY,
        "logger=csv",
    )
    # an explicit grid makes num_lrs moot: said, not silently dropped
    assert (
        "tuned_lr: hydra.sweeper.num_lrs=7 ignored: the grid is the command line's optim.lr=1e-3,1e4"
        in proc.stdout + proc.stderr
    )
    sweep = the_sweep(tmp_path / "logs")
    found = {}
    for job in sweep.iterdir():
        if (job / ".hydra" / "overrides.yaml").is_file():
            items = dict(o.split("=", 1) for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()))
            found[(items["callbacks.divergence.max_ratio"], items["optim.lr"], items["seed"])] = job
    variants = {v["variant"]: v for v in json.loads((sweep / "lr_tuning.json").read_text())["variants"]}
    edge, dead = variants["callbacks.divergence.max_ratio=10"], variants["callbacks.divergence.max_ratio=0.5"]
    extended = edge["extended"]
    assert extended[0] == 0.0005 and len(extended) <= 2  # below the edge, one rate at a time, bounded
    assert [s["lr"] for s in edge["stage1"]] == sorted([*extended, 0.001, 10000.0])
    chosen = edge["chosen_override"].split("=", 1)[1]
    assert edge["edge"] is None or len(extended) == 2  # inside the grid now, or the bound was reached
    assert set(found) == {
        ("10", "0.001", "0"),
        ("10", "10000.0", "0"),
        ("0.5", "0.001", "0"),
        ("0.5", "10000.0", "0"),
        *{("10", f"{x:g}", "0") for x in extended},
        ("10", chosen, "1"),
        ("10", chosen, "2"),
    }
    assert {k: json.loads((j / "status.json").read_text())["status"] for k, j in found.items() if k[0] == "0.5"} == {
        ("0.5", "0.001", "0"): "diverged",
        ("0.5", "10000.0", "0"): "diverged",
    }
    assert [s["seed"] for s in edge["seeds"]] == [1, 2]
    assert dead["chosen_lr"] is None and "every learning rate diverged" in dead["warning"] and "seeds" not in dead
    assert dead["extended"] == []
    assert (
        "every learning rate diverged" in proc.stdout
        and "best rate at the edge of the grid; extending it" in proc.stdout
    )


@pytest.mark.slow
@pytest.mark.skipif(not HAS_OPTUNA, reason="hydra-optuna-sweeper not installed (pip install -e '.[optuna]')")
def test_hparams_search_lr_optuna_runs_and_resumes(run_train, tmp_path):
    """Two Optuna trials through train.py; the seeded sampler proposes the same trials again, so
    the same command skips them."""
    command = [
        "hparams_search=lr_optuna",
        "hydra.sweeper.n_trials=2",
        "optim.warmup_steps=int(interval(0,4))",
        *[o for o in TINY if not o.startswith("optim.warmup_steps")],
        "logger=csv",
    ]
    run_train(*command)
    sweep = the_sweep(tmp_path / "logs")
    trials = sorted(p.name for p in sweep.iterdir() if (p / "status.json").is_file())
    assert len(trials) == 2
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert set(results["best_params"]) == {"optim.lr", "optim.warmup_steps", "optim.weight_decay"}
    assert math.isfinite(results["best_value"])
    again = run_train(*command)
    assert again.stdout.count("skipped: ") == 2, again.stdout[-3000:]
    assert sorted(p.name for p in sweep.iterdir() if (p / "status.json").is_file()) == trials


# --------------------------------------------------------------------------- held-out selection (issue 18)


def test_summaries_leave_the_selection_seed_out(tmp_path):
    """A tune=lr sweep directory (written here): stage 1 on seed 0 at two rates, stage 2 on seeds
    1, 2 at the chosen one. The verdict view keeps seeds 1 and 2 only; a selection written before
    held-out selection existed keeps its first seed, with a note that it won the selection."""
    from ablate.analysis.runs import at_tuned_rates, load_sweep

    def job(index, lr, seed, value):
        d = tmp_path / f"{index:02d}"
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["act=gelu", f"optim.lr={lr}", f"seed={seed}"]))
        (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": seed}))
        (d / "status.json").write_text(json.dumps({"status": "completed", "metrics": {"val/loss": value}}))

    for i, (lr, seed, value) in enumerate(
        [("0.001", 0, 2.5), ("0.002", 0, 2.3), ("0.002", 1, 2.31), ("0.002", 2, 2.32)]
    ):
        job(i, lr, seed, value)
    record = {"variant": "act=gelu", "overrides": ["act=gelu"], "chosen_override": "optim.lr=0.002"}
    # "seeds" is the last command's: here seed=2 finished a sweep that seed=1,2 had started
    (tmp_path / "lr_tuning.json").write_text(json.dumps({"selection_seed": 0, "seeds": [2], "variants": [record]}))
    kept, note = at_tuned_rates(load_sweep(tmp_path), tmp_path)
    assert sorted(j.seed for j in kept.jobs) == [1, 2]
    assert "seeds 1,2, each trained at that rate" in note  # the seeds the verdict rests on
    assert "the selection ran on seed 0, whose 1 job(s) at the chosen rates are left out" in note
    (tmp_path / "lr_tuning.json").write_text(json.dumps({"tuning_seed": 0, "seeds": [0, 1, 2], "variants": [record]}))
    kept, note = at_tuned_rates(load_sweep(tmp_path), tmp_path)
    assert sorted(j.seed for j in kept.jobs) == [0, 1, 2] and "won the selection (optimistic)" in note


def test_the_verdict_table_states_each_arms_rate_and_edge(tmp_path, capsys):
    """Issue 43 item 4: the table against the baseline says at which rate each arm ran and whether
    it was at an edge of its grid (the optimum may lie beyond it), or got there after tune=lr
    extended the grid."""
    from ablate.analysis.commands import summarize as summarize_command

    def job(index, act, lr, seed, value):
        d = tmp_path / f"{index:02d}"
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump([f"act={act}", f"optim.lr={lr}", f"seed={seed}"]))
        (d / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"seed": seed}))
        (d / "status.json").write_text(json.dumps({"status": "completed", "metrics": {"val/loss": value}}))

    index = 0
    for act, lr, base in (("gelu", "0.008", 2.3), ("relu", "0.004", 2.5)):
        for seed in (1, 2, 3):
            job(index, act, lr, seed, base + 0.01 * seed)
            index += 1
    records = [
        {
            "variant": "act=gelu",
            "overrides": ["act=gelu"],
            "chosen_override": "optim.lr=0.008",
            "selection_seed": 0,
            "edge": "highest",
            "extended": [0.004, 0.008],
        },
        {
            "variant": "act=relu",
            "overrides": ["act=relu"],
            "chosen_override": "optim.lr=0.004",
            "selection_seed": 0,
            "edge": None,
            "extended": [0.004],
        },
    ]
    (tmp_path / "lr_tuning.json").write_text(json.dumps({"selection_seed": 0, "variants": records}))
    summarize_command.main(
        [str(tmp_path), "--metric", "val/loss", "--baseline", "act=gelu", "--out", str(tmp_path / "o")]
    )
    out = capsys.readouterr().out
    assert "| act | lr | tuned LR |" in out
    assert "| gelu | 0.008 | 0.008 (top edge; grid extended: 0.004, 0.008) |" in out
    assert "| relu | 0.004 | 0.004 (grid extended: 0.004) |" in out


@pytest.mark.integration
def test_a_selection_seed_among_the_verdict_seeds_is_refused(run_train, tmp_path):
    proc = run_train(
        "act=relu,gelu", "tune=lr", "seed=0,1", "hydra.sweeper.selection=shared", *TINY, "logger=csv", check=False
    )
    assert proc.returncode != 0
    assert "hydra.sweeper.selection_seed=0 is one of the verdict seeds (seed=0,1)" in proc.stderr + proc.stdout
    assert "hydra.sweeper.selection_seed=2" in proc.stderr + proc.stdout
    assert not list((tmp_path / "logs").rglob("status.json"))  # refused before any job ran


@pytest.mark.integration
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("hydra.sweeper.num_lrs=0", "error: hydra.sweeper.num_lrs=0: give a number of learning rates >= 1"),
        ("hydra.sweeper.seeds=auto", "hydra.sweeper.seeds=auto: the group-sequential design is gone"),
        ("hydra.sweeper.selection=once", "error: hydra.sweeper.selection='once': give nested (each verdict seed's"),
    ],
)
def test_a_bad_sweeper_setting_is_refused_as_every_bad_key(run_train, tmp_path, setting, message):
    """Refused while Hydra builds the sweeper: exit 2 and the message, not Hydra's wrapper (exit 1)."""
    proc = run_train("tune=lr", setting, *TINY, "logger=csv", check=False)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stderr
    assert "full_key" not in proc.stderr and "Error in call to target" not in proc.stderr
    assert not list((tmp_path / "logs").rglob("*.json"))  # nothing written


# --------------------------------------------------------------------------- seeds=auto (issue 51 item 2)


def test_seeds_auto_is_refused_naming_the_fixed_design_and_the_planner():
    """The group-sequential design is gone: seeds=auto is refused before any job, and the message
    says what replaces it (a fixed list of verdict seeds) and how to size it (the planner)."""
    from ablate.sweepers.tuning_stage2 import refuse_auto_seeds

    sweeper = compose_train(["tune=lr", "hydra.sweeper.seeds=auto"]).hydra.sweeper
    with pytest.raises(ValueError, match="group-sequential design is gone") as refused:
        refuse_auto_seeds(sweeper.seeds)
    assert "hydra.sweeper.seeds=[1,2,3,4,5]" in str(refused.value) and "planner" in str(refused.value)
    assert "scripts/summarize.py <pilot sweep> --baseline AXIS=VALUE --margin δ" in str(refused.value)
    refuse_auto_seeds([1, 2, 3])  # a fixed design passes
    assert "looks" not in sweeper and "spending" not in sweeper  # its settings went with it
