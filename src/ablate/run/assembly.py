"""One assembly path: a checked config -> data module -> model spec -> task -> callbacks -> loggers
-> Trainer. :func:`build` is what a job trains with; the benchmark and the scripts build from the
same parts, so that what they measure is what ``train.py`` runs. Nothing here names a task.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import Logger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info
from lightning_utilities.core.apply_func import apply_to_collection

from ablate.callbacks.checkpointing import AtomicCheckpointIO, ResumeState
from ablate.callbacks.interrupt import GracefulInterrupt
from ablate.callbacks.progress import wants_progress_bar
from ablate.callbacks.throughput import ThroughputMonitor
from ablate.cli.console import format_run_header, param_estimate, print_config_tree
from ablate.nn.axes import spec_axes
from ablate.nn.flops import flops_per_token
from ablate.nn.probe import ScaleReport, measure
from ablate.nn.spec import ModelSpec
from ablate.optim import used_optim_config
from ablate.run.config import RunConfig
from ablate.run.plan import Job, Plan, Preflight, is_rank_zero
from ablate.tasks import build_task
from ablate.tasks.trained_data import check_resumed_data
from ablate.tracking.loggers import build_loggers
from ablate.tracking.options import as_tags

if TYPE_CHECKING:
    from ablate.tasks.base import TaskModule


@dataclass
class Assembly:
    """Everything a job trains with."""

    datamodule: Any  # an ablate data module (a LightningDataModule with vocab_size and tokenizer after setup)
    spec: ModelSpec
    task: TaskModule
    n_params: int
    callbacks: list[Callback]
    loggers: list[Logger]
    trainer: L.Trainer
    config: dict[str, Any]  # what the loggers record: the resolved config, the axes, the parameter count
    scale: ScaleReport | None = None  # the scale probe at initialisation (rank 0)


def build(cfg: RunConfig, checked: Preflight, job: Job, plan: Plan) -> Assembly:
    """Seed, then build the job's data module, callbacks, task (and its model), loggers and Trainer."""
    arguments = trainer_arguments(cfg.trainer, checked.accumulate)
    seed_and_runtime(cfg, checked.matmul_precision)
    datamodule = build_datamodule(cfg)
    spec = cfg.model_spec(vocab_size=datamodule.vocab_size, max_len=checked.max_len)
    callbacks = build_callbacks(cfg.callbacks, job.stop_file, checked.identity)
    task = build_task(cfg, datamodule, spec)  # the task module of task.name, with its model
    task.tokenizer = datamodule.tokenizer  # carried into its checkpoints
    # a resumed job trains on the data its checkpoint (a file, or a sharded checkpoint's folder) was
    # trained on, or on changes it allows (said on rank 0)
    if plan.ckpt_path is not None and Path(plan.ckpt_path).exists():
        changes = check_resumed_data(plan.ckpt_path, datamodule, job.control.resume_allow_changes)
        if changes:
            rank_zero_info(f"resuming {plan.ckpt_path} on changed data, as allowed: {'; '.join(changes)}")
    n_params = cast(Any, task.model).num_params()  # TransformerLM, EncoderDecoder
    axes = spec_axes(spec)
    fpt = flops_per_token(n_params, spec.n_layers + spec.encoder_layers, spec.d_model, cfg.data["seq_len"])
    optim = used_optim_config(cfg.optim.as_dict())  # never record a key the optimiser ignores
    for cb in callbacks:  # the model's FLOPs per token (at the training length), unless configured
        if isinstance(cb, ThroughputMonitor) and cb.flops_per_token is None:
            cb.flops_per_token = fpt
    estimate = param_estimate(spec.n_layers, spec.d_model, spec.vocab_size)
    scale = None
    if is_rank_zero():
        scale = probe_scales(task, datamodule)
        _print_header(cfg, job, datamodule.name, spec, axes, n_params, estimate, scale)
    config = {
        **cast(dict[str, Any], copy.deepcopy(cfg.derived.record)),
        "optim": optim,
        "axes": axes,
        "params": n_params,
        "params_estimate": estimate,
        "world_size": checked.world_size,
        "accumulate_grad_batches": checked.accumulate,
    }
    progress = wants_progress_bar(callbacks)  # without a progress callback, no bar of Lightning's own either
    loggers = build_loggers(
        cfg.logger,
        as_tags(cfg.tags),
        job.output_dir,
        job.name,
        job.group,
        config,
        resume_id=plan.wandb_run_id,
        resuming=plan.ckpt_path is not None,
        labels=job.labels,
    )
    if plan.ckpt_path is None:  # a resumed run logged these already
        for logger in loggers:
            logger.log_metrics({"model/params": n_params, "model/params_estimate": estimate}, step=0)
    for cb in callbacks:  # every checkpoint names the W&B run it logs to
        if isinstance(cb, ResumeState):
            cb.wandb_run_id = next((lg.experiment.id for lg in loggers if isinstance(lg, WandbLogger)), None)
    trainer = instantiate(
        cfg.trainer,
        logger=loggers,
        callbacks=callbacks,
        default_root_dir=str(job.output_dir),
        enable_progress_bar=progress,
        **arguments,
    )
    return Assembly(datamodule, spec, task, n_params, callbacks, loggers, trainer, config, scale)


def probe_scales(task: TaskModule, datamodule: Any, rows: int = 4) -> ScaleReport:
    """The scale probe (:func:`ablate.nn.probe.measure`) of the new model on the first ``rows``
    sequences of the first validation batch; the model, the RNG and the data order are left as they were."""
    with torch.random.fork_rng(devices=[]):
        # a batch's first rows: of every tensor in a list, tuple, NamedTuple, dict or dataclass
        batch = apply_to_collection(next(iter(datamodule.val_dataloader())), torch.Tensor, lambda t: t[:rows])
        return measure(task.model, lambda: task.train_loss(batch)[0], datamodule.vocab_size)


def _print_header(
    cfg: RunConfig,
    job: Job,
    data: str,
    spec: ModelSpec,
    axes: dict[str, str],
    n_params: int,
    estimate: int,
    scale: ScaleReport | None,
) -> None:
    """The run header, after the config tree when asked, and the scale probe's warnings."""
    if job.control.print_config:  # print_config=true, the debug=* presets: the whole tree, then the header
        print_config_tree(cfg.derived.record)
    header = format_run_header(job.experiment, cfg.task_name, data, spec, axes, n_params, estimate, job.output_dir)
    if scale is not None and scale.warnings():
        header += f"\nscale   {'; '.join(scale.warnings())}  ({scale.line()}; docs/architecture.md#the-scale-contract)"
    print(header, flush=True)


def seed_and_runtime(cfg: RunConfig, matmul_precision: str) -> None:
    """The run's seed (every RNG, data loader workers included) and its floating-point settings."""
    L.seed_everything(cfg.seed, workers=True)
    if cfg.runtime.flush_denormal:
        # Post-LN's normalised outputs feed tiny gradients that go denormal on CPU and run
        # 12-18% slower there; flushing them to zero removes the gap (no effect on GPU).
        torch.set_flush_denormal(True)
    # auto: TF32 on CUDA (nanoGPT's setting; set before the Trainer, so Lightning's tip never
    # prints), exact fp32 on the CPU
    torch.set_float32_matmul_precision(matmul_precision)


def build_datamodule(cfg: RunConfig) -> Any:
    """The configured data module, prepared (downloaded, tokenised, cached) and set up for training."""
    datamodule = instantiate(cfg.data, seed=cfg.seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    return datamodule


def build_model(cfg: RunConfig, datamodule: Any, max_len: int) -> TaskModule:
    """The task module (``task.name``) with its model and the data's tokenizer."""
    task = build_task(cfg, datamodule, cfg.model_spec(vocab_size=datamodule.vocab_size, max_len=max_len))
    task.tokenizer = datamodule.tokenizer
    return task


def build_callbacks(
    configured: Mapping[str, Any] | None, stop_file: Path | None = None, identity: dict[str, Any] | None = None
) -> list[Callback]:
    """The configured callbacks, the graceful Ctrl-C handler (polling the sweep's ``stop_file``) and
    the resume state every checkpoint carries (the run's ``identity``)."""
    callbacks = [instantiate(c) for c in (configured or {}).values() if c is not None]
    callbacks.append(GracefulInterrupt(stop_file))  # Ctrl-C: stop after the step, save last.ckpt
    callbacks.append(ResumeState(run_identity=identity))
    return callbacks


def trainer_arguments(trainer: Mapping[str, Any], accumulate: int) -> dict[str, Any]:
    """Trainer arguments derived from the config: accumulation, the validation interval in optimiser
    steps (Lightning counts batches), and the atomic checkpoint writer."""
    extra: dict[str, Any] = {"accumulate_grad_batches": accumulate, "plugins": [AtomicCheckpointIO()]}
    interval = trainer.get("val_check_interval")
    if accumulate > 1 and isinstance(interval, int) and trainer.get("check_val_every_n_epoch") is None:
        extra["val_check_interval"] = interval * accumulate
    return extra
