"""status.json has one schema (ablate.run.status.RunStatus): what is written reads back the same, a
task's own entries travel beside the standard ones, and a file that is not a record reads as none."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.run.status import RunStatus, read_status, record_status, write_status


def test_a_completed_record_round_trips_with_the_tasks_entries(tmp_path: Path) -> None:
    status = RunStatus(
        "completed",
        ["norm=post"],
        steps=30,
        wall_time_s=1.5,
        metrics={"val/loss": 2.5, "val/ppl": None},
        params=1234,
        axes={"norm": "post"},
        world_size=1,
        accumulate_grad_batches=1,
        extra={"eval_lengths": {"64": {"tokens": 128}}},
    )
    write_status(tmp_path, status)
    on_disk = json.loads((tmp_path / "status.json").read_text())
    assert on_disk["eval_lengths"] == {"64": {"tokens": 128}} and on_disk["metrics"]["val/ppl"] is None
    assert on_disk["diverged_at_step"] is None and on_disk["resumed_from"] is None  # every key, null if unused
    assert read_status(tmp_path) == status


def test_a_crash_records_no_steps_or_metrics() -> None:
    record = RunStatus("crashed", [], error="RuntimeError: boom", traceback="...").to_json()
    assert record["error"] == "RuntimeError: boom" and record["steps"] is None and record["metrics"] == {}


def test_what_is_not_a_record_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="valid outcomes"):
        RunStatus("finished")
    with pytest.raises(ValueError, match="would overwrite"):
        RunStatus("completed", extra={"steps": 3}).to_json()
    for text in ("{not json", '{"status": "exploded"}', "[1, 2]", '{"steps": 3}'):
        (tmp_path / "status.json").write_text(text)
        assert read_status(tmp_path) is None, text


def test_a_finished_record_is_final(tmp_path: Path) -> None:
    record_status(tmp_path, RunStatus("completed", steps=10))
    record_status(tmp_path, RunStatus("crashed", error="resume failed"))
    assert read_status(tmp_path) == RunStatus("completed", steps=10)
    assert json.loads((tmp_path / "status.failed.json").read_text())["error"] == "resume failed"
