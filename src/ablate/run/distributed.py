"""How many processes a job trains with, how the global batch is split over them, and how a job's
processes are started: one process group per job, started by PyTorch's elastic launcher.

Why not Lightning's default DDP launcher: it starts ranks 1..N-1 by re-running the command line
(``sys.argv``). Under a Hydra multirun that command is the whole sweep (``-m lr=0.1,0.01``), so
each child runs the sweep itself; and rank 0 keeps ``LOCAL_RANK``/``WORLD_SIZE``/``MASTER_PORT``
in its environment, so its later jobs start no children and pair up with a child's copy of the
sweep, in another output directory and, with a non-deterministic sweeper, with other parameters.

What happens instead, for a job that needs N > 1 processes on this node and was not already
started by a launcher (torchrun, SLURM tasks): the Hydra job process resolves the job's config
and hands it to ``torch.distributed.launcher.elastic_launch`` (what ``torchrun --standalone``
runs), which starts N new processes (spawned where CUDA is present, forked on CPU-only
machines) with ``RANK``/``WORLD_SIZE``/``MASTER_ADDR``/... set only in *their* environment. Lightning recognises them (``TorchElasticEnvironment``) and starts
nothing itself. Each rank trains the resolved config it was given, so no rank re-parses a
command line or re-runs a sweeper. When the job ends, its processes and process group are gone;
the Hydra process, which never joined a process group, goes on with the next job, so each job
runs exactly once, with N ranks, one output directory and one W&B run (rank 0's). A rank that
fails makes the elastic agent stop the others and raise in the Hydra process, where the job is
recorded as crashed and the sweep goes on.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, ListConfig

# strategies with which Lightning starts the processes itself, inside fit (spawn/fork)
_SELF_SPAWNING = ("ddp_spawn", "ddp_fork", "ddp_notebook", "spawn", "fork")


def devices_per_node(trainer_cfg: DictConfig | dict[str, Any]) -> int:
    """The number of processes per node the Trainer will run, from ``trainer.devices`` and
    ``trainer.accelerator`` as Lightning reads them (an int, ``"0,1"``, a list, ``-1``/``"auto"``)."""
    devices = trainer_cfg.get("devices", "auto")
    accelerator = str(trainer_cfg.get("accelerator", "auto")).lower()
    if isinstance(devices, str):
        text = devices.strip()
        if "," in text:
            return len([d for d in text.split(",") if d.strip()])
        devices = int(text) if text.lstrip("-").isdigit() else text
    if isinstance(devices, (list, tuple, ListConfig)):
        return len(devices)
    if devices in ("auto", -1):
        gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
        return max(1, torch.cuda.device_count()) if gpu else 1
    return int(devices)


def world_size(trainer_cfg: DictConfig | dict[str, Any]) -> int:
    return devices_per_node(trainer_cfg) * int(trainer_cfg.get("num_nodes", 1) or 1)


def batch_layout(global_batch: int, micro_batch: int | None, world: int) -> tuple[int, int]:
    """``(per-device batch, gradient accumulation steps)`` for a global batch of ``global_batch``
    sequences per optimiser step over ``world`` processes. ``micro_batch`` caps the per-device
    batch (``None``: the whole share of each device, no accumulation)."""
    if global_batch % world:
        raise ValueError(
            f"data.batch_size={global_batch} (the global batch) is not divisible by the world size {world} "
            f"(trainer.devices x trainer.num_nodes). Choose a global batch that is a multiple of {world}."
        )
    per_device = global_batch // world
    micro = micro_batch or per_device
    if micro < 1 or per_device % micro:
        raise ValueError(
            f"data.micro_batch_size={micro_batch} does not divide the per-device batch {per_device} "
            f"(data.batch_size={global_batch} / world size {world}); gradient accumulation needs a whole number "
            "of micro-batches per device."
        )
    return micro, per_device // micro


def global_rank() -> int:
    """This process's rank from the launcher's environment (0 when not launched as a rank)."""
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


def launched_externally() -> bool:
    """True when a launcher already started this process as one of several ranks: torchrun (or
    our own launch), SLURM with several tasks, or Lightning's own launcher."""
    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    if TorchElasticEnvironment.detect() or "LOCAL_RANK" in os.environ:
        return True
    return SLURMEnvironment.detect() and int(os.environ.get("SLURM_NTASKS", "1")) > 1


def needs_launch(trainer_cfg: DictConfig | dict[str, Any]) -> bool:
    """Whether this job must start its own processes (see the module docstring)."""
    strategy = trainer_cfg.get("strategy", "auto")
    if isinstance(strategy, (dict, DictConfig)):
        if str(strategy.get("start_method", "popen")) != "popen":
            return False
    elif str(strategy) in _SELF_SPAWNING:
        return False
    return devices_per_node(trainer_cfg) > 1 and not launched_externally()


def start_method() -> str:
    """``spawn`` (fresh interpreters, the CUDA-safe way) where CUDA is present; ``fork`` on
    CPU-only machines, where nothing in this process makes forking unsafe and it saves each
    rank re-importing torch and Lightning (about 10 s per job on 2 CPU cores)."""
    return "spawn" if torch.cuda.is_available() else "fork"


def launch(fn: Callable[..., Any], args: tuple[Any, ...], nprocs: int, method: str | None = None) -> Any:
    """Run ``fn(*args)`` in ``nprocs`` new processes forming one process group on this node
    (``torchrun --standalone --nproc-per-node=nprocs``); returns rank 0's return value.
    ``fn`` must be importable (spawned processes unpickle it)."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nprocs,
        run_id=f"ablate-{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",  # a free port, as torchrun --standalone
        max_restarts=0,
        monitor_interval=0.5,
        start_method=method or start_method(),
    )
    return elastic_launch(config, fn)(*args)[0]


def failure_message(err: BaseException) -> tuple[str, str]:
    """``(message, traceback)`` of the first failed rank of a ``ChildFailedError``; the error's
    own text otherwise."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    if isinstance(err, ChildFailedError):
        rank, failure = err.get_first_failure()
        message = failure.message
        if isinstance(message, dict):  # the error file written by @record
            trace = message.get("extraInfo", {}).get("py_callstack", "")
            return f"rank {rank}: {message.get('message', '')}", trace
        return f"rank {rank}: {message}", ""
    return f"{type(err).__name__}: {err}", ""


# ------------------------------------------------------- parallel single-GPU jobs on one node


def uses_one_gpu(trainer_cfg: DictConfig | dict[str, Any]) -> bool:
    """A job that trains on exactly one CUDA device, left for Lightning to pick (devices: 1)."""
    accelerator = str(trainer_cfg.get("accelerator", "auto")).lower()
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and torch.cuda.is_available())
    return gpu and str(trainer_cfg.get("devices", "auto")) == "1" and int(trainer_cfg.get("num_nodes", 1) or 1) == 1


@contextmanager
def exclusive_gpu(n_gpus: int, lock_dir: str | os.PathLike[str] | None = None, poll_s: float = 2.0) -> Iterator[int]:
    """Hold one of this node's ``n_gpus`` GPUs for the duration of a job: the first whose lock
    file (``flock``, released by the kernel even when the job is killed) nobody holds; waits
    while all are taken. Jobs run in parallel on one node (joblib launcher) so get one GPU each
    instead of all landing on GPU 0."""
    folder = Path(lock_dir or Path(tempfile.gettempdir()) / f"ablate-gpu-locks-{os.getuid()}")
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        for index in range(n_gpus):
            handle = open(folder / f"gpu{index}.lock", "w")  # noqa: SIM115 - held while the job runs
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield index
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        time.sleep(poll_s)
