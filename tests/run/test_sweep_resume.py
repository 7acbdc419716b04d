"""Re-running a sweep: the same command finds the same sweep directory, skips the jobs that
finished (completed or diverged) and resumes the interrupted ones from their last checkpoint;
a different command gets another directory. Through train.py, as a user runs it."""

from __future__ import annotations

import csv
import json
import os
import signal
from pathlib import Path

import pytest
import torch
import yaml
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from ablate.config.resolvers import sweep_dirname
from helpers.runs import REPO, TINY

pytestmark = pytest.mark.slow


def sweep_dir_of(overrides: list[str]) -> str:
    """``hydra.sweep.dir`` as Hydra resolves it for ``train.py -m OVERRIDES`` (the sweep's own
    config, before any job runs)."""
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = GlobalHydra.instance().hydra.compose_config(
            "train", overrides, run_mode=RunMode.MULTIRUN, with_log_configuration=False
        )
        previous = HydraConfig.instance().cfg
        HydraConfig.instance().set_config(cfg)  # for ${hydra:...}
        try:
            return str(cfg.hydra.sweep.dir)
        finally:
            HydraConfig.instance().cfg = previous  # later tests must not see a Hydra app running


def jobs(log_dir: Path, key: str) -> dict[str, Path]:
    """The jobs of the one sweep under ``log_dir`` by their value of override ``key`` (read from
    the overrides Hydra saves in each job directory: long directory names are shortened)."""
    sweeps = list((log_dir / "multirun").iterdir())
    assert len(sweeps) == 1, sweeps
    found = {}
    for job in sweeps[0].iterdir():
        if (job / ".hydra" / "overrides.yaml").is_file():
            overrides = dict(o.split("=", 1) for o in yaml.safe_load((job / ".hydra" / "overrides.yaml").read_text()))
            found[overrides[key]] = job
    return found


def tiny(steps: int | None = None) -> list[str]:
    """conftest's TINY run, with another step count."""
    kept = [o for o in TINY if not o.startswith("trainer.max_steps")]
    return kept + ([f"trainer.max_steps={steps}"] if steps else [])


def snapshot(job: Path) -> dict[str, bytes]:
    return {name: (job / name).read_bytes() for name in ("status.json", "csv/metrics.csv")}


def status(job: Path) -> dict:
    return json.loads((job / "status.json").read_text())


def steps_logged(job: Path, key: str = "train/loss") -> list[int]:
    with open(job / "csv" / "metrics.csv") as f:
        return [int(row["step"]) for row in csv.DictReader(f) if row.get(key)]


def test_rerun_skips_completed_and_diverged_jobs(run_train, tmp_path):
    """(a) the second run of the same command trains nothing and lands in the same directory;
    the diverged job is not retried, and says so in status.json, metrics.csv and W&B."""
    from ablate.tracking.wandb_reader import read_offline_run

    command = ["-m", "optim.lr=1e-3,1e4", *TINY, "optim.grad_clip=null", "logger=wandb"]
    run_train(*command)
    first = jobs(tmp_path / "logs", "optim.lr")
    assert set(first) == {"0.001", "10000.0"}, first  # as Hydra writes the swept values
    done, diverged = first["0.001"], first["10000.0"]
    assert status(done)["status"] == "completed" and status(diverged)["status"] == "diverged"
    with open(diverged / "csv" / "metrics.csv") as f:
        assert [float(r["diverged"]) for r in csv.DictReader(f) if r.get("diverged")] == [1.0]
    record = read_offline_run(next((diverged / "wandb").glob("offline-run-*")))
    assert record["summary"]["diverged"] is True and record["summary"]["status"] == "diverged"
    with open(done / "csv" / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    # the residual-stream RMS (callbacks.residual_rms) is logged on the grad-norm steps
    rms_steps = [r["step"] for r in rows if r.get("resid_rms/layer_01")]
    assert rms_steps and rms_steps == [r["step"] for r in rows if r.get("grad_norm/total")]
    before = {name: snapshot(job) for name, job in first.items()}

    proc = run_train(*command)
    assert jobs(tmp_path / "logs", "optim.lr") == first  # the same sweep directory and job directories
    assert {name: snapshot(job) for name, job in first.items()} == before  # nothing rewritten or appended
    assert proc.stdout.count("skipped: ") == 2, proc.stdout[-3000:]
    assert "already diverged" in proc.stdout and "already completed" in proc.stdout
    for job in first.values():
        assert len(list((job / "wandb").glob("offline-run-*"))) == 1  # no W&B run for a skipped job
    # the real directory is what the resolver gives for this command, whatever the order of its values
    assert (
        tmp_path / "logs" / "multirun" / Path(sweep_dir_of([*command[1:], f"paths.log_dir={tmp_path / 'logs'}"])).name
    ).is_dir()


# SIGKILL after optimiser step $KILL_AT, as tests/helpers/kill_at_step.py does after a fixed step: read
# from the environment, so the run that is killed and the re-run are the same command
KILLER = """
import os, signal
from lightning.pytorch.callbacks import Callback

class KillAtEnvStep(Callback):
    def on_train_batch_end(self, trainer, *args):
        if str(trainer.global_step) == os.environ.get("KILL_AT"):
            os.kill(os.getpid(), signal.SIGKILL)
"""


def test_interrupted_job_resumes_and_finished_sibling_is_skipped(run_train, tmp_path, monkeypatch):
    """(b) the sweep is SIGKILLed in its second job after step 4 (last checkpoint: step 3); the
    same command again skips the first job and resumes the second to its 6 steps; with
    skip_completed=false both are trained again from scratch."""
    (tmp_path / "_kill_from_env.py").write_text(KILLER)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    command = [
        "-m",
        "trainer.max_steps=3,6",
        *tiny(),
        "logger=csv",
        "callbacks.checkpoint_last.every_n_train_steps=3",
        "+callbacks.kill._target_=_kill_from_env.KillAtEnvStep",
    ]
    monkeypatch.setenv("KILL_AT", "4")
    killed = run_train(*command, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    first = jobs(tmp_path / "logs", "trainer.max_steps")
    short, long = first["3"], first["6"]
    assert status(short)["status"] == "completed" and not (long / "status.json").exists()
    ckpt = long / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"] == 3
    short_before = snapshot(short)

    monkeypatch.delenv("KILL_AT")
    proc = run_train(*command)
    assert jobs(tmp_path / "logs", "trainer.max_steps") == first
    assert snapshot(short) == short_before
    assert proc.stdout.count("skipped: ") == 1 and "resuming" in proc.stdout, proc.stdout[-3000:]
    resumed = status(long)
    assert resumed["status"] == "completed" and resumed["steps"] == 6
    assert resumed["resumed_from"] == str(ckpt)
    # steps 0-2 from before the kill, 3-5 after it: metrics.csv was continued, not restarted
    assert sorted(set(steps_logged(long))) == list(range(6))

    # skip_completed=false: the same directories (it is not part of the identity), both jobs
    # trained again from scratch, their old status and checkpoints gone
    proc = run_train(*command, "skip_completed=false")
    assert jobs(tmp_path / "logs", "trainer.max_steps") == first
    assert "skipped: " not in proc.stdout and proc.stdout.count("from scratch") == 2, proc.stdout[-3000:]
    for job, steps in ((short, 3), (long, 6)):
        again = status(job)
        assert again["status"] == "completed" and again["steps"] == steps and again["resumed_from"] is None
        assert steps_logged(job) == list(range(steps))  # metrics.csv started over
        # no stale best.ckpt kept beside a new best-v1.ckpt
        names = {p.name for p in (job / "checkpoints").iterdir()} - {"last.previous.ckpt"}  # this run's own
        assert names == {"best.ckpt", "last.ckpt"}
    assert snapshot(short) != short_before


def test_sweep_directory_identity(tmp_path):
    """(c) the sweep directory depends on the command's overrides (sweep values included, in any
    order), not on the time or on run-control overrides; sweep_name names it."""
    log = f"paths.log_dir={tmp_path}"
    a = sweep_dir_of(["norm=pre,post", "pos=rope,learned", log])
    assert a == sweep_dir_of(["pos=learned,rope", "norm=post,pre", log])  # order-independent
    assert a == sweep_dir_of(["norm=pre,post", "pos=rope,learned", log, "skip_completed=false", "logger=csv"])
    assert a != sweep_dir_of(["norm=pre,post", "pos=rope", log])  # a sweep value more or less
    assert a != sweep_dir_of(["norm=pre,post", "pos=rope,learned", log, "optim.lr=1e-3"])
    assert Path(a).parent == tmp_path / "multirun" and Path(a).name.startswith("norm+pos-")
    assert Path(sweep_dir_of(["experiment=nanogpt_shakespeare_char", "seed=1,2", log])).name.startswith(
        "nanogpt_shakespeare_char-"
    )
    # a name a folder cannot hold as typed gets a hash of the exact name: my/ablation and my_ablation differ
    named = Path(sweep_dir_of(["norm=pre,post", log, "sweep_name=my/ablation"]))
    assert named.parent == tmp_path / "multirun" and named.name.startswith("my_ablation-")
    assert sweep_dir_of(["norm=pre,post", log, "sweep_name=my_ablation"]) == str(tmp_path / "multirun" / "my_ablation")
    assert sweep_dirname(None, ["seed=interval(0,1)"]) != sweep_dirname(None, ["seed=interval(0,2)"])


def test_interpolated_override_is_hashed_as_typed(monkeypatch):
    """An override holding ${...} counts as typed, not as what it resolves to now."""
    overrides = OmegaConf.create({"task": ["x='${oc.env:SOME_VALUE}'", "norm=pre,post"]}).task
    monkeypatch.setenv("SOME_VALUE", "1")
    first = sweep_dirname(None, overrides)
    monkeypatch.setenv("SOME_VALUE", "2")
    assert sweep_dirname(None, overrides) == first
