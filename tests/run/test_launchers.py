"""Sweeps through other Hydra launchers: submitit (local here; the SLURM config is checked down
to the sbatch script it would submit), joblib (jobs in parallel on one node), and ranks started
by an outside launcher (torchrun; SLURM tasks work the same way)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from helpers.runs import HANG_TIMEOUT, REPO, TINY


def statuses(sweep: Path) -> dict[str, dict]:
    """The jobs' status records, keyed by their seed override."""
    records = [json.loads((d / "status.json").read_text()) for d in sweep.iterdir() if (d / "status.json").exists()]
    return {next(o for o in r["overrides"] if o.startswith("seed=")): r for r in records}


@pytest.mark.slow
def test_submitit_local_runs_a_sweep(run_train, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    run_train(
        "-m",
        "hydra/launcher=submitit_local",
        "seed=1,2",
        f"hydra.sweep.dir={sweep}",
        *TINY,
        "logger=csv",
        timeout=HANG_TIMEOUT,
    )
    jobs = statuses(sweep)
    assert sorted(jobs) == ["seed=1", "seed=2"], sorted(p.name for p in sweep.iterdir())
    assert all(s["status"] == "completed" and s["steps"] == 6 for s in jobs.values())
    assert list((sweep / ".submitit").iterdir())  # the jobs went through submitit


@pytest.mark.slow
def test_joblib_runs_jobs_in_parallel_processes(run_train, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # one thread per job: two jobs on two cores
    sweep = tmp_path / "sweep"
    run_train(
        "-m",
        "hydra/launcher=joblib",
        "hydra.launcher.n_jobs=2",
        "seed=1,2",
        f"hydra.sweep.dir={sweep}",
        *TINY,
        "logger=csv",
        timeout=HANG_TIMEOUT,
    )
    jobs = statuses(sweep)
    assert sorted(jobs) == ["seed=1", "seed=2"]
    assert all(s["status"] == "completed" and s["steps"] == 6 for s in jobs.values())


@pytest.mark.slow
def test_ranks_started_by_torchrun(tmp_path: Path, data_dir: Path) -> None:
    """Ranks that a launcher already started (torchrun here, SLURM tasks on a cluster) each run
    train.py: none starts more processes, rank 0 alone writes the status and the W&B run."""
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "WANDB_SILENT": "true",
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
    }
    out = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        str(REPO / "train.py"),
        f"hydra.run.dir={out}",
        *TINY,
        "data.batch_size=8",
        "trainer=ddp",
        "trainer.accelerator=cpu",
        "trainer.devices=2",
        "trainer.precision=32-true",
        "logger=wandb",
    ]
    proc = subprocess.run(
        cmd, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HANG_TIMEOUT
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    status = json.loads((out / "status.json").read_text())
    assert status["status"] == "completed" and status["world_size"] == 2 and status["steps"] == 6
    assert len(list((out / "wandb").glob("offline-run-*"))) == 1
    assert (proc.stdout + proc.stderr).count("Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/2") == 1


def test_slurm_launcher_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hydra/launcher=slurm sizes each job for the trainer: one task per GPU, on num_nodes nodes;
    checked down to the #SBATCH lines submitit writes (with a stand-in srun, as there is no SLURM here)."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            "train",
            overrides=[
                "hydra/launcher=slurm",
                "trainer=ddp",
                "trainer.devices=4",
                "trainer.num_nodes=2",
                "hydra.launcher.partition=gpu",
            ],
            return_hydra_config=True,
        )
    cfg.hydra.sweep.dir = str(tmp_path / "sweep")  # resolves ${now:} otherwise; irrelevant here
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=True)
    assert launcher["_target_"].endswith("SlurmLauncher")
    assert (launcher["nodes"], launcher["tasks_per_node"], launcher["gpus_per_node"]) == (2, 4, 4)
    assert launcher["max_num_timeout"] > 0  # a job that hits the time limit is requeued

    import submitit

    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "srun").write_text("#!/bin/sh\n")
    (fake / "srun").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}{os.pathsep}{os.environ['PATH']}")
    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    base = {
        "timeout_min",
        "cpus_per_task",
        "gpus_per_node",
        "tasks_per_node",
        "mem_gb",
        "nodes",
        "name",
        "stderr_to_stdout",
    }  # as hydra_submitit_launcher maps them
    executor.update_parameters(
        **{
            k if k in base else f"slurm_{k}": v
            for k, v in launcher.items()
            if k not in ("_target_", "submitit_folder", "max_num_timeout")
        }
    )
    script = executor._executor._make_submission_file_text("python -m submitit.core._submit x", "uid")
    for line in (
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=4",
        "#SBATCH --gpus-per-node=4",
        "#SBATCH --partition=gpu",
        "#SBATCH --cpus-per-task=8",
    ):
        assert line in script, script


def test_parallel_jobs_each_hold_their_own_gpu(tmp_path: Path) -> None:
    """What a single-GPU job does under the joblib launcher on a node with several GPUs: it holds
    the first GPU no other job holds (a lock the kernel releases if the job dies)."""
    from ablate.run.distributed import exclusive_gpu, uses_one_gpu

    with exclusive_gpu(3, tmp_path) as first, exclusive_gpu(3, tmp_path) as second:
        assert (first, second) == (0, 1)
    with exclusive_gpu(3, tmp_path) as again:
        assert again == 0  # released at the end of the job
    assert uses_one_gpu({"accelerator": "gpu", "devices": 1})
    assert not uses_one_gpu({"accelerator": "gpu", "devices": 2})
    assert not uses_one_gpu({"accelerator": "cpu", "devices": 1})
