"""Issue 52 items 1, 2, 4 and 5 on real runs (the fifth hostile round): nothing outside the run is
written through its ``.lock``; a full disk after the run trained keeps what it trained; a failed
attempt to train a finished run longer leaves the run's files as they were; a copied run trained
longer keeps its best in ``best.ckpt``; a refusal takes back only what the command added.

A full disk is simulated by a callback that makes ``torch.save`` fail with ENOSPC for ``last.ckpt``
from a given step on (``helpers.signal_at_step.DiskFullAtStep``): a 1 MB tmpfs cannot be mounted
where the tests run."""

from __future__ import annotations

import csv
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from helpers.hostile_runs import TINY_RUN, command, refused, text

pytestmark = pytest.mark.integration

EVERY_3 = ["callbacks.checkpoint_last.every_n_train_steps=3"]


def disk_full_at(step: int) -> list[str]:
    return ["+callbacks.disk._target_=helpers.signal_at_step.DiskFullAtStep", f"+callbacks.disk.step={step}"]


def files(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path, with its bytes (links and the lock aside)."""
    return {
        str(p.relative_to(folder)): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink() and p.name != ".lock"
    }


def step_of(path: Path) -> int:
    return torch.load(path, map_location="cpu", weights_only=True)["global_step"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> dict:
    """A finished tiny run of 6 steps (validated at 3 and 6, last.ckpt every 3), and where it lives."""
    where = tmp_path_factory.mktemp("finished")
    (where / "T.txt").write_text(text(400, 0))
    (where / "V.txt").write_text(text(60, 1))
    data = [f"data.train_path={where / 'T.txt'}", f"data.val_path={where / 'V.txt'}"]
    proc = command("train.py", [*TINY_RUN, *EVERY_3, *data, f"hydra.run.dir={where / 'run'}"], where)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"where": where, "run": where / "run", "args": [*TINY_RUN, *EVERY_3, *data]}


def copy_of(finished: dict, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished["run"], run, symlinks=True)  # cp -a
    return run


def longer(finished: dict, run: Path, steps: int, *extra: str) -> subprocess.CompletedProcess:
    """Train ``run`` to ``steps`` steps (the finished run's command, allowed to train longer)."""
    args = [*finished["args"], f"hydra.run.dir={run}", "ckpt_path=last", f"trainer.max_steps={steps}"]
    return command("train.py", [*args, "+resume_allow_changes=[trainer.max_steps]", *extra], run.parent)


# --- item 1: the lock file -------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["ckpt_path=last", "overwrite=true"])
def test_a_lock_linked_to_a_file_outside_the_run_is_refused_and_the_file_kept(finished, tmp_path, how):
    run, theirs = copy_of(finished, tmp_path), tmp_path / "theirs.txt"
    theirs.write_text("the user's notes")
    (run / ".lock").unlink()
    (run / ".lock").symlink_to(theirs)
    before = files(run)
    proc = command("train.py", [*finished["args"], f"hydra.run.dir={run}", how], tmp_path)
    assert theirs.read_text() == "the user's notes"
    assert files(run) == before  # the run's checkpoints, record and log as they were
    refused(proc, f"{run / '.lock'} is a symbolic link (to {theirs}): refused")


# --- item 2: a full disk after the run trained ------------------------------------------------------


def test_a_full_disk_after_the_run_trained_keeps_what_it_trained(finished, tmp_path):
    run = tmp_path / "run"
    args = [*finished["args"], "trainer.max_steps=9", f"hydra.run.dir={run}", *disk_full_at(6)]
    proc = command("train.py", args, tmp_path)
    assert step_of(run / "checkpoints" / "last.ckpt") == 3  # the save before the full disk
    assert (run / "checkpoints" / "best.ckpt").is_file() and (run / "csv" / "metrics.csv").is_file()
    assert (run / "train.log").is_file()
    refused(proc, f"No space left on device writing {run / 'checkpoints' / 'last.ckpt'}")
    assert f"{run} keeps what it trained (last checkpoint: {run / 'checkpoints' / 'last.ckpt'})" in proc.stderr
    record = (run / "status.json").read_text()
    assert '"status": "refused"' in record and "No space left on device" in record


# --- item 4: records that say what is on disk -------------------------------------------------------


def test_a_full_disk_while_a_finished_run_is_trained_longer_leaves_its_files_as_they_were(finished, tmp_path):
    run = copy_of(finished, tmp_path)
    before = files(run)
    proc = longer(finished, run, 12, *disk_full_at(12))  # steps 7-12 trained, best.ckpt saved at 9, then full
    refused(proc, "No space left on device writing")
    failed = (run / "status.failed.json").read_text()
    assert '"status": "refused"' in failed and "No space left on device" in failed
    after = files(run)
    del after["status.failed.json"], after["train.log"], before["train.log"]  # the log goes on
    assert after == before  # best.ckpt, last.ckpt, .hydra/config.yaml, csv/ and status.json as they were


def test_a_copied_run_trained_longer_keeps_its_best_in_best_ckpt(finished, tmp_path):
    original = files(finished["run"])
    run = copy_of(finished, tmp_path)
    proc = longer(finished, run, 12)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["best.ckpt", "last.ckpt"]
    with open(run / "csv" / "metrics.csv") as f:  # a validation after step N is logged at step N - 1
        val = {int(r["step"]) + 1: float(r["val/loss"]) for r in csv.DictReader(f) if r.get("val/loss")}
    assert sorted(val) == [3, 6, 9, 12]
    assert step_of(run / "checkpoints" / "best.ckpt") == min(val, key=val.__getitem__)  # this run's best
    assert files(finished["run"]) == original  # the run it was copied from is untouched


# --- item 5: refusals that change nothing -------------------------------------------------------------


@pytest.mark.parametrize("held", [[], ["notes.txt"]])
def test_a_refused_resume_leaves_the_users_folder_as_it_was(finished, tmp_path, held):
    folder = tmp_path / "mine"
    folder.mkdir()
    for name in held:
        (folder / name).write_text("the user's")
    proc = command("train.py", [*finished["args"], f"hydra.run.dir={folder}", "ckpt_path=last"], tmp_path)
    assert folder.is_dir() and sorted(p.name for p in folder.iterdir()) == held  # the folder stays, as it was
    refused(proc, f"{folder} holds no checkpoint to continue (no last.ckpt in {folder / 'checkpoints'});")
    assert proc.stderr.count(str(folder / "checkpoints")) == 1


def test_a_resume_refused_on_changed_data_leaves_the_run_as_it_was(finished, tmp_path):
    run, corpus = copy_of(finished, tmp_path), finished["where"] / "T.txt"
    before, original = files(run), corpus.read_text()
    corpus.write_text(text(400, 7))  # other text: refused once the data is read, after the run took its folder
    try:
        proc = longer(finished, run, 9)
    finally:
        corpus.write_text(original)
    refused(proc, "refusing to resume", "data.content.train")
    assert files(run) == before  # train.log, .hydra/ and csv/ included


def test_a_refusal_for_missing_data_leaves_no_run_folders(tmp_path):
    (tmp_path / "data").mkdir()
    env_data = f"paths.data_dir={tmp_path / 'data'}"
    proc = command("train.py", [*TINY_RUN[:1], *TINY_RUN[2:], env_data], tmp_path)  # the default corpus, absent
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert not (tmp_path / "logs" / "runs").exists(), list((tmp_path / "logs").rglob("*"))
