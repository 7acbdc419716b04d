"""What the machine must have for a config: checked before any run record exists.

A valid config can be impossible *here* (``trainer=gpu`` without a GPU, ``hydra/launcher=slurm``
without ``sbatch``); Lightning and submitit find out late and deep, these checks say it first, in
one line, exit 2. The config's own checks, which hold on any machine, are
:func:`ablate.run.plan.preflight`.

Where the answer is certain, "no CUDA GPU" is decided without importing torch
(:func:`no_gpu_for_sure`: no ``/dev/nvidia*`` device node on Linux, or ``CUDA_VISIBLE_DEVICES``
hiding every device), so ``train.py``'s command-line check refuses such a config in a second
(:func:`refuse_missing_gpu`); anything else is left to :func:`check_accelerator`, which asks torch.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from ablate.errors import ConfigError

GPU_ACCELERATORS = ("gpu", "cuda")


def check_accelerator(trainer: Mapping[str, Any], hydra_cfg: Mapping[str, Any] | None = None) -> None:
    """``trainer.accelerator=gpu|cuda`` needs the CUDA devices ``trainer.devices`` asks for, and
    :func:`check_processes`; skipped where the jobs run on other machines (:func:`jobs_run_elsewhere`)."""
    if jobs_run_elsewhere(hydra_cfg):
        return
    check_processes(trainer, hydra_cfg)
    accelerator = str(trainer.get("accelerator", "auto")).lower()
    if accelerator not in GPU_ACCELERATORS:
        return
    import torch

    visible = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if visible == 0:
        raise _no_gpu(accelerator)
    devices = trainer.get("devices", 1)
    wanted = len(devices) if isinstance(devices, (list, tuple)) else devices
    if isinstance(wanted, int) and not isinstance(wanted, bool) and wanted > visible:
        raise ConfigError(f"trainer.devices={devices} asks for {wanted} GPUs; {visible} visible here")


def _requested_devices(devices: Any) -> int | None:
    """How many devices ``trainer.devices`` names (``2``, ``"2"``, ``"0,1"``, ``[0, 1]``); None for ``auto``/``-1``."""
    if isinstance(devices, str):
        text = devices.strip()
        if "," in text:
            return len([d for d in text.split(",") if d.strip()])
        devices = int(text) if text.isdigit() else None
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        return len(devices)
    return devices if isinstance(devices, int) and not isinstance(devices, bool) and devices >= 0 else None


def typed_on_command_line(hydra_cfg: Mapping[str, Any] | None, key: str, value: str) -> bool:
    """The job's command line (``hydra.overrides.task``) sets ``key=value`` (``+``/``++`` included)."""
    overrides = ((hydra_cfg or {}).get("overrides") or {}).get("task") or []
    return any(
        o.split("=", 1)[0].lstrip("+~") == key and o.split("=", 1)[1].strip().lower() == value
        for o in map(str, overrides)
        if "=" in o
    )


def check_processes(
    trainer: Mapping[str, Any], hydra_cfg: Mapping[str, Any] | None, no_gpu_for_sure: bool = False
) -> None:
    """Several training processes on a machine without a GPU only when the command line asks for them
    (``trainer.accelerator=cpu`` typed; a config file's is the default, not a request): ``trainer=ddp``
    or ``trainer.devices=4`` there is a command written for a GPU node. Not checked outside a Hydra
    job; ``no_gpu_for_sure``: the caller knows there is no GPU, else torch is asked."""
    accelerator = str(trainer.get("accelerator", "auto")).lower()
    if hydra_cfg is None or accelerator in GPU_ACCELERATORS:
        return  # gpu/cuda: check_accelerator
    strategy = trainer.get("strategy", "auto")
    name = str(strategy.get("_target_", "")) if isinstance(strategy, Mapping) else str(strategy or "auto")
    name = name.rsplit(".", 1)[-1].lower().removesuffix("strategy") or "auto"
    devices = _requested_devices(trainer.get("devices", "auto"))
    if name in ("auto", "single_device", "singledevice") and (devices is None or devices <= 1):
        return
    if typed_on_command_line(hydra_cfg, "trainer.accelerator", "cpu"):
        return
    if not no_gpu_for_sure:
        import torch

        if torch.cuda.is_available() and torch.cuda.device_count() > 0:
            return
    processes = devices if devices is not None and devices > 1 else 2
    asked = f"trainer.devices={trainer.get('devices')}" if devices and devices > 1 else f"trainer.strategy={name}"
    raise ConfigError(
        f"{asked} asks for the processes of a GPU node, and no CUDA GPU is visible here: to train in "
        f"{processes} CPU processes (gloo, fp32) add trainer.accelerator=cpu"
        + ("" if devices and devices > 1 else f" trainer.devices={processes}")
        + "; for one process leave out "
        + ("trainer.devices" if name in ("auto", "single_device", "singledevice") else "trainer=ddp")
    )


def running_hydra() -> Mapping[str, Any] | None:
    """The running job's ``hydra`` config (None outside a Hydra app)."""
    from hydra.core.hydra_config import HydraConfig

    return cast(Mapping[str, Any], HydraConfig.get()) if HydraConfig.initialized() else None


def launcher_target(hydra_cfg: Mapping[str, Any] | None) -> str:
    return str(((hydra_cfg or {}).get("launcher") or {}).get("_target_", ""))


def jobs_run_elsewhere(hydra_cfg: Mapping[str, Any] | None) -> bool:
    """The sweep's launcher submits its jobs to other machines (SLURM), and this is not one of them."""
    return "SlurmLauncher" in launcher_target(hydra_cfg) and "SLURM_JOB_ID" not in os.environ


def check_launcher(hydra_cfg: Mapping[str, Any] | None) -> None:
    """``hydra/launcher=slurm`` submits with ``sbatch``: it must be on this machine's PATH."""
    target = launcher_target(hydra_cfg)
    if "SlurmLauncher" in target and shutil.which("sbatch") is None:
        raise ConfigError(
            "hydra/launcher=slurm submits each job with SLURM's sbatch, which is not on this machine's PATH: run the "
            "command on a SLURM login node, or leave out hydra/launcher=slurm to run the jobs here"
        )


DEV = Path("/dev")


def no_gpu_for_sure(environ: Mapping[str, str] | None = None, dev: Path = DEV, platform: str | None = None) -> bool:
    """True only where no CUDA device can be visible to this process; False where torch must say."""
    environ = os.environ if environ is None else environ
    hidden = environ.get("CUDA_VISIBLE_DEVICES")
    if hidden is not None and (hidden.strip() == "" or hidden.strip().startswith("-1")):
        return True  # CUDA enumerates no device before the first invalid index
    if not (platform or sys.platform).startswith("linux"):
        return False
    if (dev / "dxg").exists():  # WSL 2: CUDA through the DirectX device, no /dev/nvidia*
        return False
    return not any(dev.glob("nvidia[0-9]*"))


def refuse_missing_gpu(trainer: Mapping[str, Any], hydra_cfg: Mapping[str, Any] | None = None) -> None:
    """The refusals of :func:`check_accelerator` without torch, on a machine that surely has no CUDA GPU."""
    if jobs_run_elsewhere(hydra_cfg) or not no_gpu_for_sure():
        return
    check_processes(trainer, hydra_cfg, no_gpu_for_sure=True)
    accelerator = str(trainer.get("accelerator", "auto")).lower()
    if accelerator not in GPU_ACCELERATORS:
        return
    raise _no_gpu(accelerator)


def _no_gpu(accelerator: str) -> ConfigError:
    return ConfigError(
        f"trainer.accelerator={accelerator} needs a CUDA GPU, and none is visible here "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): use trainer=cpu, or run on a GPU machine"
    )
