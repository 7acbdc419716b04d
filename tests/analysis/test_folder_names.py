"""The analysis reads a sweep whatever its job folders are called: the current names
(``norm-pre.seed-1``) and those of earlier versions (``norm=pre,seed=1``) side by side; and when it
is given no sweep, its message names where sweeps are (``logs/multirun/<sweep>``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from ablate.analysis.runs import find_job_dirs, load_sweep


def write_job(job: Path, overrides: list[str], loss: float) -> None:
    (job / ".hydra").mkdir(parents=True)
    (job / "csv").mkdir()
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"data": {"batch_size": 4, "seq_len": 16}}))
    record = {"status": "completed", "overrides": overrides, "steps": 10, "metrics": {"val/loss": loss}}
    (job / "status.json").write_text(json.dumps(record))
    (job / "csv" / "metrics.csv").write_text(f"step,val/loss\n10,{loss}\n")


def test_old_and_new_job_folders_summarise_together(tmp_path: Path) -> None:
    sweep = tmp_path / "norm,seed-0123abcd"  # a sweep folder named the earlier way
    write_job(sweep / "norm=pre,seed=1", ["norm=pre", "seed=1"], 2.0)
    write_job(sweep / "norm=post,seed=1", ["norm=post", "seed=1"], 2.2)
    write_job(sweep / "norm-pre.seed-2", ["norm=pre", "seed=2"], 2.1)  # resumed or extended since
    write_job(sweep / "norm-post.seed-2", ["norm=post", "seed=2"], 2.3)
    loaded = load_sweep(sweep)
    assert len(loaded.jobs) == 4 and loaded.axes == ["norm"]
    assert sorted((j.value("norm"), j.seed) for j in loaded.jobs) == [("post", 1), ("post", 2), ("pre", 1), ("pre", 2)]


def test_the_path_hint_names_the_sweep_folders(tmp_path: Path) -> None:
    """It said ``logs/multirun/<timestamp>``: sweep folders have not been timestamps for a while."""
    for where in (tmp_path / "missing", tmp_path):
        with pytest.raises(FileNotFoundError) as err:
            find_job_dirs(where)
        assert "logs/multirun/<sweep>" in str(err.value) and "timestamp" not in str(err.value)
