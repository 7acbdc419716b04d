"""What the machine must have for a config: checked before any run record exists.

A config can be valid and still impossible *here*: ``trainer=gpu`` on a machine without a GPU,
``hydra/launcher=slurm`` where SLURM's ``sbatch`` is not installed. Lightning and submitit find out
late (a ``MisconfigurationException`` after the W&B run and the status were created, a
``FileNotFoundError`` 30 lines deep); these checks say it first, in one line, exit 2. They are apart from the config's own checks
(:func:`ablate.run.preflight.check_config`), which hold on any machine: a paper-scale experiment
with ``trainer=gpu`` is a valid config on a laptop too (``tests/config/test_experiments.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from typing import Any, cast

from ablate.errors import ConfigError

GPU_ACCELERATORS = ("gpu", "cuda")


def check_accelerator(trainer: Mapping[str, Any], hydra_cfg: Mapping[str, Any] | None = None) -> None:
    """``trainer.accelerator=gpu|cuda`` needs as many visible CUDA devices as ``trainer.devices``
    asks for. Skipped where the jobs run on other machines (a SLURM launcher's submitting node),
    :func:`jobs_run_elsewhere`."""
    import torch

    if jobs_run_elsewhere(hydra_cfg):
        return
    accelerator = str(trainer.get("accelerator", "auto")).lower()
    if accelerator not in GPU_ACCELERATORS:
        return
    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        raise ConfigError(
            f"trainer.accelerator={accelerator} needs a CUDA GPU, and none is visible here "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): use trainer=cpu, or run on a GPU machine"
        )
    devices = trainer.get("devices", 1)
    wanted = len(devices) if isinstance(devices, (list, tuple)) else devices
    if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > visible:
        raise ConfigError(f"trainer.devices={devices} asks for {wanted} GPUs; {visible} visible here")


def running_hydra() -> Mapping[str, Any] | None:
    """The running job's ``hydra`` config (None outside a Hydra app)."""
    from hydra.core.hydra_config import HydraConfig

    return cast(Mapping[str, Any], HydraConfig.get()) if HydraConfig.initialized() else None


def launcher_target(hydra_cfg: Mapping[str, Any] | None) -> str:
    return str(((hydra_cfg or {}).get("launcher") or {}).get("_target_", ""))


def jobs_run_elsewhere(hydra_cfg: Mapping[str, Any] | None) -> bool:
    """The sweep's launcher submits its jobs to other machines (SLURM, through submitit), and this
    process is not one of them."""
    return "SlurmLauncher" in launcher_target(hydra_cfg) and "SLURM_JOB_ID" not in os.environ


def check_launcher(hydra_cfg: Mapping[str, Any] | None) -> None:
    """``hydra/launcher=slurm`` submits with ``sbatch``: it must be on this machine's PATH."""
    target = launcher_target(hydra_cfg)
    if "SlurmLauncher" in target and shutil.which("sbatch") is None:
        raise ConfigError(
            "hydra/launcher=slurm submits each job with SLURM's sbatch, which is not on this machine's PATH: run the "
            "command on a SLURM login node, or leave out hydra/launcher=slurm to run the jobs here"
        )
