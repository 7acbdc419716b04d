"""Resuming a completed run changes no record unless the user allows a change (issue 17.6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers.runs import TINY

pytestmark = pytest.mark.integration


def test_resuming_a_completed_run_says_so_and_rewrites_nothing(run_train, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_train(*TINY, "logger=csv", f"hydra.run.dir={run_dir}")
    records = [run_dir / "status.json", run_dir / "csv" / "metrics.csv", run_dir / "checkpoints" / "last.ckpt"]
    before = {p: p.read_bytes() for p in records}
    assert "val/loss" in json.loads(before[run_dir / "status.json"])["metrics"]

    proc = run_train(*TINY, "logger=csv", f"hydra.run.dir={run_dir}", "ckpt_path=last")
    assert "already completed" in proc.stdout and "resume_allow_changes=[trainer.max_steps]" in proc.stdout
    assert {p: p.read_bytes() for p in records} == before  # not one byte of any record changed

    # allowed to train longer, it does, and the record says so
    run_train(
        *TINY,
        "logger=csv",
        f"hydra.run.dir={run_dir}",
        "ckpt_path=last",
        "trainer.max_steps=9",
        "+resume_allow_changes=[trainer.max_steps]",
    )
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed" and status["steps"] == 9
