"""A locked analysis plan (issue 34 item 4): declared before the data, hashed and never
overwritten; summarize.py labels every row declared or exploratory against it and --plan runs
exactly the declared analysis; compute_multiplier.py says whether its multiplier was declared."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from ablate.analysis.commands import declare as declare_command
from ablate.analysis.commands import summarize as summarize_command
from ablate.analysis.plan import PLAN_FILE, Call, Plan, PlanError, check_rows, declare, read_plan
from helpers.sweeps import write_sweep

BASIS = "a stated smallest effect of interest, set before the runs"


def plan(**changes) -> Plan:
    fields = dict(metrics=("val/loss",), baseline="act=gelu", margin=0.2, margin_basis=BASIS, seeds=(1, 2, 3))
    return Plan(**{**fields, **changes})


def test_a_plan_is_hashed_time_stamped_and_never_overwritten(tmp_path: Path):
    first = declare(tmp_path, plan())
    body = json.loads((tmp_path / PLAN_FILE).read_text())
    assert body["sha256"] == first.plan.digest() and len(body["sha256"]) == 64 and "T" in body["declared_at"]
    assert declare(tmp_path, plan()).declared_at == first.declared_at  # the same plan again: kept as it was
    with pytest.raises(PlanError, match="already declares another plan"):
        declare(tmp_path, plan(margin=0.5))  # a margin moved after the data: refused
    body["plan"]["margin"] = 0.5  # edited by hand
    (tmp_path / PLAN_FILE).write_text(json.dumps(body))
    assert read_plan(tmp_path).intact is False
    with pytest.raises(PlanError, match="margin-basis"):
        Plan(metrics=("val/loss",), margin=0.1)  # a margin needs its reason


def test_rows_outside_the_plan_are_exploratory(tmp_path: Path):
    declaration = declare(tmp_path, plan(metrics=("val/loss", "test/loss")))
    both = [(None, "val/loss", ["act=relu"]), (None, "test/loss", ["act=relu"])]
    call = Call("act=gelu", "steps", {"val/loss": 0.2, "test/loss": 0.2}, both)
    assert set(check_rows(declaration, call, time.time() + 10)[0].values()) == {"declared"}
    partial = Call("act=gelu", "steps", {"val/loss": 0.2}, both[:1])  # half the family: another correction
    assert "whole Holm family" in check_rows(declaration, partial, None)[0][(None, "val/loss", "act=relu")]
    moved = Call("act=gelu", "steps", {"val/loss": 0.5, "test/loss": 0.2}, both)
    assert "margin 0.5" in check_rows(declaration, moved, None)[0][(None, "val/loss", "act=relu")]
    late = check_rows(declaration, call, time.time() - 3600)[0]  # the first result predates the plan
    assert all("declared after the first result" in v for v in late.values())
    other = Call("act=relu", "steps", {"val/loss": 0.2, "test/loss": 0.2}, both)
    assert all("baseline" in v for v in check_rows(declaration, other, None)[0].values())
    none = check_rows(None, call, None)
    assert set(none[0].values()) == {"exploratory (no declared plan)"} and "No analysis plan" in none[1][0]


def test_summarize_follows_the_declared_plan(tmp_path: Path, capsys):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    declare_command.main(
        [str(sweep), "--metric", "val/loss", "--baseline", "act=gelu", "--margin", "0.2", "--margin-basis", BASIS]
    )
    assert "declared" in capsys.readouterr().out
    write_sweep(sweep, {"gelu": [3.0, 3.1, 2.9], "relu": [3.6, 3.75, 3.45], "silu": [3.01, 3.1, 2.92]})
    now = time.time() + 5  # the runs finished after the declaration
    for job in sweep.iterdir():
        if (job / "status.json").is_file():
            os.utime(job / "status.json", (now, now))
    summarize_command.main([str(sweep), "--plan", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert "Declared plan (analysis_plan.json, sha256" in out
    relu = next(line for line in out.splitlines() if line.startswith("| relu |"))
    assert relu.endswith("| worse |") and "exploratory" not in relu  # the declared verdict, unlabelled
    summarize_command.main([str(sweep), "--metric", "val/loss", "--baseline", "act=gelu", "--margin", "0.05"])
    relu = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| relu |"))
    assert "exploratory (margin 0.05 is not the declared 0.2)" in relu
    with pytest.raises(SystemExit) as exit_info:
        summarize_command.main([str(sweep), "--plan", "--margin", "0.05"])
    assert exit_info.value.code == 2 and "--plan sets --margin itself" in capsys.readouterr().err


def test_a_declared_interaction_is_checked_too(tmp_path: Path, capsys):
    from helpers.sweeps import write_design

    sweep = write_design(tmp_path / "sweep", lambda norm, warmup, lr, seed: 30.0 + seed / 100, lrs=("2.8e-3",))
    spec = ["--interaction", "norm=post,pre", "--interaction", "optim.warmup_steps=0,30"]
    declare_command.main([str(sweep), *spec, "--metric", "test/bleu", "--margin", "0.5", "--margin-basis", BASIS])
    capsys.readouterr()
    summarize_command.main(
        [str(sweep), *spec, "--metric", "test/bleu", "--margin", "0.5", "--out", str(tmp_path / "o")]
    )
    assert (
        "Analysis plan (analysis_plan.json, sha256" in capsys.readouterr().out
        and "declared." in (tmp_path / "o" / "interaction.md").read_text()
    )
    summarize_command.main(
        [str(sweep), *spec, "--metric", "test/bleu", "--margin", "1.0", "--out", str(tmp_path / "p")]
    )
    assert "every verdict exploratory (the margin is not the plan's)" in capsys.readouterr().out
