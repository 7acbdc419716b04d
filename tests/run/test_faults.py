"""Fault injection end to end: what a user gets after a changed config, a corrupt checkpoint or
cache, a wrong checkpoint, Ctrl-C in a sweep, or a sweep with a crashed job (issue 13).

Exact resumes after SIGKILL and Ctrl-C are in tests/run/test_resume.py; here every fault must end in
either the right result or a clear error naming the key or file, and no record may be lost.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO, TINY

pytestmark = pytest.mark.slow


def run(
    tmp: Path, data_dir: Path, *args: str, script: str = "train.py", extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "WANDB_SILENT": "true",
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(tmp / "cache"),
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
        **(extra_env or {}),
    }
    flags = [a for a in args if a.startswith("-")]
    overrides = [a for a in args if not a.startswith("-")]
    log_dir = [f"paths.log_dir={tmp / 'logs'}"] if script == "train.py" else []
    cmd = [sys.executable, str(REPO / script), *flags, *log_dir, *overrides]
    return forked_python.run(
        cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HANG_TIMEOUT
    )


RUN = [*TINY, "logger=csv", "callbacks.checkpoint_last.every_n_train_steps=3"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def finished(workdir: Path, data_dir: Path) -> Path:
    """A completed 6-step run with checkpoints at steps 3 and 6 (last.previous.ckpt = step 3, kept:
    by default a run that reaches max_steps removes it)."""
    run_dir = workdir / "logs" / "finished"
    proc = run(workdir, data_dir, *RUN, f"hydra.run.dir={run_dir}", "callbacks.checkpoint_last.keep_previous=always")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def status(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


# ------------------------------------------------------------------ resume guard


CHANGES = {
    "act=relu": "act.name",
    "data.batch_size=8": "data.batch_size",
    "optim.lr=0.01": "optim.lr",
    "seed=7": "seed",
}


def test_resume_with_changed_settings_is_refused(workdir: Path, data_dir: Path, finished: Path) -> None:
    """A model option, the batch, the optimiser and the seed changed at once (one process: each key is
    named, and the permission to give lists them all)."""
    proc = run(workdir, data_dir, *RUN, f"hydra.run.dir={finished}", "ckpt_path=last", *CHANGES)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "refusing to resume" in proc.stderr
    for key in CHANGES.values():
        assert f"  {key}: checkpoint" in proc.stderr, (key, proc.stderr[-3000:])
    # the model is never offered to change (it offered '+resume_allow_changes=[act.name,...]')
    assert "act.name define the model, which a resume cannot change" in proc.stderr
    assert "resume_allow_changes=[data.batch_size,optim.lr,seed]" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert status(finished)["status"] == "completed"  # the finished record is untouched


def test_training_longer_is_the_same_run_when_the_schedule_allows(workdir: Path, data_dir: Path) -> None:
    """inverse_sqrt's LR at a step does not depend on max_steps: extending such a run needs no
    permission; a cosine run's does (its decay horizon is max_steps)."""
    from ablate.config.identity import identity_differences, run_identity
    from helpers.runs import composed

    cosine = [run_identity(composed(f"trainer.max_steps={n}", "trainer.val_check_interval=3")) for n in (3, 6)]
    assert identity_differences(*cosine) == {"trainer.max_steps": (3, 6)}
    noam = [
        run_identity(composed("task=translation", f"trainer.max_steps={n}", "trainer.val_check_interval=3"))
        for n in (3, 6)
    ]
    assert identity_differences(*noam) == {}


def test_allowed_change_resumes(workdir: Path, data_dir: Path, finished: Path, tmp_path: Path) -> None:
    import shutil

    run_dir = workdir / "logs" / "longer"
    shutil.copytree(finished, run_dir)
    proc = run(
        workdir,
        data_dir,
        *RUN,
        f"hydra.run.dir={run_dir}",
        "ckpt_path=last",
        "trainer.max_steps=9",
        "+resume_allow_changes=[trainer.max_steps]",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "allowed changes: trainer.max_steps: 6 -> 9" in proc.stdout + proc.stderr
    assert status(run_dir)["status"] == "completed" and status(run_dir)["steps"] == 9


def test_micro_batch_is_not_part_of_the_run(workdir: Path, data_dir: Path, finished: Path) -> None:
    """The same global batch in smaller micro-batches is the same run: accepted."""
    from ablate.config.identity import identity_differences, run_identity
    from helpers.runs import composed

    a = run_identity(composed("data.batch_size=8"))
    b = run_identity(composed("data.batch_size=8", "data.micro_batch_size=4", "data.num_workers=2"))
    assert identity_differences(a, b) == {}
    assert "data.batch_size" in identity_differences(a, run_identity(composed("data.batch_size=16")))


# ------------------------------------------------------------------ corrupt checkpoints


@pytest.mark.parametrize("damage", ["truncated", "empty"])
def test_corrupt_checkpoint_is_named_and_the_previous_offered(
    workdir: Path, data_dir: Path, finished: Path, damage: str
) -> None:
    import shutil

    run_dir = workdir / "logs" / f"corrupt_{damage}"
    shutil.copytree(finished, run_dir)
    last = run_dir / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:5000] if damage == "truncated" else b"")
    proc = run(workdir, data_dir, *RUN, f"hydra.run.dir={run_dir}", "ckpt_path=last")
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"{last} is corrupt or truncated" in proc.stderr
    previous = run_dir / "checkpoints" / "last.previous.ckpt"
    assert f"resume with ckpt_path={previous}" in proc.stderr
    assert torch.load(previous, map_location="cpu", weights_only=False)["global_step"] == 3
    assert status(run_dir)["status"] == "completed"  # the refused resume did not overwrite the record
    assert not (run_dir / "status.failed.json").exists()  # nor added to the finished run


def test_a_finished_run_keeps_lean_checkpoints(workdir: Path, data_dir: Path) -> None:
    """Checkpoint retention's default (issue 35 item 8): best.ckpt with the weights only, last.ckpt in
    full, no last.previous.ckpt once the run reached max_steps; training cannot continue from
    best.ckpt, which is said before any data is read."""
    run_dir = workdir / "logs" / "lean"
    proc = run(workdir, data_dir, *RUN, f"hydra.run.dir={run_dir}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    best, last = run_dir / "checkpoints" / "best.ckpt", run_dir / "checkpoints" / "last.ckpt"
    assert sorted(p.name for p in best.parent.iterdir()) == ["best.ckpt", "last.ckpt"]
    assert "optimizer_states" not in torch.load(best, map_location="cpu", weights_only=False)
    assert "optimizer_states" in torch.load(last, map_location="cpu", weights_only=False)
    refused = run(workdir, data_dir, *RUN, f"ckpt_path={best}", f"hydra.run.dir={workdir / 'logs' / 'from_best'}")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "holds the weights only" in refused.stderr and "resume from the run's last.ckpt" in refused.stderr
    assert "Traceback" not in refused.stderr


def test_ckpt_path_last_in_a_new_directory_goes_to_the_earlier_run(workdir: Path, data_dir: Path) -> None:
    """``ckpt_path=last`` typed without ``hydra.run.dir`` means the run of the same command: a finished
    one is reported, not retrained, and no new directory stays behind (tests/run/test_lifecycle.py:
    an interrupted one is continued)."""
    first = run(workdir, data_dir, *RUN, "trainer.max_steps=3")
    assert first.returncode == 0, first.stderr[-2000:]
    runs = set((workdir / "logs" / "runs").iterdir())
    proc = run(workdir, data_dir, *RUN, "trainer.max_steps=3", "ckpt_path=last")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "ckpt_path=last: continuing" in proc.stdout and "already completed" in proc.stdout
    assert set((workdir / "logs" / "runs").iterdir()) == runs


# ------------------------------------------------------------------ checkpoint kinds


def test_wrong_checkpoint_kind_names_the_task_and_script(workdir: Path, finished: Path, tmp_path: Path) -> None:
    from ablate.tasks.checkpoints import require_checkpoint_task

    lm = finished / "checkpoints" / "last.ckpt"
    with pytest.raises(SystemExit, match=r"holds a task=lm checkpoint; eval.py takes task=translation .*generate.py"):
        require_checkpoint_task(lm, "translation", "eval.py")
    old_translation = tmp_path / "old.ckpt"  # written before checkpoints named their task
    torch.save({"hyper_parameters": {"spec": {"encoder_layers": 3}}}, old_translation)
    with pytest.raises(SystemExit, match=r"task=translation checkpoint; generate.py .* eval.py or translate.py"):
        require_checkpoint_task(old_translation, "lm", "generate.py")


def test_scripts_refuse_a_checkpoint_of_the_other_task(workdir: Path, data_dir: Path, finished: Path) -> None:
    lm = finished / "checkpoints" / "last.ckpt"
    proc = run(workdir, data_dir, f"ckpt_path={lm}", script="translate.py")
    assert proc.returncode != 0 and "holds a task=lm checkpoint" in proc.stderr
    assert "encoder_layers" not in proc.stderr


def test_generate_with_an_empty_prompt_says_so(workdir: Path, data_dir: Path, finished: Path) -> None:
    proc = run(
        workdir, data_dir, f"ckpt_path={finished / 'checkpoints' / 'last.ckpt'}", "prompt=", script="generate.py"
    )
    assert proc.returncode != 0 and "prompt is empty" in proc.stderr


# ------------------------------------------------------------------ caches and sweeps


def test_truncated_cache_is_rebuilt_by_train(workdir: Path, data_dir: Path, finished: Path) -> None:
    (train_bin,) = (workdir / "cache").glob("tinyshakespeare-char-*/train.bin")
    train_bin.write_bytes(train_bin.read_bytes()[:1000])
    proc = run(workdir, data_dir, *RUN, "trainer.max_steps=3")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (
        f"{train_bin} is damaged" in proc.stdout + proc.stderr and "rebuilding the cache" in proc.stdout + proc.stderr
    )
    assert train_bin.stat().st_size > 1_000_000


def test_sweep_with_a_crashed_job_exits_non_zero(workdir: Path, data_dir: Path) -> None:
    sweep = workdir / "logs" / "sweep_crash"
    # a job that crashes while running (at its step 2; the other job's step 99 never comes); an
    # invalid config would stop the whole sweep before it starts (test_options.py)
    args = [
        "-m",
        *RUN,
        "trainer.max_steps=3",
        f"hydra.sweep.dir={sweep}",
        "+callbacks.boom._target_=helpers.signal_at_step.CrashAtStep",
        "+callbacks.boom.step=2,99",
    ]
    proc = run(workdir, data_dir, *args)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "1 completed, 1 crashed" in proc.stdout and "crashed: " in proc.stdout
    again = run(workdir, data_dir, *args)  # the finished job is skipped; the crash happens again
    # the finished job is listed as skipped (the table shows every job of the command)
    assert again.returncode == 1 and f"sweep {sweep}: 1 crashed, 1 skipped (completed before)\n" in again.stdout


def test_ctrl_c_in_a_sweep_stops_it_and_a_rerun_resumes(workdir: Path, data_dir: Path) -> None:
    sweep = workdir / "logs" / "sweep_ctrl_c"
    args = [
        "-m",
        *RUN,
        "trainer.max_steps=6",
        f"hydra.sweep.dir={sweep}",
        "seed=1,2",
        "+callbacks.ctrl_c._target_=helpers.signal_at_step.SignalAtStep",
        "+callbacks.ctrl_c.step=4",
        f"+callbacks.ctrl_c.once_file={workdir / 'ctrl_c_sent'}",
    ]  # the re-run is not interrupted
    proc = run(workdir, data_dir, *args)
    assert proc.returncode == 130, proc.stderr[-3000:]
    records = {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/status.json")}
    assert [r["status"] for r in records.values()] == ["interrupted"]  # the second job never started
    rerun = run(workdir, data_dir, *args)  # the same command
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    records = {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/status.json")}
    assert sorted(r["status"] for r in records.values()) == ["completed", "completed"]
    resumed = [r for r in records.values() if r["resumed_from"]]
    assert len(resumed) == 1 and resumed[0]["steps"] == 6


@pytest.mark.parametrize("seeds,n_jobs", [("1,2,3", 2), ("1,2", 3)], ids=["a_queued_job", "an_idle_worker"])
def test_ctrl_c_in_a_parallel_sweep_saves_every_running_job(
    workdir: Path, data_dir: Path, seeds: str, n_jobs: int
) -> None:
    """hydra/launcher=cpu_parallel: the terminal's Ctrl-C reaches the main process and every worker;
    each running job stops after its step and records it, a queued job does not start, a worker that
    has not run a job survives (its death would make loky SIGKILL the running jobs), the main
    process prints the sweep's table and exits 130 without a traceback, and no process is left."""
    sweep = workdir / "logs" / f"sweep_parallel_ctrl_c_{n_jobs}"
    args = [
        "-m",
        *RUN,
        "trainer.max_steps=1000",
        "hydra/launcher=cpu_parallel",
        f"hydra.launcher.n_jobs={n_jobs}",
        f"hydra.sweep.dir={sweep}",
        f"seed={seeds}",
        "+callbacks.ctrl_c._target_=helpers.signal_at_step.CtrlCWhenAllTraining",
        "+callbacks.ctrl_c.step=2",
        f"+callbacks.ctrl_c.ready_dir={workdir / f'ready_{n_jobs}'}",
        "+callbacks.ctrl_c.jobs=2",
    ]
    env = {**os.environ, "WANDB_MODE": "offline", "ABLATE_DATA_DIR": str(data_dir), "OMP_NUM_THREADS": "1"}
    env["ABLATE_CACHE_DIR"] = str(workdir / "cache")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "train.py"), *args],
        cwd=workdir,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's foreground job: the test is not signalled
    )
    out, err = proc.communicate(timeout=HANG_TIMEOUT)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    records = {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/status.json")}
    assert len(records) == 2  # the two running jobs; the queued one did not start
    for name, record in records.items():
        assert record["status"] == "interrupted" and record["steps"] >= 2, (name, record)
        saved = torch.load(sweep / name / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        assert saved["global_step"] == record["steps"]  # the step it stopped at is saved
        assert "train/loss" in record["metrics"]
    if seeds == "1,2,3":
        assert "not started: the sweep was interrupted" in out
    assert "2 interrupted" in out and "sweep interrupted" in err and "killed" not in out
    assert not (sweep / ".stop").exists()
    with pytest.raises(ProcessLookupError):  # no worker left behind in the sweep's process group
        deadline = HANG_TIMEOUT
        while deadline > 0:
            os.killpg(proc.pid, 0)
            time.sleep(0.5)
            deadline -= 0.5


def test_a_killed_worker_is_recorded_and_a_rerun_resumes_its_job(workdir: Path, data_dir: Path) -> None:
    """hydra/launcher=cpu_parallel: the system SIGKILLs one worker (as the out-of-memory killer does) at
    step 4, after the checkpoint of step 3; joblib then SIGKILLs the other (at a later step). Both
    jobs are recorded as ``killed`` by SIGKILL with the step of their last checkpoint, the sweep
    prints its table and exits 1 without a traceback, and the same command again resumes both from
    there and completes them."""
    sweep = workdir / "logs" / "sweep_killed"
    args = [
        "-m",
        *RUN,
        "trainer.max_steps=8",
        "hydra/launcher=cpu_parallel",
        "hydra.launcher.n_jobs=2",
        f"hydra.sweep.dir={sweep}",
        "seed=1,2",
        "+callbacks.oom._target_=helpers.signal_at_step.KillOneWhenAllTraining",
        "+callbacks.oom.step=4",
        f"+callbacks.oom.ready_dir={workdir / 'ready_to_kill'}",
        "+callbacks.oom.jobs=2",
    ]
    proc = run(workdir, data_dir, *args)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    records = {p.parent.name: json.loads(p.read_text()) for p in sweep.glob("*/status.json")}
    assert len(records) == 2, records
    for name, record in records.items():
        assert record["status"] == "killed" and record["signal"] == "SIGKILL", (name, record)
        saved = torch.load(sweep / name / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
        assert record["steps"] == saved["global_step"], (name, record)
        assert f"resumes from step {record['steps']}" in record["error"], (name, record)
    assert min(r["steps"] for r in records.values()) == 3  # the job killed at step 4 saved step 3
    assert "2 killed" in proc.stdout and "crashed or were killed" in proc.stderr
    assert not (sweep / ".stop").exists()

    again = run(workdir, data_dir, *args)
    assert again.returncode == 0, again.stderr[-3000:]
    for path in sweep.glob("*/status.json"):
        record = json.loads(path.read_text())
        assert record["status"] == "completed" and record["steps"] == 8, record
        assert Path(record["resumed_from"]).name == "last.ckpt", record


def test_sigterm_is_recorded_as_interrupted(workdir: Path, data_dir: Path) -> None:
    run_dir = workdir / "logs" / "sigterm"
    proc = run(
        workdir,
        data_dir,
        *RUN,
        f"hydra.run.dir={run_dir}",
        "+callbacks.term._target_=helpers.signal_at_step.SignalAtStep",
        "+callbacks.term.step=4",
        "+callbacks.term.signum=15",
    )
    assert proc.returncode == 130, proc.stderr[-3000:]
    # preemption loses nothing: like the first Ctrl-C, the step is saved and recorded with its metrics
    record = status(run_dir)
    assert record["status"] == "interrupted" and record["steps"] == 4 and "train/loss" in record["metrics"]
    assert "SIGTERM: stopping after this step" in proc.stderr
    assert torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)["global_step"] == 4


def test_slurm_requeue_signal_saves_and_the_requeued_job_resumes(workdir: Path, data_dir: Path, tmp_path: Path) -> None:
    """SLURM's requeue signal (``sbatch --signal=USR1@90``), simulated: the run sees a one-task SLURM job
    (its environment variables) and gets USR1 after step 4. The job stops after that step with
    ``last.ckpt`` at that step and the status recorded, and runs ``scontrol requeue <job id>``; SLURM
    then ends the job with SIGTERM (the fake ``scontrol`` sends it), which is expected. The requeued
    job (the same command: ``ckpt_path=last``, as conf/hydra/launcher/slurm.yaml requeues it) resumes
    from there and completes. (Two tasks under DDP: tests/run/test_ddp_faults.py.)"""
    run_dir = workdir / "logs" / "slurm_requeue"
    calls = tmp_path / "scontrol.calls"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {calls}\nkill -TERM $PPID\n')  # requeue: SLURM stops the job
    scontrol.chmod(0o755)
    slurm = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NAME": "ablate",
        "SLURM_NTASKS": "1",
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_NODELIST": "localhost",
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
    }
    args = [*RUN, "trainer.max_steps=9", f"hydra.run.dir={run_dir}", "ckpt_path=last"]
    signal_once = [
        "+callbacks.usr1._target_=helpers.signal_at_step.SignalAtStep",
        "+callbacks.usr1.step=4",
        "+callbacks.usr1.signum=10",  # SIGUSR1
        f"+callbacks.usr1.once_file={tmp_path / 'usr1_sent'}",
    ]
    first = run(workdir, data_dir, *args, *signal_once, extra_env=slurm)
    assert calls.read_text().split() == ["requeue", "4242"], first.stderr[-3000:]
    assert first.returncode == 130, first.stderr[-3000:]
    assert "requeued SLURM job 4242" in first.stderr
    record = status(run_dir)
    assert record["status"] == "interrupted" and record["steps"] == 4, record
    last = torch.load(run_dir / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)
    assert last["global_step"] == 4
    requeued = run(workdir, data_dir, *args, *signal_once, extra_env=slurm)
    assert requeued.returncode == 0, requeued.stderr[-3000:]
    record = status(run_dir)
    assert record["status"] == "completed" and record["steps"] == 9, record
    assert record["resumed_from"] == str(run_dir / "checkpoints" / "last.ckpt"), record


def test_a_full_disk_is_named_errno_28_with_the_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.callbacks import checkpointing

    def full_disk(*args, **kwargs):  # what torch's zip writer raises when a write comes up short
        raise RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 4416 vs 4304")

    monkeypatch.setattr(checkpointing.torch, "save", full_disk)
    target = tmp_path / "checkpoints" / "last.ckpt"
    with pytest.raises(OSError, match=r"No space left on device writing .*last\.ckpt") as err:
        checkpointing.AtomicCheckpointIO().save_checkpoint({"a": 1}, target)
    assert err.value.errno == 28 and "[Errno 28]" in str(err.value)
    assert not list(target.parent.iterdir())  # no partial file left behind
