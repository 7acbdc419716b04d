"""Issue 52 item 4 on real summaries (the fifth hostile round): every key of ``--baseline`` is used
or refused by name, and a completed seed whose metric is NaN is named in a note and left out of
every column alike (the table's n is one n)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO
from helpers.sweeps import write_job, write_sweep

pytestmark = pytest.mark.integration


def summarize(*args: str) -> subprocess.CompletedProcess:
    return forked_python.run(
        [sys.executable, str(REPO / "scripts" / "summarize.py"), *args],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


@pytest.mark.parametrize(
    ("baseline", "named"),
    [
        ("act=gelu,act=relu", "names act 2 times"),  # was: the last one, silently
        ("act=gelu,seed=1", "seed is not a variant key"),  # was: seed=1 ignored
        ("atc=gelu", "atc is neither an axis nor a config key"),
    ],
)
def test_every_baseline_key_is_used_or_refused_by_name(tmp_path: Path, baseline: str, named: str):
    sweep = write_sweep(tmp_path / "sweep", {"gelu": [3.0, 3.1, 3.2], "relu": [3.2, 3.3, 3.4]})
    proc = summarize(str(sweep), "--metric", "val/loss", "--baseline", baseline)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"--baseline {baseline}: {named}" in proc.stderr
    assert "Traceback" not in proc.stderr and not (sweep / "summary.csv").exists()


def nan_seed_sweep(root: Path, recorded: float | None) -> Path:
    """act=gelu,relu x seeds 1-3, val/loss logged every 10 steps; gelu's seed 3 completed with NaN
    in every row of its metrics.csv (``recorded``: the val/loss its status.json holds)."""
    steps = list(range(10, 101, 10))
    index = 0
    for act, offset in (("gelu", 0.0), ("relu", 0.3)):
        for seed in (1, 2, 3):
            final = 3.0 + offset + 0.1 * seed
            nan = act == "gelu" and seed == 3
            loss = [math.nan] * len(steps) if nan else [final + (100 - s) / 100 * seed for s in steps]
            job = write_job(
                root,
                index,
                [f"act={act}", f"seed={seed}"],
                "",
                None,
                metrics=pd.DataFrame({"step": steps, "val/loss": loss}),
            )
            record = json.loads((job / "status.json").read_text())
            record["metrics"] = {"val/loss": recorded if nan else final}
            (job / "status.json").write_text(json.dumps(record))
            index += 1
    return root


@pytest.mark.parametrize("recorded", [3.3, None], ids=["NaN only in metrics.csv", "NaN everywhere"])
def test_a_completed_seed_with_nan_metrics_is_named_and_left_out_of_every_column(tmp_path: Path, recorded):
    sweep = nan_seed_sweep(tmp_path / "sweep", recorded)
    proc = summarize(str(sweep), "--metric", "val/loss", "--baseline", "act=relu")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "002 (seed 3) completed, but its val/loss is NaN" in proc.stdout  # was: dropped without a word
    assert "002 (seed 3)" in (sweep / "summary.md").read_text()
    gelu = pd.read_csv(sweep / "summary.csv").set_index("act").loc["gelu"]
    seeds_1_2 = (3.1 + 3.2) / 2
    assert gelu["val/loss final mean"] == pytest.approx(seeds_1_2)  # was n=3 (status.json's 3.3 taken)
    assert gelu["val/loss @steps mean"] == pytest.approx(seeds_1_2)  # the same seeds in the matched-budget column
    assert gelu["late_change"] == pytest.approx(-0.15)  # and in the slope: seeds 1 and 2 (-0.1, -0.2)
    assert gelu["val/loss final n"] == 2 and gelu["mean_seeds"] == "1,2"


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--metric", "val/ppl", "--seeds", "1,2,3"], "--metric val/ppl is not on the plan's split (test"),
        (["--metric", "test/ppl", "--seeds", "1,2,3"], "--metric test/ppl: runs save per-window losses"),
        (
            ["--metric", "test/loss", "--seeds", "1,2,3", "--layout", "nanogpt"],
            "--layout nanogpt: its test split is one",
        ),
        (["--metric", "test/loss", "--seeds", "1,2"], "--seeds 1,2: a declared verdict needs >= 3 seeds"),
    ],
)
def test_declare_refuses_a_plan_that_can_never_give_a_declared_verdict(tmp_path: Path, args, named):
    """Was: declared and recorded, and every verdict it governs labelled exploratory by summarize.py."""
    proc = forked_python.run(
        [
            sys.executable,
            str(REPO / "scripts" / "declare.py"),
            str(tmp_path / "sweep"),
            "--baseline",
            "norm=pre",
            *args,
        ],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert named in proc.stderr and "Traceback" not in proc.stderr
    assert not list(tmp_path.rglob("analysis_*"))  # no plan, no ledger entry
