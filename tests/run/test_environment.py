"""What the machine lacks is refused before any run record exists, in one line, exit 2 (issue 35
item 6): ``trainer=gpu`` without a GPU, ``hydra/launcher=slurm`` without SLURM (``ablate.run.environment``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.errors import ConfigError
from ablate.run import environment
from ablate.run.environment import no_gpu_for_sure
from helpers.runs import HANG_TIMEOUT, REPO

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
    assert not (tmp_path / "logs").exists()  # no run record, no run folder, no log file
    sweep = run_train("-m", "trainer=gpu", "norm=pre,post", "logger=csv", check=False)
    assert sweep.returncode == 2 and "needs a CUDA GPU" in sweep.stderr
    assert not (tmp_path / "logs" / "multirun").exists()  # a refused sweep leaves nothing


def test_no_gpu_is_certain_only_without_nvidia_devices_or_with_every_device_hidden(tmp_path: Path) -> None:
    dev = tmp_path / "dev"
    dev.mkdir()
    assert no_gpu_for_sure({}, dev, "linux")  # no NVIDIA device node: no driver, no GPU
    assert no_gpu_for_sure({"CUDA_VISIBLE_DEVICES": ""}, dev, "darwin")
    assert not no_gpu_for_sure({}, dev, "darwin")  # another system: torch decides
    (dev / "nvidiactl").touch()
    assert no_gpu_for_sure({}, dev, "linux")  # the control node alone is no device
    (dev / "nvidia0").touch()
    assert not no_gpu_for_sure({}, dev, "linux")
    assert not no_gpu_for_sure({"CUDA_VISIBLE_DEVICES": "0"}, dev, "linux")
    for hidden in ("", "-1", "-1,0"):
        assert no_gpu_for_sure({"CUDA_VISIBLE_DEVICES": hidden}, dev, "linux")
    (dev / "nvidia0").unlink()
    (dev / "dxg").touch()  # WSL 2
    assert not no_gpu_for_sure({}, dev, "linux")


def test_the_quick_gpu_refusal_is_the_late_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "no_gpu_for_sure", lambda: True)
    with pytest.raises(ConfigError, match="trainer.accelerator=gpu needs a CUDA GPU.*use trainer=cpu"):
        environment.refuse_missing_gpu({"accelerator": "gpu", "devices": 1})
    environment.refuse_missing_gpu({"accelerator": "cpu"})
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    environment.refuse_missing_gpu({"accelerator": "gpu"}, SLURM)  # submitted: the GPUs are there
    monkeypatch.setattr(environment, "no_gpu_for_sure", lambda: False)
    environment.refuse_missing_gpu({"accelerator": "gpu"})  # torch decides, later


def test_the_quick_refusal_of_cpu_processes_is_the_late_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no GPU is certain, several processes not asked for on the CPU are refused by the probe
    alone (torch, asked here, would say there is a GPU); where it is not certain, torch decides later."""
    ddp = {"accelerator": "auto", "devices": "auto", "strategy": "ddp"}
    typed = {"overrides": {"task": ["trainer=ddp"]}}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    monkeypatch.setattr(environment, "no_gpu_for_sure", lambda: True)
    with pytest.raises(ConfigError, match=r"^trainer.strategy=ddp asks for the processes of a GPU node"):
        environment.refuse_missing_gpu(ddp, typed)
    asked = {"overrides": {"task": ["trainer=ddp", "trainer.accelerator=cpu"]}}
    environment.refuse_missing_gpu({**ddp, "accelerator": "cpu"}, asked)  # asked for: not refused
    monkeypatch.setattr(environment, "no_gpu_for_sure", lambda: False)
    environment.refuse_missing_gpu(ddp, typed)  # not certain: check_accelerator asks torch, later
    environment.check_accelerator(ddp, typed)  # which finds the GPUs here


# In a fresh interpreter (the forked test runs have torch loaded already): train.py as typed, and
# whether torch was imported when it exited.
_PROBE = (
    "import atexit, runpy, sys\n"
    "atexit.register(lambda: print('torch imported:', 'torch' in sys.modules, file=sys.stderr))\n"
    "sys.argv = sys.argv[1:]\n"
    "runpy.run_path(sys.argv[0], run_name='__main__')\n"
)


@pytest.mark.integration
@pytest.mark.skipif(not no_gpu_for_sure(), reason="needs a machine that surely has no GPU")
def test_the_gpu_refusal_comes_before_torch_is_imported(tmp_path: Path) -> None:
    """It came after torch and Lightning loaded (9.5 s on a quiet machine, 38-48 s on a loaded one)."""
    env = {**os.environ, "ABLATE_LOG_DIR": str(tmp_path / "logs"), "WANDB_MODE": "offline"}
    refusals = {  # the command -> what its one line says
        ("trainer=gpu",): "needs a CUDA GPU",
        ("-m", "trainer=gpu", "norm=pre,post"): "needs a CUDA GPU",
        ("trainer=ddp",): "trainer.strategy=ddp asks for the processes of a GPU node",  # issue 39: after torch
        ("trainer.devices=2",): "trainer.devices=2 asks for the processes of a GPU node",
    }
    for args, says in refusals.items():
        proc = subprocess.run(
            [sys.executable, "-c", _PROBE, str(REPO / "train.py"), *args],
            cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HANG_TIMEOUT,
        )  # fmt: skip
        assert proc.returncode == 2 and says in proc.stderr.splitlines()[0], proc.stderr[-2000:]
        assert "torch imported: False" in proc.stderr, args
    assert not (tmp_path / "logs").exists()


@pytest.mark.integration
def test_slurm_launcher_without_sbatch_through_train_py(run_train, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(Path(torch.__file__).parents[4] / "bin"))  # the venv's bin: no sbatch there
    proc = run_train("-m", "hydra/launcher=slurm", "norm=pre,post", check=False)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "SLURM's sbatch, which is not on this machine's PATH" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "logs" / "multirun").exists()
