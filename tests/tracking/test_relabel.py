"""A sweep re-run with new ``tags`` relabels its finished jobs instead of training them again, and
says so; the sweep's table lists every job of the command, skipped ones too (issue 35 items 1, 10)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from ablate.tracking.relabel import new_tags, wandb_run_id
from helpers.runs import TINY


def test_the_run_id_is_read_from_the_newest_run_folder(tmp_path: Path) -> None:
    for name in ("offline-run-20261127_113747-otnxm0wr", "offline-run-20261127_113819-otnxm0wr", "debug.log"):
        (tmp_path / "wandb" / name).mkdir(parents=True)
    assert wandb_run_id(tmp_path) == "otnxm0wr"
    assert wandb_run_id(tmp_path / "nothing") is None


def test_only_other_tags_relabel() -> None:
    assert new_tags(["baseline"], None) == ["baseline"]
    assert new_tags(["baseline"], ["baseline"]) is None
    assert new_tags([], None) is None
    assert new_tags([], ["old"]) == []  # tags removed: relabelled too


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


@pytest.mark.integration
def test_sweep_rerun_with_tags_relabels_instead_of_training(run_train, tmp_path: Path) -> None:
    from ablate.tracking.wandb_reader import find_run_dirs, read_offline_run

    tiny = [o for o in TINY if not o.startswith("trainer.max_steps")] + ["trainer.max_steps=2"]
    run_train("-m", "norm=pre,post", "logger=wandb", *tiny)
    jobs = sorted(p.parent for p in (tmp_path / "logs" / "multirun").glob("*/*/status.json"))
    assert len(jobs) == 2
    trained = {job: md5(job / "csv" / "metrics.csv") for job in jobs}

    proc = run_train("-m", "norm=pre,post", "logger=wandb", "tags=[baseline]", *tiny)
    assert proc.stdout.count("nothing was trained") == 2, proc.stdout[-3000:]
    assert "2 jobs: 2 relabelled" in proc.stdout, proc.stdout[-2000:]
    for job in jobs:
        assert md5(job / "csv" / "metrics.csv") == trained[job]  # not trained again
        assert json.loads((job / "status.json").read_text())["tags"] == ["baseline"]
        newest = read_offline_run(find_run_dirs(job / "wandb")[-1])
        assert "baseline" in newest["tags"], newest["tags"]
        assert newest["run_id"] == read_offline_run(find_run_dirs(job / "wandb")[0])["run_id"]  # the same W&B run

    again = run_train("-m", "norm=pre,post", "logger=wandb", "tags=[baseline]", *tiny)
    assert "nothing was trained" not in again.stdout  # the same labels: nothing to do
    assert "2 jobs: 2 skipped" in again.stdout, again.stdout[-2000:]  # skipped jobs are listed, not left out
