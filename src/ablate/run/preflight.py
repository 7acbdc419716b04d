"""Everything a job checks before it reads data or allocates a tensor, done once at the boundary.

:func:`check_config` turns the composed config into a :class:`Preflight`: the run's identity
(what a resume must match), its batch layout and the warnings to show at start. The training
code then receives these typed values, not the config to check again (issue 19: the config stops
travelling). An invalid key or number raises here, naming the key and the valid choices.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig

from ablate.config.checks import check_run_numbers, clip_validation_interval, matmul_precision, start_warnings
from ablate.config.identity import run_identity
from ablate.config.model import model_spec
from ablate.config.options import ConfigError
from ablate.config.schema import check_config_choices, check_config_keys
from ablate.config.types import check_config_types
from ablate.optim import optimizer_kind
from ablate.run import distributed, memory
from ablate.tasks import check_task_config, config_keys, ranked_metrics
from ablate.tracking.options import check_loggers, logger_keys


@dataclass(frozen=True)
class Preflight:
    """What the checks established, for the training code."""

    identity: dict[str, Any]  # the run-defining settings (ablate.config.identity.run_identity), after the task's checks
    world_size: int
    accumulate: int  # gradient accumulation, from the global batch
    max_len: int  # the longest sequence the model sees (eval_max_len)
    warnings: list[str] = field(default_factory=list)  # valid settings that are probably not meant
    matmul_precision: str = "highest"  # runtime.matmul_precision resolved for the run's device


def eval_max_len(cfg: DictConfig) -> int:
    """The longest sequence the model will see: training length or the (longer) eval length.
    ``eval.seq_lens`` does not count: evaluating more lengths must not change the trained model
    (a learned position table's size changes its parameters and its initialisation)."""
    return max(cfg.data.seq_len, cfg.data.get("eval_seq_len") or 0)


def training_layout(cfg: DictConfig) -> tuple[int, int, int]:
    """``(world size, per-device batch, gradient accumulation)`` from the global batch
    ``data.batch_size``, ``data.micro_batch_size`` and ``trainer.devices x trainer.num_nodes``."""
    world = distributed.world_size(cfg.trainer)
    micro, accumulate = distributed.batch_layout(cfg.data.batch_size, cfg.data.get("micro_batch_size"), world)
    configured = cfg.trainer.get("accumulate_grad_batches")
    if configured not in (None, accumulate):
        raise ValueError(
            f"trainer.accumulate_grad_batches={configured} conflicts with the global batch: it is derived as "
            f"data.batch_size / (world size x data.micro_batch_size) = {accumulate}. Set data.micro_batch_size instead."
        )
    return world, micro, accumulate


def check_config(cfg: DictConfig) -> Preflight:
    """Fail on an invalid architecture or run-control number before any data is read or tensor
    allocated; return what the checks established.

    In this order: the loggers; the task's own checks (which may fill derived keys: ``eval.seq_len``
    into ``data.eval_seq_len``); the validation interval fitted to the run's length; every key,
    value type, data choice and run-control number of the config (so that the estimates after them
    see valid numbers); the batch layout over the devices and the memory of a training step; the
    run's identity and its start warnings."""
    check_loggers(cfg)  # a selected tensorboard/mlflow that is not installed fails before data is read
    declared, ranked = {**config_keys(cfg), **logger_keys()}, ranked_metrics(cfg)  # what the task and loggers read
    check_task_config(cfg)  # the task's own checks (task=lm: copies eval.seq_len into data.eval_seq_len)
    shortened = clip_validation_interval(cfg.trainer)  # trainer.max_steps=100 alone runs (and says so)
    check_config_keys(cfg, declared)  # a key no code reads (a typo, another option's)
    check_config_types(cfg, declared)  # a value of another type than the code reading it expects (n_layers=abc)
    check_config_choices(cfg)  # a data value outside its class's choices (data.splits=...)
    check_run_numbers(cfg)
    try:
        optimizer_kind(cfg.optim)
        world, _, accumulate = training_layout(cfg)  # the per-device batch is the data module's to use
    except ValueError as err:  # an optimiser not known; a global batch that does not split over the devices
        raise ConfigError(str(err)) from None
    max_len = eval_max_len(cfg)
    memory.check_training_step(cfg, model_spec(cfg, vocab_size=1, max_len=max_len))
    warnings = [shortened] if shortened else []
    notes = warnings + start_warnings(cfg, ranked)
    return Preflight(run_identity(cfg), world, accumulate, max_len, notes, matmul_precision=matmul_precision(cfg))
