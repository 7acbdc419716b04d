"""scripts/sweep_overhead.py on the smallest setting: 2 variants x 1 seed, 3 steps, one probe run,
both sweep modes. Checks that the report has its fields and that they agree with each other and
with the job directories; no timing is asserted (the machine is shared)."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.runs import HANG_TIMEOUT, REPO

pytestmark = pytest.mark.slow

SMALL = ["data.seq_len=16", "data.batch_size=4", "trainer.limit_val_batches=2", "+trainer.limit_test_batches=2"]


def test_sweep_overhead_report(tmp_path: Path, data_dir: Path) -> None:
    env = {
        **os.environ,
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(tmp_path.parent / "cache"),
        "WANDB_MODE": "offline",
        "WANDB_SILENT": "true",
        "HF_HUB_OFFLINE": "1",
    }
    env.pop("OMP_NUM_THREADS", None)  # the parallel mode relies on loky setting it per worker
    out, report_path = tmp_path / "out", tmp_path / "report.json"
    cmd = [
        sys.executable,
        str(REPO / "scripts" / "sweep_overhead.py"),
        "--variants",
        "learned,rope",
        "--seeds",
        "1",
        "--steps",
        "3",
        "--probe-runs",
        "1",
        "--modes",
        "sequential,parallel",
        "--out",
        str(out),
        "--json",
        str(report_path),
        "--extra",
        *SMALL,
    ]
    proc = subprocess.run(
        cmd,
        check=False,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "wall / sum train" in proc.stdout and "launch to first training step" in proc.stdout
    report = json.loads(report_path.read_text())
    cores = os.cpu_count() or 1

    assert report["settings"]["variants"] == ["learned", "rope"] and report["settings"]["steps"] == 3

    # the start-up probe: its consecutive parts add up to the process' wall time
    (probe,) = report["startup"]["runs"]
    parts = probe["parts"]
    for key in (
        "import torch",
        "import lightning",
        "import wandb",
        "hydra: compose, job dir, logging",
        "data: instantiate, prepare_data, setup",
        "  of which SHA-256 of the cache files",
        "model build (task, init)",
        "loggers build (CSV; W&B: wandb.init, offline)",
        "trainer build",
        "= launch to first training step",
        "post-fit evaluation (evaluate_after_fit)",
        "= process wall time",
    ):
        assert key in parts and parts[key] >= 0, key
    consecutive = sum(v for k, v in parts.items() if not k.startswith((" ", "=")))
    assert math.isclose(consecutive, parts["= process wall time"], abs_tol=0.05)
    assert parts["= launch to first training step"] < parts["= process wall time"]
    assert parts["= process wall time"] == pytest.approx(probe["process_wall_s"], abs=0.01)
    assert probe["prepare_data_calls"] == 3  # train.py, trainer.fit, trainer.test
    assert probe["sha256_calls"] >= probe["prepare_data_calls"] and probe["cache_bytes"] > 0
    assert (Path(probe["run_dir"]) / "status.json").exists()

    assert report["imports"] and "torch" in report["imports"]

    # the sweeps: every job found, and the totals are those of the jobs
    sweeps = report["sweeps"]
    assert list(sweeps) == ["sequential", "parallel"]
    for mode, sweep in sweeps.items():
        jobs = sweep["jobs"]
        assert sweep["jobs_run"] == sweep["jobs_completed"] == len(jobs) == 2, mode
        # a job's directory names what varies (ablate.sweepers.job_dirs): its pos and its seed
        assert {j["job"] for j in jobs} == {"pos-learned.seed-1", "pos-rope.seed-1"}
        for job in jobs:
            assert job["status"] == "completed" and job["steps"] == 3
            assert 0 < job["train_time_s"] <= job["wall_time_s"]
            assert 0 <= job["before_fit_s"] <= job["start_to_first_step_s"]
            assert (out / "sweeps" / mode / job["job"] / "overhead_probe.json").exists()
        assert sweep["sum_train_time_s"] == pytest.approx(sum(j["train_time_s"] for j in jobs), abs=0.02)
        assert sweep["sum_fit_and_eval_s"] == pytest.approx(sum(j["wall_time_s"] for j in jobs), abs=0.02)
        assert sweep["wall_over_sum_train"] == pytest.approx(sweep["wall_s"] / sweep["sum_train_time_s"], rel=0.01)
        assert sweep["wall_s"] >= max(j["status_written"] for j in jobs)
        assert 0 <= sweep["load"]["others_cpu_share"] <= 1
    assert sweeps["sequential"]["jobs_at_a_time"] == 1 and sweeps["sequential"]["torch_threads"] == [cores]
    assert sweeps["sequential"]["worker_pids"] == 1  # the basic launcher runs every job in the Hydra process
    # hydra/launcher=cpu_parallel with OMP_NUM_THREADS unset: cores // n_jobs = 1 thread per job
    assert sweeps["parallel"]["jobs_at_a_time"] == cores and sweeps["parallel"]["torch_threads"] == [1]
    speedup = report["comparison"]["speed-up parallel vs sequential (wall)"]
    assert speedup == pytest.approx(sweeps["sequential"]["wall_s"] / sweeps["parallel"]["wall_s"], rel=0.01)
