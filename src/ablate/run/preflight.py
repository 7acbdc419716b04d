"""What a job derives from its typed config before it reads data or allocates a tensor.

The config was checked where it was typed (:meth:`ablate.run.config.RunConfig.from_hydra`: every
key, type, range and combination); :func:`check_config` adds what only a job can judge (the batch
layout over its devices, the memory of a training step) and returns a :class:`Preflight`: the
run's identity (what a resume must match), its batch layout and the warnings to show at start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ablate.errors import ConfigError
from ablate.run import distributed, memory
from ablate.run.config import RunConfig


@dataclass(frozen=True)
class Preflight:
    """What the checks established, for the training code."""

    identity: dict[str, Any]  # the run-defining settings (ablate.config.identity.run_identity)
    world_size: int
    accumulate: int  # gradient accumulation, from the global batch
    max_len: int  # the longest sequence the model sees (RunConfig.eval_max_len)
    warnings: list[str] = field(default_factory=list)  # valid settings that are probably not meant
    matmul_precision: str = "highest"  # runtime.matmul_precision resolved for the run's device
    processes: int = 1  # the processes this node starts for the job (ablate.run.distributed.launch); 1: this one
    one_gpu: bool = False  # the job trains on one GPU (in a sweep of workers, the first free one of the node)


def training_layout(cfg: RunConfig | Any) -> tuple[int, int, int]:
    """``(world size, per-device batch, gradient accumulation)`` from the global batch
    ``data.batch_size``, ``data.micro_batch_size`` and ``trainer.devices x trainer.num_nodes``."""
    trainer, data = cfg.trainer, cfg.data
    world = distributed.world_size(trainer)
    try:
        micro, accumulate = distributed.batch_layout(data["batch_size"], data.get("micro_batch_size"), world)
    except ValueError as err:  # a global batch that does not split over the devices
        raise ConfigError(str(err)) from None
    configured = trainer.get("accumulate_grad_batches")
    if configured not in (None, accumulate):
        raise ConfigError(
            f"trainer.accumulate_grad_batches={configured} conflicts with the global batch: it is derived as "
            f"data.batch_size / (world size x data.micro_batch_size) = {accumulate}. Set data.micro_batch_size instead."
        )
    return world, micro, accumulate


def check_config(cfg: RunConfig | Any) -> Preflight:
    """:func:`preflight` of a config (a composed ``DictConfig`` is typed first, as the entry types it)."""
    return preflight(RunConfig.of(cfg))


def preflight(cfg: RunConfig) -> Preflight:
    """What a job derives from its typed config before any data is read: the batch layout over
    the devices (:func:`training_layout`), the processes to start and the memory of a training
    step; with what the entry derived (the run's identity, its start warnings, the matmul
    precision for its device)."""
    trainer = cfg.trainer
    world, micro, accumulate = training_layout(cfg)
    processes = distributed.devices_per_node(trainer) if distributed.needs_launch(trainer) else 1
    if processes > 1 and int(trainer.get("num_nodes", 1) or 1) > 1:
        raise ConfigError(
            f"trainer.num_nodes={trainer['num_nodes']}: the processes of the other nodes must be started there, "
            "by SLURM (hydra/launcher=slurm) or by torchrun on every node; a job started here runs on this node only."
        )
    one_gpu = distributed.uses_one_gpu(trainer)
    memory.check_training_step(cfg.resolved, cfg.model_spec(vocab_size=1, max_len=cfg.eval_max_len), micro)
    derived = cfg.derived
    return Preflight(
        dict(derived.identity),
        world,
        accumulate,
        cfg.eval_max_len,
        list(derived.warnings),
        derived.matmul_precision,
        processes,
        one_gpu,
    )
