"""The end of a sweep: a job refused for a user error is recorded as ``refused`` (its message, no
traceback), is retried by a re-run, and a sweep whose every failed job was refused ends with exit
code 2, like a refused run; a crash or a kill among them makes it 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from ablate import cli
from ablate.run.status import FINISHED, RunStatus
from ablate.sweepers.sweep_report import SweepReport


def write_jobs(sweep_dir: Path, statuses: dict[str, str]) -> None:
    for name, status in statuses.items():
        (sweep_dir / name).mkdir(parents=True)
        record = RunStatus(status, error="data.train_path=missing.txt: no such file" if status == "refused" else None)
        (sweep_dir / name / "status.json").write_text(json.dumps(record.to_json()))


def end_of_sweep(sweep_dir: Path) -> int:
    report = SweepReport()
    report._start = 0.0  # every record counts as written by this command
    with pytest.raises(SystemExit) as ended:
        report.on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}}))
    return int(ended.value.code)


def test_a_sweep_whose_failed_jobs_were_all_refused_exits_2(tmp_path: Path, capsys) -> None:
    write_jobs(tmp_path, {"norm-pre.seed-1": "completed", "norm-post.seed-1": "refused"})
    assert end_of_sweep(tmp_path) == cli.EXIT_USER_ERROR
    err = capsys.readouterr()
    assert "refused: norm-post.seed-1: data.train_path=missing.txt" in err.out
    assert "Traceback" not in err.out + err.err


def test_a_crash_beside_a_refusal_exits_1(tmp_path: Path) -> None:
    write_jobs(tmp_path, {"norm-pre.seed-1": "crashed", "norm-post.seed-1": "refused"})
    assert end_of_sweep(tmp_path) == cli.EXIT_CRASHED


def test_a_refused_job_is_not_finished_so_a_re_run_retries_it() -> None:
    assert "refused" not in FINISHED
