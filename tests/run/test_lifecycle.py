"""What a command does to a run directory (ablate.run.plan, ablate.run.record): a refused command
changes nothing and leaves nothing; an interrupted run says how to resume it, in a command that is
safe to paste; the same command typed again finds the interrupted run; a closed terminal (SIGHUP)
stops after the step like SIGTERM; a killed writer's temporary files go at the next start."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.checkpoints.files import abandoned_writes
from ablate.run.lock import RunDirectoryLock
from ablate.run.plan import Job, RunControl
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO, TINY

RUN = [*TINY, "logger=csv", "callbacks.checkpoint_last.every_n_train_steps=3"]
CTRL_C_AT_4 = ["+callbacks.ctrl_c._target_=helpers.signal_at_step.SignalAtStep", "+callbacks.ctrl_c.step=4"]


def train(workdir: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "WANDB_SILENT": "true",
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(workdir / "cache"),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, str(REPO / "train.py"), f"paths.log_dir={workdir / 'logs'}", *RUN, *args]
    return forked_python.run(
        cmd, cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HANG_TIMEOUT
    )


def checksums(run_dir: Path) -> dict[str, str]:
    """md5 of every file under ``run_dir`` (hidden ones included: .hydra/, .lock)."""
    return {
        str(p.relative_to(run_dir)): hashlib.md5(p.read_bytes()).hexdigest() for p in run_dir.rglob("*") if p.is_file()
    }


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


# ------------------------------------------------------------------ a refused command


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lifecycle")


@pytest.fixture(scope="module")
def finished(workdir: Path, data_dir: Path) -> Path:
    run_dir = workdir / "logs" / "finished"
    proc = train(workdir, data_dir, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (run_dir / ".hydra" / "config.yaml").is_file() and (run_dir / ".hydra" / "overrides.yaml").is_file()
    return run_dir


@pytest.mark.integration
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["seed=99", "model.n_layers=3"], "already holds a run"),  # a new run into a finished run's directory
        (["act=relu", "ckpt_path=last"], "refusing to resume"),  # a resume under other settings
        (["trainer.max_steps=-5"], "trainer.max_steps=-5 is invalid"),  # a bad number
    ],
    ids=["holds-a-run", "other-settings", "bad-number"],
)
def test_a_refused_command_changes_no_file_of_the_run(
    workdir: Path, data_dir: Path, finished: Path, args: list[str], message: str
) -> None:
    before = checksums(finished)
    proc = train(workdir, data_dir, *args, f"hydra.run.dir={finished}")
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr[-2000:]
    assert checksums(finished) == before  # .hydra/ included: Hydra no longer rewrites it before the checks


@pytest.mark.integration
def test_a_command_refused_because_the_run_is_busy_changes_nothing(
    workdir: Path, data_dir: Path, finished: Path
) -> None:
    with RunDirectoryLock(finished):  # a live process holds the run
        before = checksums(finished)
        proc = train(workdir, data_dir, "ckpt_path=last", f"hydra.run.dir={finished}")
        assert proc.returncode == 2 and "is in use by another process" in proc.stderr, proc.stderr[-2000:]
        assert checksums(finished) == before


@pytest.mark.integration
@pytest.mark.parametrize("args", [["+model.foo=1"], ["trainer.max_steps=-5"]], ids=["unknown-key", "bad-number"])
def test_a_refused_new_run_leaves_no_run_directory(tmp_path: Path, data_dir: Path, args: list[str]) -> None:
    proc = train(tmp_path, data_dir, *args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert list((tmp_path / "logs" / "runs").glob("*")) == []  # no real-looking logs/runs/<time>/


# ------------------------------------------------------------------ an interrupted run


@pytest.mark.integration
def test_the_printed_resume_command_is_safe_to_paste_and_resumes(tmp_path: Path, data_dir: Path) -> None:
    """A directory whose name holds shell syntax: the resume command printed after Ctrl-C, pasted into
    bash, runs no code from it and resumes the run (each of its words quoted for the shell and the
    directory quoted for Hydra); it names the checkpoint and the directory once each."""
    run_dir = tmp_path / "logs" / "q'$(touch INJECTED)'z"
    proc = train(tmp_path, data_dir, *CTRL_C_AT_4, f'hydra.run.dir="{run_dir}"')
    assert proc.returncode == 130, proc.stderr[-3000:]
    command = re.search(r"resume with: (.*)$", proc.stderr, re.M).group(1)
    assert command.count("ckpt_path=") == 1 and command.count("hydra.run.dir=") == 1 and "  " not in command
    assert shlex.split(command)[:2] == ["python", "train.py"]
    pasted = command.replace(
        "python train.py", f"{shlex.quote(sys.executable)} {shlex.quote(str(REPO / 'train.py'))}", 1
    )
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "WANDB_SILENT": "true",
           "ABLATE_DATA_DIR": str(data_dir), "ABLATE_CACHE_DIR": str(tmp_path / "cache"), "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])}  # fmt: skip
    resumed = subprocess.run(
        ["bash", "-c", pasted], cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
        timeout=HANG_TIMEOUT,
    )  # fmt: skip
    assert not list(tmp_path.rglob("INJECTED")), "the pasted command ran code from the directory's name"
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    record = status(run_dir)
    assert record["status"] == "completed" and record["resumed_from"] == str(run_dir / "checkpoints" / "last.ckpt")


@pytest.mark.integration
def test_the_same_command_typed_again_finds_the_interrupted_run(tmp_path: Path, data_dir: Path) -> None:
    """Ctrl-C, then the same command again: a new run starts, saying which unfinished run of the same
    configuration it could have continued and how; with ``ckpt_path=last`` alone the latest unfinished
    run is continued in its own directory (the command's new directory does not stay behind)."""
    interrupt_once = [*CTRL_C_AT_4, f"+callbacks.ctrl_c.once_file={tmp_path / 'interrupted'}"]
    assert train(tmp_path, data_dir, *interrupt_once).returncode == 130
    (interrupted,) = (tmp_path / "logs" / "runs").iterdir()
    again = train(tmp_path, data_dir, *interrupt_once)  # the same command: a new run, with a note
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"note: {interrupted} is an unfinished run of this configuration" in again.stdout
    assert f"ckpt_path=last hydra.run.dir={interrupted}" in again.stdout
    runs = set((tmp_path / "logs" / "runs").iterdir())
    assert len(runs) == 2 and status(interrupted)["status"] == "interrupted"
    resumed = train(tmp_path, data_dir, *interrupt_once, "ckpt_path=last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"continuing {interrupted}" in resumed.stdout and "no last checkpoint" not in resumed.stderr
    assert set((tmp_path / "logs" / "runs").iterdir()) == runs  # no third directory
    record = status(interrupted)
    assert record["status"] == "completed" and record["steps"] == 6
    assert record["resumed_from"] == str(interrupted / "checkpoints" / "last.ckpt")


@pytest.mark.integration
def test_a_closed_terminal_stops_after_the_step_like_sigterm(tmp_path: Path, data_dir: Path) -> None:
    """SIGHUP (the terminal closed, an SSH connection dropped) used to end the run at once with exit
    129 and no record: it stops after its step, saved and recorded, exit 130."""
    run_dir = tmp_path / "logs" / "hangup"
    proc = train(
        tmp_path,
        data_dir,
        f"hydra.run.dir={run_dir}",
        "+callbacks.hup._target_=helpers.signal_at_step.SignalAtStep",
        "+callbacks.hup.step=4",
        "+callbacks.hup.signum=1",
    )
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert status(run_dir)["status"] == "interrupted" and status(run_dir)["steps"] == 4
    assert "SIGHUP: stopping after this step" in proc.stderr
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["global_step"] == 4


# ------------------------------------------------------------------ units


def test_the_resume_command_is_minimal_and_quoted() -> None:
    control = RunControl(Path("/runs/a b"), Path("/runs"), ())
    job = Job(control, ["model=tiny", "ckpt_path=last", "hydra.run.dir=/x", "overwrite=true", "+x=[1,2]"])
    words = shlex.split(job.resume_command())  # what bash passes to train.py
    assert words == ["python", "train.py", "model=tiny", "+x=[1,2]", "ckpt_path=last", 'hydra.run.dir="/runs/a b"']
    plain = Job(RunControl(Path("/runs/2026-01-02_10-11-12"), Path("/runs"), ()), ["seed=3"])
    assert plain.resume_command() == "python train.py seed=3 ckpt_path=last hydra.run.dir=/runs/2026-01-02_10-11-12"


def no_process() -> int:
    """A process id no process can have (above the kernel's largest)."""
    return int(Path("/proc/sys/kernel/pid_max").read_text()) + 1


def test_a_killed_writers_temporary_files_are_found_and_a_live_ones_are_not(tmp_path: Path) -> None:
    dead = no_process()
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    abandoned = [folder / f".last.ckpt.tmp-{dead}", folder / f".last.ckpt.previous-{dead}"]
    live = folder / f".last.ckpt.tmp-{os.getpid()}"
    for path in [*abandoned, live, folder / "last.ckpt"]:
        path.write_bytes(b"x")
    assert abandoned_writes([folder, tmp_path / "missing"]) == sorted(abandoned)


@pytest.mark.integration
def test_the_next_start_removes_what_a_killed_writer_left(workdir: Path, data_dir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    leftover = run_dir / "checkpoints" / f".last.ckpt.tmp-{no_process()}"  # kill -9 during a save
    leftover.write_bytes(b"partial")
    proc = train(workdir, data_dir, f"hydra.run.dir={run_dir}", "trainer.max_steps=3", "trainer.val_check_interval=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert not leftover.exists() and not list((run_dir / "checkpoints").glob(".*"))
