"""A locked analysis plan (issue 34 item 4, issue 43 item 2): declared in an append-only, chained
ledger outside the sweep folder, before the runs; summarize.py labels every row declared or
exploratory against it *and against the jobs it reads*, and names why. Every plan attack of issue 43
is here, each reported exploratory with its reason (each of these assertions fails on 20535cc,
where the hash sat beside what it hashed, the time was outside it, "before the first result" read
file times, and seeds, variants, split and stopping rule were never compared with the jobs)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from ablate.analysis.commands import declare as declare_command
from ablate.analysis.commands import summarize as summarize_command
from ablate.analysis.plan import (
    LEDGER_FILE,
    PLAN_FILE,
    Call,
    Plan,
    PlanError,
    _entry_digest,
    anchor_note,
    check_rows,
    declare,
    read_ledger,
    read_plan,
)
from helpers.sweeps import write_sweep
from helpers.verdict_sweeps import write_units_sweep

BASIS = "a stated smallest effect of interest, set before the runs"
SHIFTS = {"gelu": 0.0, "relu": 0.3, "silu": 0.001}  # nats per token: relu clearly worse, silu within the margin


def plan(**changes) -> Plan:
    fields = dict(metrics=("test/loss",), baseline="act=gelu", margin=0.2, margin_basis=BASIS, seeds=(1, 2, 3))
    return Plan(**{**fields, **changes})


def declared_sweep(tmp_path: Path, **plan_changes) -> Path:
    """A sweep folder with a plan declared first, then its runs (3 seeds x 4 held-out blocks)."""
    sweep = tmp_path / "sweep"
    declare(sweep, plan(**plan_changes))
    write_units_sweep(sweep, SHIFTS)
    return sweep


def rows(capsys, sweep: Path, *args: str) -> dict[str, str]:
    """summarize.py --plan (or the given options): each compared row's table line, by act."""
    summarize_command.main([str(sweep), *(args or ["--plan"]), "--out", str(sweep.parent / "out")])
    out = capsys.readouterr().out
    return {act: next(line for line in out.splitlines() if line.startswith(f"| {act} |")) for act in ("relu", "silu")}


def test_a_declared_sweep_whose_arms_stalled_gets_no_verdict(tmp_path: Path, capsys):
    """Issue 50 item 4: every arm stayed on its starting plateau (val/loss fell by < 1%): a
    declared comparison prints ``not trained (stalled k/n)``, never better / worse / equivalent
    (on f5f6d26: relu ``worse (stalled 3/3)``, silu ``equivalent (±0.2) (stalled 3/3)``)."""
    sweep = declared_sweep(tmp_path)
    for metrics in sweep.glob("*/csv/metrics.csv"):
        frame = pd.read_csv(metrics)
        frame["val/loss"] = [3.352, 3.351]  # the unigram plateau, at both validations
        frame.to_csv(metrics, index=False)
    lines = rows(capsys, sweep)
    for act, line in lines.items():
        verdict = line.rsplit("|", 2)[-2]
        assert "not trained (stalled 3/3)" in verdict, (act, line)
        assert not any(word in verdict for word in ("better", "worse", "equivalent")), (act, line)


def test_a_plan_is_a_chained_ledger_entry_outside_the_sweep_folder(tmp_path: Path):
    first = declare(tmp_path / "a", plan())
    ledger = tmp_path / LEDGER_FILE
    assert ledger.is_file() and not (tmp_path / "a" / LEDGER_FILE).exists()  # not where a cp -r copies it
    entries, broken, _ = read_ledger(ledger)
    assert broken is None and len(entries) == 1 and entries[0]["previous"] == "0" * 64
    entry = entries[0]
    # time and content are hashed together, with the commit of the code
    assert entry["sha256"] == _entry_digest(entry) and "declared_at" in entry and len(entry["git_commit"] or "") == 40
    assert json.loads((tmp_path / "a" / PLAN_FILE).read_text())["sha256"] == first.sha256
    assert declare(tmp_path / "a", plan()).declared_at == first.declared_at  # the same plan again: kept as it was
    with pytest.raises(PlanError, match="already has a declared plan"):
        declare(tmp_path / "a", plan(margin=0.5))  # a margin moved after the data: refused
    second = declare(tmp_path / "b", plan())
    entries, broken, _ = read_ledger(ledger)
    assert broken is None and entries[1]["previous"] == entries[0]["sha256"] and second.entry["entry"] == 2
    with pytest.raises(PlanError, match="margin-basis"):
        Plan(metrics=("val/loss",), margin=0.1)  # a margin needs its reason


def test_the_declared_plan_gives_declared_verdicts(tmp_path: Path, capsys):
    sweep = declared_sweep(tmp_path)
    found = rows(capsys, sweep)
    assert found["relu"].endswith("| worse |") and "crossed, seeds 1,2,3 x 4 text blocks" in found["relu"]
    assert found["silu"].endswith("| equivalent (±0.2) |")


def _rewrite_entry(ledger: Path, index: int, change, rehash: bool) -> None:
    entries = [json.loads(line) for line in ledger.read_text().splitlines()]
    change(entries[index])
    if rehash:
        entries[index]["sha256"] = _entry_digest(entries[index])
    ledger.write_text("".join(json.dumps(e, sort_keys=True) + "\n" for e in entries))


def _sync_copy(sweep: Path, ledger: Path, index: int = 0) -> None:
    entry = json.loads(ledger.read_text().splitlines()[index])
    (sweep / PLAN_FILE).write_text(json.dumps({**entry, "ledger": str(ledger)}))


def test_an_edited_plan_is_exploratory_even_with_its_hash_recomputed(tmp_path: Path, capsys):
    sweep = declared_sweep(tmp_path)

    # the copy in the sweep folder, edited with its hash recomputed (as 20535cc hashed it: the plan's
    # canonical JSON, the hash beside it): the ledger is the record
    copy = json.loads((sweep / PLAN_FILE).read_text())
    copy["plan"]["margin"] = 0.5
    copy["sha256"] = hashlib.sha256(
        json.dumps(copy["plan"], sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    (sweep / PLAN_FILE).write_text(json.dumps(copy))
    assert (
        "differs from its ledger entry"
        in rows(capsys, sweep, "--metric", "test/loss", "--baseline", "act=gelu", "--margin", "0.5")["silu"]
    )
    ledger = tmp_path / LEDGER_FILE

    # the ledger's entry edited, hash not recomputed: the chain says so
    _rewrite_entry(ledger, 0, lambda e: e["plan"].update(margin=0.5), rehash=False)
    _sync_copy(sweep, ledger)
    assert (
        "was edited after it was written"
        in rows(capsys, sweep, "--metric", "test/loss", "--baseline", "act=gelu", "--margin", "0.5")["silu"]
    )

    # ... and with every hash recomputed: the runs recorded the plan they started under
    _rewrite_entry(ledger, 0, lambda e: None, rehash=True)
    _sync_copy(sweep, ledger)
    found = rows(capsys, sweep, "--metric", "test/loss", "--baseline", "act=gelu", "--margin", "0.5")["silu"]
    assert "started under another plan" in found


def test_a_back_dated_plan_is_exploratory(tmp_path: Path, capsys):
    # declared after the runs, with a time before them: the runs recorded no plan when they started
    sweep = tmp_path / "sweep"
    write_units_sweep(sweep, SHIFTS)
    declare(sweep, plan(), now=datetime.now(UTC) - timedelta(days=1))
    assert all("started with no plan in the sweep folder" in line for line in rows(capsys, sweep).values())

    # a ledger entry moved back in time behind the entry before it (hashes recomputed): back-dated
    other = tmp_path / "other"
    other.mkdir()
    declare(tmp_path / "earlier", plan())
    later = declared_sweep(other)  # its own ledger: other/analysis_ledger.jsonl
    ledger = other / LEDGER_FILE
    declare(other / "second", plan(margin=0.3))
    _rewrite_entry(ledger, 1, lambda e: e.update(declared_at="2000-01-01T00:00:00+00:00"), rehash=True)
    entries, broken, why = read_ledger(ledger)
    assert broken == 1 and "back-dated" in why
    assert read_plan(later).intact  # the entry before the rewritten one stands


def test_archiving_or_touching_the_sweep_changes_nothing(tmp_path: Path, capsys):
    """`cp -r` makes a folder with no ledger entry (exploratory); `touch status.json` moves file
    times, which no check reads: a late plan stays late, a timely one stays declared."""
    sweep = declared_sweep(tmp_path)
    copy = tmp_path / "archive"
    shutil.copytree(sweep, copy)
    assert all("has no entry for this folder" in line for line in rows(capsys, copy).values())

    for job in sweep.iterdir():
        if (job / "status.json").is_file():
            os.utime(job / "status.json", (0, 0))  # as old as can be
    assert rows(capsys, sweep)["relu"].endswith("| worse |")

    late = tmp_path / "late" / "sweep"
    write_units_sweep(late, SHIFTS)
    declare(late, plan())
    future = time.time() + 3600
    for job in late.iterdir():
        if (job / "status.json").is_file():
            os.utime(job / "status.json", (future, future))  # the old check: "finished after the plan"
    assert all("started with no plan" in line for line in rows(capsys, late).values())


def test_seeds_added_or_removed_after_the_results_are_exploratory(tmp_path: Path, capsys):
    sweep = declared_sweep(tmp_path)
    write_units_sweep(sweep, {"relu": 0.3}, seeds=[4, 5, 6], start=100)  # seeds 4-6 added after seeing 1-3
    found = rows(capsys, sweep)
    assert "exploratory (seeds 4,5,6 are not declared (1,2,3))" in found["relu"]
    assert found["silu"].endswith("| equivalent (±0.2) |")  # the other row's seeds are the plan's

    sweep = declared_sweep(tmp_path / "removed")
    silu_seed_2 = next(
        job
        for job in sweep.iterdir()
        if (job / ".hydra").is_dir()
        and "act=silu" in (job / ".hydra" / "overrides.yaml").read_text()
        and "seed=2" in (job / ".hydra" / "overrides.yaml").read_text()
    )
    shutil.rmtree(silu_seed_2)  # a declared seed's job removed
    assert "declared seed(s) 2 have no job" in rows(capsys, sweep)["silu"]


def test_variants_split_metric_and_design_are_checked_against_the_jobs(tmp_path: Path, capsys):
    sweep = declared_sweep(tmp_path, variants=("act=relu",))
    found = rows(capsys, sweep)
    assert "act=silu is not a declared comparison" in found["silu"] and found["relu"].endswith("| worse |")

    sweep = declared_sweep(tmp_path / "gone", variants=("act=relu", "act=swiglu"))
    assert "the declared comparison(s) act=swiglu have no jobs" in rows(capsys, sweep)["relu"]

    sweep = declared_sweep(tmp_path / "layout", layout="disjoint")
    assert "data.splits (blocks) is not the plan's (disjoint)" in rows(capsys, sweep)["relu"]

    # a group-sequential plan (seeds=auto) in a ledger from before that design went: no row is declared under it
    sweep = tmp_path / "seq" / "sweep"
    ledger = Path(declare(sweep, plan()).entry["ledger"])
    entry = json.loads(ledger.read_text())
    entry["plan"].update(stopping="group-sequential", looks=[3, 5], spending="kim-demets", seeds=[])
    entry["sha256"] = _entry_digest(entry)
    ledger.write_text(json.dumps(entry, sort_keys=True) + "\n")
    (sweep / PLAN_FILE).write_text(json.dumps({**entry, "ledger": str(ledger)}))
    write_units_sweep(sweep, SHIFTS)
    assert "a group-sequential plan (seeds=auto): that design is gone" in rows(capsys, sweep)["relu"]


def test_too_few_seeds_or_blocks_cannot_be_declared(tmp_path: Path, capsys):
    """Issue 43 item 3: fewer than 3 seeds, fewer than 4 held-out blocks, or no per-window
    losses at all (the text fixed): exploratory, and the table says why."""
    sweep = tmp_path / "two" / "sweep"
    declare(sweep, plan(seeds=(1, 2)))
    write_units_sweep(sweep, SHIFTS, seeds=[1, 2])
    assert "2 seed pair(s): a declared verdict needs >= 3" in rows(capsys, sweep)["relu"]

    sweep = tmp_path / "blocks" / "sweep"
    declare(sweep, plan())
    write_units_sweep(sweep, SHIFTS, blocks=2)
    assert "2 held-out text block(s); a declared verdict needs >= 4" in rows(capsys, sweep)["relu"]

    sweep = tmp_path / "val" / "sweep"
    declare(sweep, plan(metrics=("val/loss",), split="val"))
    write_sweep(sweep, {"gelu": [3.0, 3.1, 2.9], "relu": [3.6, 3.75, 3.45], "silu": [3.01, 3.1, 2.92]})
    assert "no per-window test losses (a val/* or BLEU metric" in rows(capsys, sweep)["relu"]


def test_rows_outside_the_plan_are_exploratory_by_name(tmp_path: Path):
    declaration = declare(
        tmp_path / "s", plan(metrics=("test/loss", "test/bpb"), margin={"test/loss": 0.2, "test/bpb": 0.3})
    )
    both = [(None, "test/loss", ["act=relu"]), (None, "test/bpb", ["act=relu"])]
    partial = Call("act=gelu", "steps", {"test/loss": 0.2}, both[:1])  # half the family: another correction
    assert "whole family" in check_rows(declaration, partial)[0][(None, "test/loss", "act=relu")]
    moved = Call("act=gelu", "steps", {"test/loss": 0.5, "test/bpb": 0.3}, both)
    assert "margin 0.5" in check_rows(declaration, moved)[0][(None, "test/loss", "act=relu")]
    other = Call("act=relu", "steps", {"test/loss": 0.2, "test/bpb": 0.3}, both)
    assert all("baseline" in v for v in check_rows(declaration, other)[0].values())
    none = check_rows(None, moved)
    assert set(none[0].values()) == {"exploratory (no declared plan)"} and "No analysis plan" in none[1][0]


def test_declare_needs_the_seeds_it_will_be_checked_against(tmp_path: Path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        declare_command.main([str(tmp_path / "s"), "--metric", "test/loss", "--baseline", "act=gelu"])
    assert exit_info.value.code == 2 and "declare the verdict seeds" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # the group-sequential design's looks: gone, and what replaces them
        declare_command.main([str(tmp_path / "s"), "--metric", "test/loss", "--baseline", "act=gelu", "--looks", "3,5"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "group-sequential design is gone" in err and "--seeds 1,2,3,4,5" in err
    assert "planner" in err and not (tmp_path / "s").exists()


def test_the_plan_note_names_its_outside_anchor_and_earlier_plans(tmp_path: Path, capsys):
    """Issue 51 item 2: the note under a declared table says what vouches for the plan's time
    outside the folder (the git commit, the W&B run) or that nothing does, and lists earlier plans
    for the same comparison in the ledger (a comparison declared again after a first result)."""
    first = tmp_path / "first"
    declare(first, plan(margin=0.5))
    sweep = tmp_path / "sweep"
    declaration = declare(sweep, plan())
    write_units_sweep(sweep, SHIFTS)
    summarize_command.main([str(sweep), "--plan", "--out", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert f"Anchored outside the folder: git commit {declaration.entry['git_commit'][:12]}" in out
    assert "Earlier plans for this comparison in the ledger (1): entry 1 (" in out and "first, margin 0.5" in out
    none = dict(declaration.entry, git_commit=None, wandb_run_id=None)
    assert "Not anchored outside the folder" in anchor_note(none)
    declare_command.main(
        [
            str(tmp_path / "s"),
            "--metric",
            "test/loss",
            "--baseline",
            "act=gelu",
            "--seeds",
            "1,2,3",
            "--layout",
            "blocks",
        ]
    )
    assert "declared in" in capsys.readouterr().out and read_plan(tmp_path / "s").plan.layout == "blocks"
    with pytest.raises(SystemExit) as exit_info:
        summarize_command.main([str(tmp_path / "s"), "--plan", "--margin", "0.05"])
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
