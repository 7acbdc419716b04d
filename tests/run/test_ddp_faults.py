"""Stops under DDP, end to end through train.py with two CPU processes (gloo), as a user meets them.

A terminal's Ctrl-C reaches the launching process and every rank (its process group); ``kill <pid>``
or a container runtime's SIGTERM reaches the launching process alone; a closed terminal's SIGHUP
the whole group. Each time: every rank stops after the same step, that step is saved once, the
process exits 130 with the job recorded as ``interrupted`` at that step, no traceback, and the
command it prints resumes the run to exactly the uninterrupted run's numbers. A second Ctrl-C stops
at once. A SLURM requeue (two tasks as ``srun`` starts them, SLURM's environment and its
``--signal=USR1`` then SIGTERM, a stand-in ``scontrol``) saves the same way and the requeued job
resumes exactly. Every run here also enforces NCCL's device rule (``tests/helpers/device_rules.py``).
"""

from __future__ import annotations

import csv
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO

pytestmark = pytest.mark.integration

RUN = [
    "model=tiny",
    "model.dropout=0.1",  # the RNG state must be restored on every rank
    "data.seq_len=16",
    "data.batch_size=8",
    "trainer.max_steps=8",
    "trainer.val_check_interval=4",
    "trainer.limit_val_batches=2",
    "+trainer.limit_test_batches=2",
    "optim.warmup_steps=2",
    "trainer.log_every_n_steps=1",
    "callbacks.progress_bar=null",
    "callbacks.throughput.peak_flops=1e12",
    "print_config=false",
    "logger=csv",
    "trainer=ddp",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    "+callbacks.nccl._target_=helpers.device_rules.NcclDeviceRule",
]
STOP_AT = 3


def environment(workdir: Path, data_dir: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "WANDB_SILENT": "true",
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(workdir / "cache"),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
        **extra,
    }


def train(workdir: Path, data_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """``python train.py RUN args`` in its own session (a terminal's foreground job: a signal the run
    sends to its process group does not reach the test)."""
    cmd = [sys.executable, str(REPO / "train.py"), f"paths.log_dir={workdir / 'logs'}", *RUN, *args]
    return forked_python.run(
        cmd,
        cwd=workdir,
        env=environment(workdir, data_dir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        start_new_session=True,
    )


def column(run_dir: Path, key: str) -> dict[int, str]:
    """``step -> value`` as written (decimal strings: equal strings are bitwise equal floats)."""
    with open(run_dir / "csv" / "metrics.csv") as f:
        return {int(r["step"]): r[key] for r in csv.DictReader(f) if r.get(key)}


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def saved_step(run_dir: Path) -> int:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["global_step"]


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["state_dict"]


def assert_interrupted_at(proc: subprocess.CompletedProcess, run_dir: Path, step: int | None) -> int:
    """Stopped at ``step`` (None: at some step before the end, the same for every rank), saved
    once, recorded, exit 130, no traceback; returns the step."""
    assert proc.returncode == 130, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr and "SignalException" not in proc.stderr, proc.stderr[-4000:]
    record = status(run_dir)
    step = record["steps"] if step is None else step
    assert record["status"] == "interrupted" and record["steps"] == step and STOP_AT <= step < 8, record
    assert record["world_size"] == 2 and "train/loss" in record["metrics"], record
    assert "test/loss" not in record["metrics"]  # an unfinished run is not evaluated
    assert saved_step(run_dir) == step  # one checkpoint, of the step every rank stopped at
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["last.ckpt"]
    assert f"interrupted at step {step}" in proc.stderr
    return step


def assert_same_run(run_dir: Path, reference: Path) -> None:
    for key in ("train/loss", "grad_norm/total", "val/loss", "test/loss"):
        assert column(run_dir, key) == column(reference, key), key
    expected = weights(reference)
    for name, value in weights(run_dir).items():
        assert torch.equal(value, expected[name]), name


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("ddp_faults")


@pytest.fixture(scope="module")
def uninterrupted(workdir: Path, data_dir: Path) -> Path:
    run_dir = workdir / "logs" / "uninterrupted"
    proc = train(workdir, data_dir, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-4000:]
    record = status(run_dir)
    assert record["status"] == "completed" and record["steps"] == 8 and record["world_size"] == 2
    assert sorted(column(run_dir, "val/loss")) == [3, 7] and "test/loss" in record["metrics"]
    return run_dir


def signal_at(step: int, signum: int, to: str, once_file: Path) -> list[str]:
    return [
        "+callbacks.stop._target_=helpers.signal_at_step.SignalJobAtStep",
        f"+callbacks.stop.step={step}",
        f"+callbacks.stop.signum={signum}",
        f"+callbacks.stop.to={to}",
        f"+callbacks.stop.once_file={once_file}",
    ]


def test_ctrl_c_stops_every_rank_at_one_step_and_the_printed_command_resumes_exactly(
    workdir: Path, data_dir: Path, uninterrupted: Path
) -> None:
    run_dir = workdir / "logs" / "ctrl_c"
    proc = train(workdir, data_dir, f"hydra.run.dir={run_dir}", *signal_at(STOP_AT, 2, "group", workdir / "ctrl_c"))
    assert_interrupted_at(proc, run_dir, STOP_AT)
    assert proc.stderr.count("Ctrl-C: every rank stops after the same step") == 1, proc.stderr[-3000:]
    assert "stopping after this step" not in proc.stderr  # the ranks say nothing of their own

    printed = next(line for line in proc.stderr.splitlines() if line.startswith("interrupted at step"))
    command = shlex.split(printed.split("resume with: ", 1)[1])
    assert command[:2] == ["python", "train.py"] and "ckpt_path=last" in command
    resumed = forked_python.run(
        [sys.executable, str(REPO / "train.py"), *command[2:]],
        cwd=workdir,
        env=environment(workdir, data_dir),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        start_new_session=True,
    )
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    record = status(run_dir)
    assert record["status"] == "completed" and record["steps"] == 8, record
    assert record["resumed_from"] == str(run_dir / "checkpoints" / "last.ckpt")
    assert_same_run(run_dir, uninterrupted)


@pytest.mark.parametrize(
    ("signum", "to"), [(signal.SIGTERM, "launcher"), (signal.SIGHUP, "group")], ids=["sigterm_to_launcher", "sighup"]
)
def test_sigterm_and_sighup_stop_every_rank_at_one_step(
    workdir: Path, data_dir: Path, uninterrupted: Path, signum: int, to: str
) -> None:
    """A signal to the whole group reaches rank 0 at once (it stops at that step); one to the launching
    process reaches the ranks through it, so they stop together at that step or a later one."""
    name = signal.Signals(signum).name
    run_dir = workdir / "logs" / name
    proc = train(workdir, data_dir, f"hydra.run.dir={run_dir}", *signal_at(STOP_AT, signum, to, workdir / name))
    step = assert_interrupted_at(proc, run_dir, STOP_AT if to == "group" else None)
    assert proc.stderr.count(f"{name}: every rank stops after the same step") == 1, proc.stderr[-3000:]
    expected = {s: v for s, v in column(uninterrupted, "train/loss").items() if s < step}
    assert column(run_dir, "train/loss") == expected


def test_a_second_ctrl_c_stops_at_once(workdir: Path, data_dir: Path) -> None:
    """The ranks are ended (SIGKILL) instead of finishing their step: exit 130, recorded as
    interrupted mid-step, no traceback, no process left behind."""
    run_dir = workdir / "logs" / "twice"
    proc = train(
        workdir,
        data_dir,
        f"hydra.run.dir={run_dir}",
        "+callbacks.stop._target_=helpers.signal_at_step.CtrlCTwice",
        f"+callbacks.stop.step={STOP_AT}",
    )
    assert proc.returncode == 130, proc.stderr[-4000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-4000:]
    record = status(run_dir)
    assert record["status"] == "interrupted" and record["steps"] is None, record
    assert "interrupted at mid-step" in proc.stderr
    assert proc.stderr.count("Ctrl-C: every rank stops after the same step") == 1, proc.stderr[-3000:]


# ------------------------------------------------------------------------------ SLURM


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def srun(workdir: Path, data_dir: Path, bin_dir: Path, args: list[str], out: Path) -> list[subprocess.CompletedProcess]:
    """Two tasks of one SLURM job step on one node, as ``srun --ntasks-per-node=2`` starts them
    (``tests/helpers/srun.py``: each task a rank, with SLURM's environment variables, both in one new
    process group, which is what SLURM signals)."""
    env = environment(
        workdir,
        data_dir,
        SLURM_JOB_ID="4242",
        SLURM_JOB_NAME="ablate",
        SLURM_NTASKS_PER_NODE="2",
        SLURM_NNODES="1",
        SLURM_NODEID="0",
        SLURM_NODELIST="localhost",
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        PATH=f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    )
    cmd = [sys.executable, str(REPO / "train.py"), f"paths.log_dir={workdir / 'logs'}", *RUN, *args]
    subprocess.run(
        [sys.executable, str(REPO / "tests" / "helpers" / "srun.py"), str(out), "2", *cmd],
        cwd=workdir, env=env, stdin=subprocess.DEVNULL, timeout=HANG_TIMEOUT, start_new_session=True, check=True,
    )  # fmt: skip
    return [
        subprocess.CompletedProcess(
            cmd,
            int((out / f"task{r}.rc").read_text()),
            (out / f"task{r}.out").read_text(),
            (out / f"task{r}.err").read_text(),
        )
        for r in (0, 1)
    ]


def test_slurm_requeue_signal_saves_every_rank_and_the_requeued_job_resumes_exactly(
    workdir: Path, data_dir: Path, uninterrupted: Path, tmp_path: Path
) -> None:
    """``sbatch --signal=USR1@90`` reaches both tasks after step 3: every rank stops after the same
    step and saves it, rank 0 runs ``scontrol requeue 4242``, whose SIGTERM to the job (the stand-in
    sends it to the tasks' process group) is expected; both tasks exit 130 with the job recorded as
    interrupted. The requeued job (the same command: ``ckpt_path=last``) resumes and ends exactly as
    the uninterrupted run."""
    run_dir = workdir / "logs" / "slurm"
    calls = tmp_path / "scontrol.calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nkill -TERM 0\n')  # requeue: SLURM ends the job
    (bin_dir / "scontrol").chmod(0o755)
    args = [
        f"hydra.run.dir={run_dir}",
        "ckpt_path=last",
        *signal_at(STOP_AT, signal.SIGUSR1, "group", tmp_path / "usr1"),
    ]
    first = srun(workdir, data_dir, bin_dir, args, tmp_path / "first")
    for task in first:
        assert task.returncode == 130, task.stderr[-4000:]
        assert "Traceback" not in task.stderr, task.stderr[-4000:]
    assert calls.read_text().split() == ["requeue", "4242"]  # once, by rank 0
    record = status(run_dir)
    assert record["status"] == "interrupted" and record["steps"] == STOP_AT and record["world_size"] == 2, record
    assert saved_step(run_dir) == STOP_AT
    assert not list(run_dir.glob("hpc_ckpt_*.ckpt"))  # Lightning's in-handler save does not run under DDP

    requeued = srun(workdir, data_dir, bin_dir, args, tmp_path / "requeued")
    for task in requeued:
        assert task.returncode == 0, task.stderr[-4000:]
    record = status(run_dir)
    assert record["status"] == "completed" and record["steps"] == 8, record
    assert_same_run(run_dir, uninterrupted)
