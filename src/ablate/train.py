"""One training job: config -> data -> model -> Lightning Trainer -> status.

``train.py`` at the repository root is the ``@hydra.main`` entry point that calls :func:`run`.
Every job leaves ``status.json`` in its output directory (``completed``, ``diverged`` or
``crashed``, with steps and wall time), which is what sweep summaries read first.

A job that trains on N > 1 devices of one node starts its own N processes
(:mod:`ablate.distributed`): the Hydra process hands the job's resolved config to PyTorch's
elastic launcher and waits; each rank runs :func:`fit`. Under SLURM with one task per device
(or torchrun) the processes already exist and every one of them runs :func:`run`.

Resuming (``ckpt_path=last`` or a path) restores what Lightning restores (model, optimiser, LR
scheduler, loop progress, callbacks) plus the RNG states, the position in the training data and
the W&B run (:mod:`ablate.checkpointing`, :class:`ablate.data.lm_data.LMDataModule`).
"""

from __future__ import annotations

import json
import math
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.distributed.elastic.multiprocessing.errors import record

from ablate import distributed
from ablate.callbacks.divergence import DivergenceMonitor
from ablate.callbacks.throughput import ThroughputMonitor, flops_per_token
from ablate.checkpointing import AtomicCheckpointIO, ResumeState, checkpoint_dirs, read_wandb_run_id, resolve_ckpt_path
from ablate.config import ModelSpec, model_spec
from ablate.console import param_estimate, print_config_tree, print_param_count
from ablate.logging import build_loggers, finish_wandb, multirun_group, run_name_from_overrides, set_wandb_summary
from ablate.tasks import build_task


def eval_max_len(cfg: DictConfig) -> int:
    """The longest sequence the model will see: training length or the (longer) eval length."""
    return max(cfg.data.seq_len, cfg.data.get("eval_seq_len") or 0)


def check_config(cfg: DictConfig) -> None:
    """Fail on an invalid architecture before any data is read or tensor allocated."""
    model_spec(cfg, vocab_size=1, max_len=eval_max_len(cfg))


def is_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def job_overrides() -> list[str]:
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


@dataclass(frozen=True)
class Job:
    """What a job knows from Hydra, passed explicitly to ranks that run without it."""

    overrides: list[str] = field(default_factory=list)
    name: str = "default"  # W&B run name
    group: str | None = None  # W&B group (the sweep)
    multirun: bool = False

    @classmethod
    def current(cls) -> Job:
        overrides = job_overrides()
        return cls(overrides, run_name_from_overrides(overrides), multirun_group(), is_multirun())


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


def trainer_overrides(cfg: DictConfig, accumulate: int) -> dict[str, Any]:
    """Trainer arguments derived from the config: accumulation from the global batch, the
    validation interval kept in optimiser steps (Lightning counts it in batches), and the
    atomic checkpoint writer."""
    extra: dict[str, Any] = {"accumulate_grad_batches": accumulate, "plugins": [AtomicCheckpointIO()]}
    interval = cfg.trainer.get("val_check_interval")
    if accumulate > 1 and isinstance(interval, int) and cfg.trainer.get("check_val_every_n_epoch") is None:
        extra["val_check_interval"] = interval * accumulate
    return extra


def build_callbacks(cfg: DictConfig, spec: ModelSpec, n_params: int) -> list[Callback]:
    callbacks = [instantiate(c) for c in cfg.get("callbacks", {}).values() if c is not None]
    fpt = flops_per_token(n_params, spec.n_layers + spec.encoder_layers, spec.d_model, cfg.data.seq_len)
    for cb in callbacks:
        if isinstance(cb, ThroughputMonitor) and cb.flops_per_token is None:
            cb.flops_per_token = fpt
    return callbacks


def write_status(output_dir: Path, status: dict[str, Any]) -> None:
    tmp = output_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status, indent=2, default=str))
    tmp.replace(output_dir / "status.json")


def _finite_or_none(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def fit(cfg: DictConfig, output_dir: Path, job: Job | None = None) -> dict[str, Any]:
    """Train one configuration in this process (one rank of it, under DDP); returns its status
    record."""
    job = job or Job.current()
    check_config(cfg)
    world, _, accumulate = training_layout(cfg)
    L.seed_everything(cfg.seed, workers=True)
    if cfg.runtime.flush_denormal:
        # Post-LN's normalised outputs feed tiny gradients that go denormal on CPU and run
        # 12-18% slower there; flushing them to zero removes the gap (no effect on GPU).
        torch.set_flush_denormal(True)
    torch.set_float32_matmul_precision(cfg.runtime.matmul_precision)

    datamodule = instantiate(cfg.data, seed=cfg.seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    spec = model_spec(cfg, vocab_size=datamodule.vocab_size, max_len=eval_max_len(cfg))
    task = build_task(cfg, datamodule, spec)  # cfg.task.name: lm | translation (ablate.tasks.TASKS)
    task.tokenizer = datamodule.tokenizer

    n_params = task.model.num_params()
    estimate = param_estimate(spec.n_layers, spec.d_model, spec.vocab_size)
    if rank_zero_only.rank == 0:
        print_param_count(n_params, estimate)

    callbacks = build_callbacks(cfg, spec, n_params)
    ckpt_path = resolve_ckpt_path(cfg.get("ckpt_path"), checkpoint_dirs(callbacks))
    run_config = {**OmegaConf.to_container(cfg, resolve=True), "axes": spec.axes(), "params": n_params,
                  "params_estimate": estimate, "world_size": world, "accumulate_grad_batches": accumulate}
    loggers = build_loggers(cfg, output_dir, job.name, job.group, run_config, resume_id=read_wandb_run_id(ckpt_path),
                            resuming=ckpt_path is not None)
    if ckpt_path is None:  # a resumed run logged these already
        for logger in loggers:
            logger.log_metrics({"model/params": n_params, "model/params_estimate": estimate}, step=0)
    wandb_id = next((lg.experiment.id for lg in loggers if isinstance(lg, WandbLogger)), None)
    callbacks.append(ResumeState(wandb_run_id=wandb_id))
    trainer: L.Trainer = instantiate(cfg.trainer, logger=loggers, callbacks=callbacks, default_root_dir=str(output_dir),
                                     **trainer_overrides(cfg, accumulate))

    start = time.perf_counter()
    trainer.fit(task, datamodule=datamodule, ckpt_path=ckpt_path)
    divergence = next((cb for cb in trainer.callbacks if isinstance(cb, DivergenceMonitor)), None)
    diverged = divergence is not None and divergence.diverged_at is not None
    metrics = {k: _finite_or_none(v) for k, v in trainer.callback_metrics.items()}
    if cfg.eval.test_at_end and not diverged:
        trainer.test(task, datamodule=datamodule, verbose=False)
        metrics.update({k: _finite_or_none(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")})
    status = {
        "status": "diverged" if diverged else "completed",
        "diverged_at_step": divergence.diverged_at if diverged else None,
        "divergence_reason": divergence.reason if diverged else None,
        "steps": trainer.global_step,
        "wall_time_s": round(time.perf_counter() - start, 2),
        "params": n_params,
        "axes": spec.axes(),
        "overrides": job.overrides,
        "world_size": trainer.world_size,
        "accumulate_grad_batches": accumulate,
        "resumed_from": ckpt_path,
        "metrics": metrics,
    }
    for key in ("status", "diverged_at_step", "steps", "wall_time_s"):
        set_wandb_summary(loggers, key, status[key])
    set_wandb_summary(loggers, "diverged", diverged)
    return status


@record  # a failing rank's traceback reaches the launching process
def _rank_main(cfg_container: dict[str, Any], output_dir: str, job: Job) -> dict[str, Any] | None:
    """One rank of a job started by :func:`ablate.distributed.launch`; rank 0 returns the status."""
    rank = distributed.global_rank()
    rank_zero_only.rank = rank  # lightning was imported before the launcher set RANK
    exit_code = 1
    try:
        status = fit(OmegaConf.create(cfg_container), Path(output_dir), job)
        exit_code = 0
    finally:
        finish_wandb(exit_code)
    return status if rank == 0 else None


def runs_beside_other_jobs() -> bool:
    """Jobs of this sweep run in parallel on this node (Hydra's joblib launcher)."""
    return HydraConfig.initialized() and "joblib" in str(HydraConfig.get().launcher.get("_target_", "")).lower()


def fit_job(cfg: DictConfig, output_dir: Path, job: Job) -> dict[str, Any]:
    """Train the job here, or in N processes started for it when it needs more than this one."""
    if runs_beside_other_jobs() and distributed.uses_one_gpu(cfg.trainer) and torch.cuda.device_count() > 1:
        with distributed.exclusive_gpu(torch.cuda.device_count()) as gpu:
            print(f"this job trains on GPU {gpu} (the first one no other job of this node holds)")
            with open_dict(cfg):
                cfg.trainer.devices = [gpu]
            return fit(cfg, output_dir, job)
    if not distributed.needs_launch(cfg.trainer):
        return fit(cfg, output_dir, job)
    check_config(cfg)  # invalid configs fail here, before any process starts
    training_layout(cfg)
    if int(cfg.trainer.get("num_nodes", 1) or 1) > 1:
        raise ValueError(
            f"trainer.num_nodes={cfg.trainer.num_nodes}: the processes of the other nodes must be started there, by "
            "SLURM (hydra/launcher=slurm) or by torchrun on every node; a job started here runs on this node only."
        )
    # the ranks get the job's config resolved here, where Hydra's interpolations
    # (${hydra:runtime.output_dir}, ...) still resolve
    container = OmegaConf.to_container(cfg, resolve=True)
    return distributed.launch(_rank_main, (container, str(output_dir), job), distributed.devices_per_node(cfg.trainer))


def run(cfg: DictConfig) -> float:
    """Run one job and always leave a status record. In a multirun a crash is recorded and the
    sweep goes on; in a single run it is raised. Returns the value for sweepers to optimise."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    job = Job.current()
    writer = rank_zero_only.rank == 0  # several ranks run this only under SLURM tasks / torchrun
    if cfg.get("print_config", True) and writer:
        print_config_tree(cfg)
    exit_code = 0
    try:
        status = fit_job(cfg, output_dir, job)
    except Exception as err:  # noqa: BLE001 - recorded, then re-raised unless in a sweep
        exit_code = 1
        message, rank_trace = distributed.failure_message(err)
        status = {"status": "crashed", "error": message, "traceback": rank_trace or traceback.format_exc(),
                  "overrides": job.overrides}
        if writer:
            write_status(output_dir, status)
        if not job.multirun:
            raise
        print(f"job crashed ({status['error']}); recorded in {output_dir / 'status.json'}; the sweep continues")
    finally:
        finish_wandb(exit_code)
    if writer:
        write_status(output_dir, status)
    value = (status.get("metrics") or {}).get(cfg.get("optimized_metric", "val/loss"))
    return value if value is not None else float("nan")
