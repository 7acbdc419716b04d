"""Successive halving over a ``tune=lr`` grid (``hydra.sweeper.halving.rungs``,
:mod:`ablate.sweepers.halving`): the rung plan, the survivor rule, the refusals, and the sweep through
train.py (each rung the prefix of the full run, survivors continued from their checkpoint); the
replay on a finished full grid is tests/benchmark/test_halving_replay.py.

The end-to-end expectations are read from the jobs' own ``status.json``, ``metrics.csv`` and
``.hydra/overrides.yaml`` files, and from an uninterrupted run trained here, not from the code under test."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from ablate.sweepers.halving import (
    ELIMINATED,
    RateTrack,
    RungOutcome,
    check_rungs,
    choose,
    compute_fraction,
    halve,
    history,
    keep_count,
    rank,
    reached_fraction,
    rung_steps,
    segment_counts,
)
from helpers.runs import REPO, TINY


def track(lr: float, value: float | None, status: str = "completed", step: int = 2) -> RateTrack:
    return RateTrack(lr, f"{lr:g}", [RungOutcome(step, status, value)])


# --------------------------------------------------------------------------- the plan


def test_compute_fraction_of_five_rates_at_a_quarter_and_a_half():
    """5 rates at [0.25, 0.5]: 5 train a quarter, 2 the next quarter, 1 the last half: 2.25 of 5 runs."""
    assert segment_counts(5, 2) == [5, 2, 1]
    assert compute_fraction(5, [0.25, 0.5]) == pytest.approx((5 * 0.25 + 2 * 0.25 + 1 * 0.5) / 5) == pytest.approx(0.45)
    assert compute_fraction(4, [0.25, 0.5]) == pytest.approx(0.5)
    assert compute_fraction(5, [0.5]) == pytest.approx((5 * 0.5 + 2 * 0.5) / 5)
    assert reached_fraction([250, 250, 250, 500, 1000], 1000) == pytest.approx(0.45)


@pytest.mark.parametrize(("n", "kept"), [(1, 1), (2, 1), (3, 1), (4, 2), (5, 2), (7, 3), (8, 4)])
def test_keep_the_better_half_at_least_one(n, kept):
    assert keep_count(n) == kept


def test_rung_steps():
    assert rung_steps([0.25, 0.5], 1000, 250) == (250, 500, 1000)
    assert rung_steps([0.333333, 0.5], 1200, 200) == (400, 600, 1200)  # 1/3 to 6 digits names step 400
    assert rung_steps([0.1667, 0.5], 1200, 200) == (200, 600, 1200)  # 1/6 to 4 digits (200.04) names step 200
    assert rung_steps([0.5], 8, 2, decay_steps=8) == (4, 8)  # a horizon equal to max_steps is the same schedule


# --------------------------------------------------------------------------- survivors


def test_halve_keeps_the_better_half_and_breaks_ties_towards_the_smaller_rate():
    tracks = [track(1e-3, 2.5), track(2e-3, 2.3), track(4e-3, 2.3), track(8e-3, 2.4), track(1.6e-2, 2.9)]
    kept = halve(tracks, 2, higher_is_better=False)
    assert [t.lr for t in kept] == [2e-3, 4e-3]  # 2.3, 2.3: the two best, floor(5/2) = 2
    assert {t.lr: t.eliminated_at for t in tracks} == {1e-3: 2, 2e-3: None, 4e-3: None, 8e-3: 2, 1.6e-2: 2}
    # a tie at the cut: the smaller rate goes on
    tied = [track(1e-3, 2.0), track(2e-3, 2.0), track(4e-3, 2.0)]
    assert [t.lr for t in halve(tied, 2, False)] == [1e-3]
    # higher is better (BLEU): the highest values go on
    bleu = [track(1e-3, 20.0), track(2e-3, 25.0), track(4e-3, 22.0), track(8e-3, 10.0)]
    assert [t.lr for t in halve(bleu, 2, True)] == [2e-3, 4e-3]


def test_a_diverged_or_crashed_rate_ranks_last_and_never_goes_on():
    tracks = [
        track(1e-3, 3.0),
        track(2e-3, 0.1, "diverged"),  # a low value before diverging does not count
        track(4e-3, None, "crashed"),
        track(8e-3, float("nan")),
    ]
    assert [t.lr for t in rank(tracks, False)] == [1e-3, 2e-3, 4e-3, 8e-3]
    assert [t.lr for t in halve(tracks, 2, False)] == [1e-3]  # floor(4/2) = 2 places, one usable rate
    dead = [track(1e-3, None, "diverged"), track(2e-3, None, "diverged")]
    assert halve(dead, 2, False) == [] and all(t.eliminated_at == 2 for t in dead)
    # a single rate is kept (at least 1) when it is usable
    assert [t.lr for t in halve([track(1e-3, 2.0)], 2, False)] == [1e-3]


def test_the_choice_is_the_best_finalist_and_an_edge_is_flagged_against_the_whole_grid():
    grid = [track(r, v) for r, v in ((1e-3, 2.6), (2e-3, 2.4), (4e-3, 2.5), (8e-3, 2.45))]
    halve(grid, 2, False)  # 2e-3 and 8e-3 go on
    for t, value in zip([t for t in grid if t.running], (2.2, 2.1)):
        t.rungs.append(RungOutcome(8, "completed", value))
    selection = choose(grid, 8, False)
    assert selection.chosen.lr == 8e-3 and selection.edge == "highest"
    results = {r.lr: r for r in (t.result(8) for t in grid)}
    assert results[1e-3].status == ELIMINATED and results[1e-3].value is None  # never a value it did not reach
    assert results[2e-3].value == 2.2
    record = history(grid, (2, 4, 8), (0.25, 0.5))
    assert record["planned_fraction"] == pytest.approx(0.5)
    assert record["compute_fraction"] == pytest.approx((2 + 8 + 2 + 8) / 32)
    first = record["rates"][0]
    assert first == {
        "lr": 1e-3,
        "rungs": [{"step": 2, "status": "completed", "value": 2.6, "job": None}],
        "eliminated_at_step": 2,
    }


def test_run_stage1_launches_each_rung_as_one_batch_and_continues_from_checkpoints(tmp_path):
    """Two variants, 4 rates, rungs at 2 and 4 of 8 steps, a launcher faked here (it writes each
    job's status.json and last.ckpt): one batch per rung over both variants (8, 4, 2 jobs); a
    variant's own trainer.max_steps is replaced by the rung's; from the second rung each job resumes
    its previous rung's last.ckpt; the values decide who goes on, per variant."""
    from dataclasses import dataclass, field

    from hydra.core.utils import JobStatus
    from omegaconf import OmegaConf

    from ablate.sweepers.halving import run_stage1

    @dataclass
    class Variant:
        overrides: list[str]
        label: str
        grid: list[str]
        rung_steps: tuple[int, ...] = (2, 4, 8)
        tracks: list = field(default_factory=list)

    @dataclass
    class Ret:
        hydra_cfg: object
        status: JobStatus = JobStatus.COMPLETED

    def value(items: dict[str, str]) -> float:  # act=relu prefers small rates, act=gelu large ones
        lr, steps = float(items["optim.lr"]), int(items["trainer.max_steps"])
        return (lr if items["act"] == "relu" else 1 / lr) + 1 / steps

    batches: list[list[list[str]]] = []

    def launch(batch: list[list[str]]) -> list[Ret]:
        batches.append(batch)
        rets = []
        for overrides in batch:
            items = dict(o.split("=", 1) for o in overrides)
            job = tmp_path / ",".join(sorted(o for o in overrides if not o.startswith("ckpt_path=")))
            (job / "checkpoints").mkdir(parents=True)
            (job / "checkpoints" / "last.ckpt").write_text("")
            steps = int(items["trainer.max_steps"])
            record = {"status": "completed", "steps": steps, "metrics": {"val/loss": value(items)}}
            (job / "status.json").write_text(json.dumps(record))
            rets.append(Ret(OmegaConf.create({"hydra": {"runtime": {"output_dir": str(job)}}})))
        return rets

    grid = ["0.001", "0.002", "0.004", "0.008"]
    variants = [Variant(["act=relu", "trainer.max_steps=8"], "act=relu", grid), Variant(["act=gelu"], "act=gelu", grid)]
    returns, stopped = run_stage1(variants, launch, lambda: False, "val/loss", False, "optim.lr", "seed", "0")
    assert not stopped and [len(b) for b in batches] == [8, 4, 2] and len(returns) == 14
    for rung, batch in enumerate(batches):
        for job in batch:
            assert job.count("trainer.max_steps=8") == (rung == 2) and f"trainer.max_steps={(2, 4, 8)[rung]}" in job
            assert "optim.decay_steps=8" in job and "seed=0" in job
            ckpt = [o for o in job if o.startswith("ckpt_path=")]
            if rung == 0:
                assert not ckpt
            else:
                previous = [o for o in job if not o.startswith(("ckpt_path=", "trainer.max_steps="))]
                name = ",".join(sorted([*previous, f"trainer.max_steps={(2, 4, 8)[rung - 1]}"]))
                assert ckpt == [f"ckpt_path='{tmp_path / name / 'checkpoints' / 'last.ckpt'}'"]
    finalists = {v.label: [t.text for t in v.tracks if t.running] for v in variants}
    assert finalists == {"act=relu": ["0.001"], "act=gelu": ["0.008"]}
    assert {v.label: [t.eliminated_at for t in v.tracks] for v in variants} == {
        "act=relu": [None, 4, 2, 2],
        "act=gelu": [2, 2, 4, None],
    }


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("bad", [[0.5, 0.25], [0.5, 0.5], [0.0, 0.5], [0.5, 1.0], [1.5], 0.5, "0.5", [True], ["a"]])
def test_bad_rungs_are_refused_naming_the_key(bad):
    with pytest.raises(ValueError, match=r"hydra\.sweeper\.halving\.rungs=.*strictly increasing in \(0, 1\)"):
        check_rungs(bad)


def test_no_rungs_is_the_full_grid():
    assert check_rungs(None) == () and check_rungs([]) == () and check_rungs([0.25, 0.5]) == (0.25, 0.5)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([0.25], 10, 1), r"0\.25 x trainer\.max_steps=10 = 2\.5 is not a whole number of steps"),
        (([0.25], 1200, 200), r"step 300 .* is not a validation step .*valid: 0\.166667, 0\.333333, 0\.5"),
        (([0.5], -1, 2), r"trainer\.max_steps=-1.*positive number of steps"),
        (([0.5], 8, 2.5), r"trainer\.val_check_interval=2\.5.*whole number of optimiser steps"),
        (([0.5], 8, 2, 16), r"optim\.decay_steps=16 is not trainer\.max_steps=8.*optim\.decay_steps=null"),
    ],
)
def test_rungs_that_are_not_a_measured_prefix_are_refused(args, message):
    with pytest.raises(ValueError, match=r"hydra\.sweeper\.halving\.rungs: " + message):
        rung_steps(*args)


def test_tune_lr_has_halving_off_by_default():
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        off = compose("train", ["tune=lr"], return_hydra_config=True).hydra.sweeper
        on = compose(
            "train", ["tune=lr", "hydra.sweeper.halving.rungs=[0.25,0.5]"], return_hydra_config=True
        ).hydra.sweeper
    assert off.halving.rungs is None and check_rungs(off.halving.rungs) == ()
    assert check_rungs(on.halving.rungs) == (0.25, 0.5)


@pytest.mark.integration
def test_bad_rungs_stop_the_sweep_before_any_job(run_train, tmp_path):
    for rungs, message in (
        ("[0.5,0.25]", "hydra.sweeper.halving.rungs=[0.5, 0.25]: give fractions of trainer.max_steps"),
        ("[0.333333]", "hydra.sweeper.halving.rungs: step 2 (0.333333 x 6) (all) is not a validation step"),
    ):
        proc = run_train("tune=lr", f"hydra.sweeper.halving.rungs={rungs}", *TINY, "logger=csv", check=False)
        assert proc.returncode != 0, proc.stdout[-2000:]  # a bad setting: Hydra's error; a bad rung: exit 2
        assert message in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
        assert not list((tmp_path / "logs").rglob("status.json"))  # refused before any job ran


# --------------------------------------------------------------------------- through train.py

HALVING_RUN = [
    *(o for o in TINY if not o.startswith(("trainer.max_steps", "trainer.val_check_interval"))),
    "trainer.max_steps=8",
    "trainer.val_check_interval=2",
    "logger=csv",
]


def val_losses(job: Path, metric: str = "val/loss") -> dict[int, float]:
    """Optimiser steps done -> the metric in the job's metrics.csv (its step + 1)."""
    with open(job / "csv" / "metrics.csv") as f:
        return {int(r["step"]) + 1: float(r[metric]) for r in csv.DictReader(f) if r.get(metric)}


def trained_steps(job: Path) -> list[int]:
    with open(job / "csv" / "metrics.csv") as f:
        return sorted({int(r["step"]) for r in csv.DictReader(f) if r.get("train/loss")})


@pytest.mark.slow
def test_halving_sweep_end_to_end(run_train, tmp_path):
    """4 rates, rungs at 2 and 4 of 8 steps: all 4 train to step 2, the better 2 continue from
    their checkpoints to step 4 (training steps 2-3 only), the better one to step 8. Every rung's
    value is the uninterrupted run's value at that step, and the finalist's final val/loss is the
    uninterrupted run's; the same command again retrains nothing."""
    command = [
        "tune=lr",
        "hydra.sweeper.halving.rungs=[0.25,0.5]",
        "hydra.sweeper.num_lrs=4",
        "hydra.sweeper.lr_factor=4",
        "hydra.sweeper.seeds=[1]",
        "hydra.sweeper.extend_edges=0",  # the halving grid as given (tune=lr's extension past an edge: test_tuning)
        "hydra.sweeper.selection=shared",  # stage 1 on seed 0 (nested: test_tuning)
        *HALVING_RUN,
    ]
    first = run_train(*command)
    (sweep,) = list((tmp_path / "logs" / "multirun").iterdir())
    jobs = {}
    for job in sweep.iterdir():
        if (job / ".hydra" / "overrides.yaml").is_file():
            items = dict(o.split("=", 1) for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()))
            steps = int(items["trainer.max_steps"])
            jobs[(items["optim.lr"], items["seed"], steps)] = job
    stage1 = {k: j for k, j in jobs.items() if k[1] == "0"}
    grid = sorted({lr for lr, _, _ in stage1}, key=float)
    assert len(grid) == 4

    # (a) who reached which rung, from the jobs themselves: the better half of each rung's values
    at2 = {lr: json.loads((stage1[(lr, "0", 2)] / "status.json").read_text()) for lr in grid}
    assert all(s["status"] == "completed" and s["steps"] == 2 for s in at2.values())
    best2 = sorted(grid, key=lambda lr: (at2[lr]["metrics"]["val/loss"], float(lr)))[:2]
    assert {lr for lr, _, s in stage1 if s == 4} == set(best2)
    at4 = {lr: json.loads((stage1[(lr, "0", 4)] / "status.json").read_text()) for lr in best2}
    (best4,) = sorted(best2, key=lambda lr: (at4[lr]["metrics"]["val/loss"], float(lr)))[:1]
    assert {lr for lr, _, s in stage1 if s == 8} == {best4}
    assert len(stage1) == 4 + 2 + 1
    # a survivor resumed the previous rung's last.ckpt and trained only the steps after it
    for lr in best2:
        job4 = stage1[(lr, "0", 4)]
        assert at4[lr]["steps"] == 4 and trained_steps(job4) == [2, 3]
        assert at4[lr]["resumed_from"] == str(stage1[(lr, "0", 2)] / "checkpoints" / "last.ckpt")
    final_job = stage1[(best4, "0", 8)]
    final = json.loads((final_job / "status.json").read_text())
    assert final["steps"] == 8 and trained_steps(final_job) == [4, 5, 6, 7]

    # lr_tuning.json: the values measured at each rung, the eliminations, the compute
    tuning = json.loads((sweep / "lr_tuning.json").read_text())
    (record,) = tuning["variants"]
    assert record["chosen_override"] == f"optim.lr={best4}"
    assert record["halving"]["steps"] == [2, 4, 8] and record["halving"]["compute_fraction"] == pytest.approx(0.5)
    rates = {r["lr"]: r for r in record["halving"]["rates"]}
    for lr in grid:
        measured = [at2[lr]] + ([at4[lr]] if lr in best2 else []) + ([final] if lr == best4 else [])
        assert [r["value"] for r in rates[float(lr)]["rungs"]] == [m["metrics"]["val/loss"] for m in measured]
        out = None if lr == best4 else 4 if lr in best2 else 2
        assert rates[float(lr)]["eliminated_at_step"] == out
    assert [s["value"] is None for s in record["stage1"]] == [lr != best4 for lr in grid]
    assert "successive halving at steps 2, 4 of 8; stage-1 compute 0.50" in first.stdout
    assert f"{at2[best4]['metrics']['val/loss']:.4f}>{at4[best4]['metrics']['val/loss']:.4f}>" in first.stdout

    # (b) the continuation is exact: an uninterrupted run at the finalist's rate, seed 0, 8 steps
    run_train(f"optim.lr={best4}", "seed=0", *HALVING_RUN, "hydra.run.dir=" + str(tmp_path / "plain"))
    plain = json.loads((tmp_path / "plain" / "status.json").read_text())
    assert final["metrics"]["val/loss"] == pytest.approx(plain["metrics"]["val/loss"], rel=1e-6, abs=1e-7)
    curve = val_losses(tmp_path / "plain")
    assert at2[best4]["metrics"]["val/loss"] == pytest.approx(curve[2], rel=1e-6)
    assert at4[best4]["metrics"]["val/loss"] == pytest.approx(curve[4], rel=1e-6)

    # the verdict view leaves every rung job out (the selection seed)
    from ablate.analysis.runs import at_tuned_rates, load_sweep

    kept, _ = at_tuned_rates(load_sweep(sweep), sweep)
    assert [(j.seed, j.value("optim.lr")) for j in kept.jobs] == [(1, best4)]

    # (c) the same command again: every job of both stages skipped, nothing rewritten
    before = {job: (job / "status.json").read_bytes() for job in jobs.values()}
    tuning_before = (sweep / "lr_tuning.json").read_bytes()
    again = run_train(*command)
    assert again.stdout.count("skipped: ") == len(jobs) == 8, again.stdout[-3000:]
    assert {job: (job / "status.json").read_bytes() for job in jobs.values()} == before
    assert (sweep / "lr_tuning.json").read_bytes() == tuning_before
