"""What the machine must have for a config: checked before any run record exists.

A config can be valid and still impossible *here*: ``trainer=gpu`` on a machine without a GPU,
``hydra/launcher=slurm`` where SLURM's ``sbatch`` is not installed. Lightning and submitit find out
late (a ``MisconfigurationException`` after the W&B run and the status were created, a
``FileNotFoundError`` 30 lines deep); these checks say it first, in one line, exit 2. They are apart from the config's own checks
(:func:`ablate.run.plan.preflight`), which hold on any machine: a paper-scale experiment
with ``trainer=gpu`` is a valid config on a laptop too (``tests/config/test_experiments.py``).

Whether this machine has a CUDA GPU is decided without importing torch where the answer is certain
(:func:`no_gpu_for_sure`), so that ``trainer=gpu``, and ``trainer=ddp`` or ``trainer.devices=2`` not
asked for on the CPU, are refused on a CPU machine in a second, before torch and Lightning load and
before Hydra makes a run folder (``train.py``'s command-line check, :func:`refuse_missing_gpu`):
torch answers only once imported (``torch.cuda.device_count()``, seconds to tens of seconds on a
busy machine). The answer "none" is certain when the NVIDIA driver exposes no device node on Linux
(``/dev/nvidia0``, ...; containers get them from the NVIDIA runtime) or ``CUDA_VISIBLE_DEVICES``
hides every device. Anything else (device nodes present, WSL's ``/dev/dxg``, another operating
system) is left to :func:`check_accelerator`, which asks torch once the job runs.
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
    """``trainer.accelerator=gpu|cuda`` needs as many visible CUDA devices as ``trainer.devices``
    asks for; several processes on a machine without a GPU must be asked for (:func:`check_processes`).
    Skipped where the jobs run on other machines (a SLURM launcher's submitting node),
    :func:`jobs_run_elsewhere`."""
    if jobs_run_elsewhere(hydra_cfg):
        return
    check_processes(trainer, hydra_cfg)
    accelerator = str(trainer.get("accelerator", "auto")).lower()
    if accelerator not in GPU_ACCELERATORS:
        return
    import torch

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
    """Several training processes on a machine without a GPU only when the command line asks for them.

    ``trainer=ddp`` or ``trainer.devices=4`` where no CUDA GPU is visible would train in CPU
    processes (gloo) sharing the machine's cores: a command written for a GPU node, rarely meant
    here, and slower than one process. Refused, naming the explicit way: ``trainer.accelerator=cpu``
    on the command line (a config file's ``accelerator: cpu``, as ``trainer=cpu``'s, is the default,
    not a request). Not checked outside a Hydra job (``hydra_cfg`` None). ``no_gpu_for_sure``: the
    caller knows without torch that there is none (:func:`no_gpu_for_sure`);
    otherwise torch is asked, and imported only for a config that asks for a distributed strategy or
    several devices."""
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
    """``trainer.accelerator=gpu|cuda``, or several processes not asked for on the CPU
    (:func:`check_processes`), on a machine that surely has no CUDA GPU: the
    refusals of :func:`check_accelerator`, without torch. Skipped where the
    jobs run on other machines (a SLURM launcher's submitting node)."""
    if jobs_run_elsewhere(hydra_cfg) or not no_gpu_for_sure():
        return
    check_processes(trainer, hydra_cfg, no_gpu_for_sure=True)
    accelerator = str(trainer.get("accelerator", "auto")).lower()
    if accelerator not in GPU_ACCELERATORS:
        return
    raise ConfigError(
        f"trainer.accelerator={accelerator} needs a CUDA GPU, and none is visible here "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}): use trainer=cpu, or run on a GPU machine"
    )
