"""Whether this machine has a CUDA GPU, decided without importing torch where the answer is certain,
so that ``trainer=gpu``, and ``trainer=ddp`` or ``trainer.devices=2`` not asked for on the CPU, are
refused on a CPU machine in a second, before torch and Lightning load and before Hydra makes a run
folder (``train.py``'s command-line check).

Own code: torch answers only once imported (``torch.cuda.device_count()``, seconds to tens of
seconds on a busy machine). The answer "none" is certain when the NVIDIA driver exposes no device
node on Linux (``/dev/nvidia0``, ...; containers get them from the NVIDIA runtime) or
``CUDA_VISIBLE_DEVICES`` hides every device. Anything else (device nodes present, WSL's
``/dev/dxg``, another operating system) is left to :func:`ablate.run.environment.check_accelerator`,
which asks torch once the job runs.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ablate.errors import ConfigError
from ablate.run.environment import GPU_ACCELERATORS, check_processes, jobs_run_elsewhere

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
    (:func:`ablate.run.environment.check_processes`), on a machine that surely has no CUDA GPU: the
    refusals of :func:`ablate.run.environment.check_accelerator`, without torch. Skipped where the
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
