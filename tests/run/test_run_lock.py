"""One run per directory (issue 17.2): a second process is refused naming the holder; a fresh run into
a directory holding another run is refused unless overwrite=true."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.run.lock import RunDirectoryBusy, RunDirectoryLock
from helpers.runs import TINY


def test_a_second_holder_is_refused_naming_the_first(tmp_path: Path) -> None:
    with RunDirectoryLock(tmp_path):
        holder = json.loads((tmp_path / ".lock").read_text())
        with pytest.raises(RunDirectoryBusy, match=rf"in use by another process \(pid {holder['pid']} on "):
            RunDirectoryLock(tmp_path).__enter__()  # a second open file: as another process would hold it
    with RunDirectoryLock(tmp_path):  # released on exit: free again
        pass


def test_a_stale_lock_is_taken_over_with_a_notice(tmp_path: Path, capsys) -> None:
    (tmp_path / ".lock").write_text(json.dumps({"pid": 999999, "host": "gone", "started": "2026-01-01 00:00:00"}))
    with RunDirectoryLock(tmp_path):
        pass
    assert "taking over the stale lock of pid 999999 on gone" in capsys.readouterr().out


@pytest.mark.integration
def test_a_fresh_run_into_another_runs_directory_is_refused(run_train, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_train(*TINY, "logger=csv", f"hydra.run.dir={run_dir}")
    before = (run_dir / "status.json").read_bytes()
    proc = run_train(*TINY, "logger=csv", f"hydra.run.dir={run_dir}", "seed=2", check=False)
    assert proc.returncode == 2 and "already holds a run" in proc.stderr and "ckpt_path=last" in proc.stderr
    assert (run_dir / "status.json").read_bytes() == before  # the first run's record is untouched
    run_train(*TINY, "logger=csv", f"hydra.run.dir={run_dir}", "seed=2", "overwrite=true")
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"
