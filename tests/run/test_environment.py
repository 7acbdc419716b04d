"""What the machine lacks is refused before any run record exists, in one line, exit 2 (issue 35
item 6): ``trainer=gpu`` without a GPU, ``hydra/launcher=slurm`` without SLURM (``ablate.run.environment``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ablate.errors import ConfigError
from ablate.run import environment

SLURM = {"launcher": {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"}}


def test_a_gpu_trainer_needs_a_visible_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="trainer.accelerator=gpu needs a CUDA GPU.*use trainer=cpu"):
        environment.check_accelerator({"accelerator": "gpu", "devices": 1})
    environment.check_accelerator({"accelerator": "cpu", "devices": 1})
    environment.check_accelerator({"accelerator": "auto", "devices": "auto"})  # DDP's default: cpu without a GPU
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    environment.check_accelerator({"accelerator": "gpu", "devices": 4}, SLURM)  # submitted: the GPUs are there


def test_more_gpus_than_visible_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    environment.check_accelerator({"accelerator": "gpu", "devices": 2})
    with pytest.raises(ConfigError, match=r"trainer.devices=4 asks for 4 GPUs; 2 visible here"):
        environment.check_accelerator({"accelerator": "gpu", "devices": 4})


def test_the_slurm_launcher_needs_sbatch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="hydra/launcher=slurm submits each job with SLURM's sbatch"):
        environment.check_launcher(SLURM)
    (tmp_path / "sbatch").write_text("#!/bin/sh\n")
    (tmp_path / "sbatch").chmod(0o755)
    environment.check_launcher(SLURM)
    environment.check_launcher({"launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"}})


@pytest.mark.integration
@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_gpu_trainer_without_a_gpu_through_train_py(run_train, tmp_path: Path) -> None:
    proc = run_train("trainer=gpu", "logger=csv", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs a CUDA GPU" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((tmp_path / "logs").rglob("status.json"))  # no run record
    sweep = run_train("-m", "trainer=gpu", "norm=pre,post", "logger=csv", check=False)
    assert sweep.returncode == 2 and "needs a CUDA GPU" in sweep.stderr
    assert not (tmp_path / "logs" / "multirun").exists()  # a refused sweep leaves nothing


@pytest.mark.integration
def test_slurm_launcher_without_sbatch_through_train_py(run_train, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(Path(torch.__file__).parents[4] / "bin"))  # the venv's bin: no sbatch there
    proc = run_train("-m", "hydra/launcher=slurm", "norm=pre,post", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "SLURM's sbatch, which is not on this machine's PATH" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "logs" / "multirun").exists()
