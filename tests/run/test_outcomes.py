"""How a job ends (ablate.run.record.finish, one table of outcomes): what is recorded, what is left
on disk, and the exit code. ``crashed`` is for faults of the program or the machine; a user error of a
single run records nothing and leaves no run folder; a command that fails before it took its
directory changes no run's record (a finished run gets no ``status.failed.json``); ``ckpt_path=last``
typed for a single run continues a run or is refused."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from pathlib import Path

import pytest

from ablate import cli
from ablate.data.sources import DataNotFoundError
from ablate.errors import ConfigError
from ablate.run import plan as job_plan
from ablate.run.plan import Job, Plan, RunControl, decide
from ablate.run.record import HANDLING, Outcome, Record, finish
from ablate.run.status import RunStatus, write_status


def job(run_dir: Path, *, multirun: bool = False, new: bool = False, given: bool = True, **control) -> Job:
    checkpoints = run_dir / "checkpoints"
    return Job(
        RunControl(run_dir, run_dir.parent, (checkpoints,), **control),
        ["model.n_layers=2"],
        multirun=multirun,
        new_directory=new,
        directory_given=given,
    )


def new_run_dir(tmp_path: Path) -> Path:
    """What Hydra makes for a command and ``decide`` writes once the job takes it."""
    run_dir = tmp_path / "runs" / "2026-01-02_10-11-12"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 1\n")
    (run_dir / "train.log").write_text("")
    (run_dir / ".lock").write_text("")
    return run_dir


def finished_run(tmp_path: Path) -> Path:
    run_dir = tmp_path / "runs" / "finished"
    (run_dir / "checkpoints").mkdir(parents=True)
    (run_dir / "checkpoints" / "last.ckpt").write_bytes(b"weights")
    write_status(run_dir, RunStatus("completed", ["model.n_layers=2"], steps=6))
    return run_dir


def checksums(run_dir: Path) -> dict[str, str]:
    return {
        str(p.relative_to(run_dir)): hashlib.md5(p.read_bytes()).hexdigest() for p in run_dir.rglob("*") if p.is_file()
    }


def test_every_outcome_of_a_single_run_and_of_a_sweeps_job_is_handled() -> None:
    assert set(HANDLING) == set(itertools.product(Outcome, (False, True)))
    assert HANDLING[Outcome.REFUSED, False].writes == "trained"  # a user error records nothing, unless it trained
    assert {h.exit_code for (o, _), h in HANDLING.items() if o is Outcome.REFUSED} == {cli.EXIT_USER_ERROR}


def test_a_user_error_after_the_directory_was_taken_leaves_no_run_folder(tmp_path: Path) -> None:
    """The missing-data error (found while the data module is built, after decide wrote the config)
    wrote a ``crashed`` record with a traceback into a new run folder."""
    run_dir = new_run_dir(tmp_path)
    record = Record(plan=Plan(), stopped_by=DataNotFoundError("Data file 'input.txt' is missing"), traceback="...")
    with pytest.raises(SystemExit) as exit_:
        finish(job(run_dir, new=True), record)
    assert exit_.value.code == cli.EXIT_USER_ERROR
    assert not run_dir.exists()


@pytest.mark.parametrize("plan", [None, Plan()], ids=["before-the-plan", "after-the-plan"])
def test_a_user_error_in_a_run_that_was_there_before_changes_nothing(tmp_path: Path, plan: Plan | None) -> None:
    run_dir = finished_run(tmp_path)
    before = checksums(run_dir)
    with pytest.raises(SystemExit) as exit_:
        finish(job(run_dir), Record(plan=plan, stopped_by=ConfigError("data.bogus is not a key")))
    assert exit_.value.code == cli.EXIT_USER_ERROR
    assert checksums(run_dir) == before


def test_a_crash_before_the_job_took_its_directory_adds_nothing_to_a_finished_run(tmp_path: Path) -> None:
    """``model.n_layers=0`` against a finished run crashed in the checks and added ``status.failed.json``
    to that run (which then survived ``overwrite=true``)."""
    run_dir = finished_run(tmp_path)
    before = checksums(run_dir)
    with pytest.raises(TypeError):
        finish(job(run_dir), Record(plan=None, stopped_by=TypeError("'<' not supported"), traceback="Traceback ..."))
    assert checksums(run_dir) == before


def test_a_crash_while_training_is_recorded_with_its_traceback(tmp_path: Path) -> None:
    run_dir = new_run_dir(tmp_path)
    record = Record(plan=Plan(), stopped_by=RuntimeError("boom"), traceback="Traceback (most recent call last): ...")
    with pytest.raises(RuntimeError, match="boom"):
        finish(job(run_dir, new=True), record)
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "crashed" and "boom" in status["error"] and status["traceback"].startswith("Traceback")


def test_a_sweep_records_a_jobs_user_error_as_its_message_and_goes_on(tmp_path: Path) -> None:
    run_dir = new_run_dir(tmp_path)
    record = Record(plan=Plan(), stopped_by=ConfigError("data.eval_seq_len=200000 is too long"), traceback="...")
    value = finish(job(run_dir, multirun=True, new=True), record)
    assert value == math.inf  # ranks last
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "refused" and "too long" in status["error"] and status["traceback"] is None


def test_an_interrupt_before_the_directory_was_taken_records_nothing(tmp_path: Path, capsys) -> None:
    run_dir = new_run_dir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        finish(job(run_dir, new=True), Record(plan=None, stopped_by=KeyboardInterrupt()))
    assert exit_.value.code == cli.EXIT_INTERRUPTED
    assert not run_dir.exists() and "nothing was recorded" in capsys.readouterr().err


def test_overwrite_removes_a_failed_attempts_record_too(tmp_path: Path) -> None:
    run_dir = finished_run(tmp_path)
    (run_dir / "status.failed.json").write_text(json.dumps(RunStatus("crashed").to_json()))
    plan = decide(job(run_dir, overwrite=True), {})
    assert plan.trains and plan.ckpt_path is None
    assert not (run_dir / "status.json").exists() and not (run_dir / "status.failed.json").exists()


@pytest.mark.parametrize("given", [True, False], ids=["hydra.run.dir", "typed-again"])
def test_ckpt_path_last_without_a_checkpoint_is_refused_for_a_single_run(
    tmp_path: Path, given: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It started a fresh run in the named folder (with a raw UserWarning)."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    run_dir = tmp_path / "runs" / "2026-11-21_21-19-25"
    run_dir.mkdir(parents=True)
    with pytest.raises(ConfigError, match="nothing was started") as refused:
        decide(job(run_dir, given=given, ckpt_path="last"), {})
    assert (str(run_dir) in str(refused.value)) == given
    assert list(run_dir.iterdir()) == []  # not taken: no config written


def test_ckpt_path_last_continues_a_run_stopped_before_its_first_checkpoint_from_step_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run killed before it saved anything (its config written when it took the folder, no
    checkpoint) loses nothing: its own ``hydra.run.dir=<dir> ckpt_path=last`` starts it again."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    run_dir = tmp_path / "runs" / "killed"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text("seed: 1\n")
    plan = decide(job(run_dir, given=True, ckpt_path="last"), {})
    assert plan.trains and plan.ckpt_path is None


@pytest.mark.parametrize("where", ["sweep", "slurm"])
def test_ckpt_path_last_without_a_checkpoint_is_a_first_run_in_a_sweep_or_a_slurm_job(
    tmp_path: Path, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A requeued sweep resumes the jobs that have a checkpoint; under SLURM the same command is the
    first submission and every requeue."""
    monkeypatch.setattr(job_plan.os, "environ", {"SLURM_JOB_ID": "42"} if where == "slurm" else {})
    run_dir = tmp_path / "runs" / "job"
    run_dir.mkdir(parents=True)
    plan = decide(job(run_dir, multirun=where == "sweep", ckpt_path="last"), {})
    assert plan.trains and plan.ckpt_path is None
