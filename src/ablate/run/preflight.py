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


def training_layout(cfg: RunConfig | Any) -> tuple[int, int, int]:
    """``(world size, per-device batch, gradient accumulation)`` from the global batch
    ``data.batch_size``, ``data.micro_batch_size`` and ``trainer.devices x trainer.num_nodes``."""
    trainer, data = cfg.trainer, cfg.data
    world = distributed.world_size(trainer)
    micro, accumulate = distributed.batch_layout(data["batch_size"], data.get("micro_batch_size"), world)
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
    the devices and the memory of a training step; with what the entry derived (the run's
    identity, its start warnings, the matmul precision for its device)."""
    try:
        world, _, accumulate = training_layout(cfg)  # the per-device batch is the data module's to use
    except ValueError as err:  # a global batch that does not split over the devices
        raise ConfigError(str(err)) from None
    memory.check_training_step(cfg.resolved, cfg.model_spec(vocab_size=1, max_len=cfg.eval_max_len))
    derived = cfg.derived
    return Preflight(
        dict(derived.identity), world, accumulate, cfg.eval_max_len, list(derived.warnings), derived.matmul_precision
    )
