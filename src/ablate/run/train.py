"""One training job: config -> data -> model -> Lightning Trainer -> status.

``train.py`` at the repository root is the ``@hydra.main`` entry point that calls :func:`run`.
Every job leaves ``status.json`` in its output directory (``completed``, ``diverged`` or
``crashed``, with steps and wall time), which is what sweep summaries read first.

A job that trains on N > 1 devices of one node starts its own N processes
(:mod:`ablate.run.distributed`): the Hydra process hands the job's resolved config to PyTorch's
elastic launcher and waits; each rank runs :func:`fit`. Under SLURM with one task per device
(or torchrun) the processes already exist and every one of them runs :func:`run`.

Resuming (``ckpt_path=last`` or a path) restores what Lightning restores (model, optimiser, LR
scheduler, loop progress, callbacks) plus the RNG states, the position in the training data and
the W&B run (:mod:`ablate.callbacks.checkpointing`; the data modules' own ``state_dict``).

Re-running a sweep (:func:`previous_outcome`): the sweep directory is the same for the same
command (``hydra.sweep.dir``, :func:`ablate.config.resolvers.sweep_dirname`) and a job's directory is
named by its overrides, so a job finds what an earlier run of it left. With ``skip_completed``
(default) a job whose ``status.json`` says ``completed`` or ``diverged`` is skipped and returns
its stored result; a job with a ``last.ckpt`` and no final status (killed, or crashed) resumes
from it. The decision is taken once, in the Hydra job process, before any rank is started.

Nothing here is specific to a task: the task (``task.name``, :mod:`ablate.tasks`) checks its own
config keys (``TaskModule.check_config``), builds its module, and evaluates a finished run
(``TaskModule.evaluate_after_fit``: the test split, the LM's lengths of ``eval.seq_lens``, ...).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import sys
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from omegaconf import DictConfig, OmegaConf, open_dict
from torch.distributed.elastic.multiprocessing.errors import record

from ablate import cli
from ablate.callbacks.checkpointing import (
    AtomicCheckpointIO,
    ResumeState,
    find_last_checkpoint,
    resolve_ckpt_path,
    resume_state,
)
from ablate.callbacks.divergence import DivergenceMonitor
from ablate.callbacks.interrupt import GracefulInterrupt, TrainingInterrupted
from ablate.callbacks.progress import wants_progress_bar
from ablate.callbacks.throughput import ThroughputMonitor
from ablate.checkpoints import safe_load
from ablate.cli.console import (
    format_run_header,
    format_run_summary,
    param_estimate,
    print_config_tree,
    quiet_known_noise,
)
from ablate.config.checks import clip_validation_interval, matmul_precision
from ablate.config.model import ModelSpec, model_spec
from ablate.config.options import ConfigError
from ablate.errors import UserError
from ablate.metrics import finite_or_none
from ablate.nn.flops import flops_per_token
from ablate.optim import used_optim_config
from ablate.run import distributed, environment
from ablate.run.control import RunControl
from ablate.run.lock import RunDirectoryBusy, RunDirectoryLock
from ablate.run.objective import MetricNotLoggedError, best_metric_value
from ablate.run.preflight import Preflight, check_config
from ablate.run.resume import (
    CheckpointError,
    check_same_run,
    earlier_run_with_checkpoint,
    inspect_checkpoint,
    require_resumable,
    run_identity,
)
from ablate.run.status import RunStatus, read_status, record_status, write_status
from ablate.sweepers import sweep_stop
from ablate.tasks import build_task
from ablate.tracking.loggers import build_loggers
from ablate.tracking.naming import RunLabels, multirun_group
from ablate.tracking.options import WandbOptions, as_tags
from ablate.tracking.relabel import relabel
from ablate.tracking.wandb_run import finish_wandb, set_wandb_summary

log = logging.getLogger(__name__)
# exit codes of train.py (a single run, or a whole sweep): ablate.cli, README "When things go wrong"
EXIT_CRASHED, EXIT_USER_ERROR, EXIT_INTERRUPTED = cli.EXIT_CRASHED, cli.EXIT_USER_ERROR, cli.EXIT_INTERRUPTED

# The data modules store their position in the training order in the checkpoint (their
# state_dict), so a mid-epoch resume is exact; Lightning still warns because the DataLoader itself
# has no state_dict. Silence that one misleading message.
warnings.filterwarnings("ignore", message=r".*your dataloader is not resumable.*")


def is_rank_zero() -> bool:
    """Lightning's global rank is 0 (it sets ``rank_zero_only.rank`` at import; its stubs do not declare it)."""
    return rank_zero_only.rank == 0  # type: ignore[attr-defined]


def experiment_name() -> str | None:
    """The ``experiment=`` option this job was composed with (None: the defaults)."""
    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get("experiment")


def describe_model(spec: ModelSpec) -> str:
    layers = f"{spec.encoder_layers}+{spec.n_layers} layers" if spec.encoder_layers else f"{spec.n_layers} layers"
    return f"{layers}, d={spec.d_model}, {spec.n_heads} heads, FFN {spec.d_ff}"


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
    labels: RunLabels = field(default_factory=RunLabels)  # name, job_type, swept keys, experiment

    @classmethod
    def current(cls) -> Job:
        overrides = job_overrides()
        labels = RunLabels.current(overrides)
        return cls(overrides, labels.name, multirun_group(), is_multirun(), labels)


def trainer_overrides(trainer: DictConfig, accumulate: int) -> dict[str, Any]:
    """Trainer arguments derived from the config: accumulation from the global batch, the
    validation interval kept in optimiser steps (Lightning counts it in batches), and the
    atomic checkpoint writer."""
    extra: dict[str, Any] = {"accumulate_grad_batches": accumulate, "plugins": [AtomicCheckpointIO()]}
    interval = trainer.get("val_check_interval")
    if accumulate > 1 and isinstance(interval, int) and trainer.get("check_val_every_n_epoch") is None:
        extra["val_check_interval"] = interval * accumulate
    return extra


def build_callbacks(configured: DictConfig | None, spec: ModelSpec, n_params: int, seq_len: int) -> list[Callback]:
    """The configured callbacks (``callbacks.*``) plus the graceful Ctrl-C handler, with the
    model's FLOPs per token (at the training length) given to the throughput monitor."""
    callbacks = [instantiate(c) for c in (configured or {}).values() if c is not None]
    callbacks.append(GracefulInterrupt(sweep_stop.stop_file()))  # Ctrl-C: stop after the step, save last.ckpt
    fpt = flops_per_token(n_params, spec.n_layers + spec.encoder_layers, spec.d_model, seq_len)
    for cb in callbacks:
        if isinstance(cb, ThroughputMonitor) and cb.flops_per_token is None:
            cb.flops_per_token = fpt
    return callbacks


def resume_point(control: RunControl, identity: dict[str, Any], job: Job) -> tuple[str | None, str | None]:
    """The checkpoint this job resumes from (``ckpt_path``: ``last`` or a path) and the W&B run id
    stored in it, checked before any data is read: the file must be a readable checkpoint
    (:class:`CheckpointError` otherwise) trained with the same run-defining settings
    (:func:`ablate.run.resume.check_same_run`; ``resume_allow_changes`` lists deliberate changes)."""
    requested = control.ckpt_path
    ckpt_path = resolve_ckpt_path(requested, list(control.checkpoint_dirs))
    if requested == "last" and ckpt_path is None and not job.multirun:
        refuse_new_directory_for_last(control, job)
    if ckpt_path is None or not Path(ckpt_path).is_file():
        return ckpt_path, None
    checkpoint = inspect_checkpoint(ckpt_path, content=True)  # weights match the stored spec, finite
    require_resumable(checkpoint, ckpt_path)
    state = resume_state(checkpoint)
    saved = state.get("run_identity")
    if saved is None:
        rank_zero_info(f"{ckpt_path} predates the resume check: its settings cannot be compared with this config")
    else:
        changes = check_same_run(saved, identity, list(control.resume_allow_changes), ckpt_path)
        if changes:
            rank_zero_info(f"resuming {ckpt_path} with allowed changes: {'; '.join(changes)}")
    return ckpt_path, state.get("wandb_run_id")


def refuse_new_directory_for_last(control: RunControl, job: Job) -> None:
    """``ckpt_path=last`` in a single run without ``hydra.run.dir`` gets a new timestamped
    directory, which has no checkpoint: when an earlier run of the same overrides has one, the
    user meant that run, so say how to resume it instead of silently starting from scratch."""
    output_dir = control.output_dir
    runs_dir = control.log_dir / "runs"
    if output_dir.resolve().parent != runs_dir.resolve():
        return  # hydra.run.dir was given: a first run (or a requeue scheme) starts there
    earlier = earlier_run_with_checkpoint(runs_dir, job.overrides, output_dir)
    if earlier is not None:
        args = " ".join(o for o in job.overrides if not o.startswith("ckpt_path="))
        raise ConfigError(
            f"ckpt_path=last: this run's new directory {output_dir} has no checkpoint, but the earlier run {earlier} "
            f"of the same overrides has one. To resume it:\n  python train.py {args} ckpt_path=last "
            f"hydra.run.dir='{earlier}'\n(or ckpt_path=null to start a new run)"
        )


def finished_with_nothing_to_add(control: RunControl) -> RunStatus | None:
    """The record of a finished run (completed or diverged) that a resume would not train further
    (``trainer.max_steps`` not raised), or None."""
    status = read_status(control.output_dir)
    if status is None or not status.finished:
        return None
    more = control.max_steps is not None and control.max_steps > int(status.steps or 0)
    return None if more and status.status == "completed" else status


def previous_outcome(control: RunControl) -> tuple[RunStatus | None, RunControl]:
    """What a re-run of a sweep does with this job, decided from its directory (called once per
    job, in the process that launches its ranks, so every rank gets the same ``ckpt_path``):

    * ``status.json`` says completed or diverged: returns that status (the job is skipped);
    * a ``last.ckpt`` without such a status (the job was killed, or crashed): returns the job
      resuming from it, as ``ckpt_path=last`` would, unless a ``ckpt_path`` is given;
    * ``skip_completed=false``: neither; the job's previous status and checkpoints are removed
      so that it trains from scratch (and a later re-run does not mistake them for its own).

    Returns ``(the finished run's status or None, the job's run control)``.
    """
    dirs, output_dir = control.checkpoint_dirs, control.output_dir
    if not control.skip_completed:
        if not is_rank_zero():  # SLURM tasks / torchrun: rank 0 clears, before any rank trains
            return None, control
        stale = [p for d in dirs if d.is_dir() for p in d.iterdir() if p.suffix == ".ckpt"]
        if stale or (output_dir / "status.json").exists():
            log.info(
                f"skip_completed=false: training {output_dir} from scratch; removing its previous status.json "
                f"and {len(stale)} checkpoint(s)"
            )
        (output_dir / "status.json").unlink(missing_ok=True)
        for path in stale:
            path.unlink(missing_ok=True)
        return None, control
    status = read_status(output_dir)
    if status is not None and status.finished:
        return status, control
    last = find_last_checkpoint(list(dirs))
    if last is not None and control.ckpt_path is None:
        was = status.status if status else "interrupted"
        log.info(f"resuming {output_dir} ({was}) from {last}")
        return None, control.resuming_from(str(last))
    return None, control


def optimized_value(control: RunControl, status: RunStatus) -> float:
    """The job's return value for a sweeper (``optimized_metric``): in a sweep, the best value the
    run logged (diverged and crashed jobs rank last; a metric never logged stops the sweep with
    its name: :func:`ablate.run.objective.best_metric_value`); NaN for a single run, which nothing
    optimises."""
    if not is_multirun():
        return float("nan")
    try:
        return best_metric_value(control.output_dir, status, control.optimized_metric)
    except MetricNotLoggedError:
        if sweeper_optimises():
            raise
        return float("nan")  # a grid sweep does not use the value


def sweeper_optimises() -> bool:
    """The sweep's sweeper chooses jobs by their return value (Optuna, the tuned-LR sweeper), as
    opposed to Hydra's basic grid sweeper, which ignores it."""
    target = str(HydraConfig.get().sweeper.get("_target_", "")) if HydraConfig.initialized() else ""
    return bool(target) and not target.endswith("BasicSweeper")


def fit(cfg: DictConfig, control: RunControl, checked: Preflight, job: Job | None = None) -> RunStatus:
    """Train one configuration in this process (one rank of it, under DDP); returns its status
    record. ``checked`` is :func:`ablate.run.preflight.check_config` of ``cfg``, done by the caller."""
    job = job or Job.current()
    output_dir, world, accumulate = control.output_dir, checked.world_size, checked.accumulate
    ckpt_path, wandb_resume_id = resume_point(control, checked.identity, job)  # before any data is read
    for warning in checked.warnings if is_rank_zero() else []:
        log.warning(warning)
    L.seed_everything(cfg.seed, workers=True)
    if cfg.runtime.flush_denormal:
        # Post-LN's normalised outputs feed tiny gradients that go denormal on CPU and run
        # 12-18% slower there; flushing them to zero removes the gap (no effect on GPU).
        torch.set_flush_denormal(True)
    torch.set_float32_matmul_precision(matmul_precision(cfg))  # issue 31: auto is TF32 on CUDA, exact on CPU

    datamodule = instantiate(cfg.data, seed=cfg.seed)
    datamodule.prepare_data()
    datamodule.setup("fit")
    spec = model_spec(cfg, vocab_size=datamodule.vocab_size, max_len=checked.max_len)
    task = build_task(cfg, datamodule, spec)  # cfg.task.name (ablate.tasks.TASKS)
    task.tokenizer = datamodule.tokenizer

    model: Any = task.model  # the task's model (TransformerLM, EncoderDecoder): its parameter count
    n_params = model.num_params()
    estimate = param_estimate(spec.n_layers, spec.d_model, spec.vocab_size)
    if is_rank_zero():
        print(
            format_run_header(
                experiment_name(),
                str(cfg.task.name),
                datamodule.name,
                spec.axes(),
                describe_model(spec),
                n_params,
                estimate,
                output_dir,
            ),
            flush=True,
        )

    callbacks = build_callbacks(cfg.get("callbacks"), spec, n_params, cfg.data.seq_len)
    run_config = {
        **cast(dict[str, Any], OmegaConf.to_container(cfg, resolve=True)),
        "axes": spec.axes(),
        "params": n_params,
        "params_estimate": estimate,
        "world_size": world,
        "accumulate_grad_batches": accumulate,
    }
    run_config["optim"] = used_optim_config(run_config["optim"])  # never record a key the optimiser ignores
    loggers = build_loggers(
        cfg,
        output_dir,
        job.name,
        job.group,
        run_config,
        resume_id=wandb_resume_id,
        resuming=ckpt_path is not None,
        labels=job.labels,
    )
    if ckpt_path is None:  # a resumed run logged these already
        for logger in loggers:
            logger.log_metrics({"model/params": n_params, "model/params_estimate": estimate}, step=0)
    wandb_id = next((lg.experiment.id for lg in loggers if isinstance(lg, WandbLogger)), None)
    callbacks.append(ResumeState(wandb_run_id=wandb_id, run_identity=checked.identity))
    trainer: L.Trainer = instantiate(
        cfg.trainer,
        logger=loggers,
        callbacks=callbacks,
        default_root_dir=str(output_dir),
        enable_progress_bar=wants_progress_bar(callbacks),  # null: none at all
        **trainer_overrides(cfg.trainer, accumulate),
    )

    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            if ckpt_path is not None:  # resuming writes on into its own checkpoint directory, as expected
                warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
            # the checkpoint was read with the restricted unpickler (resume_point); Lightning reads it the same way
            trainer.fit(
                task, datamodule=datamodule, ckpt_path=ckpt_path, weights_only=safe_load.lightning_weights_only()
            )
    except TrainingInterrupted:  # Ctrl-C: the step's checkpoint is saved (GracefulInterrupt)
        pass
    callbacks_run: list[Callback] = trainer.callbacks  # type: ignore[attr-defined]  # set by Lightning's connector
    divergence = next((cb for cb in callbacks_run if isinstance(cb, DivergenceMonitor)), None)
    diverged = divergence is not None and divergence.diverged_at is not None
    interrupt = next(cb for cb in callbacks_run if isinstance(cb, GracefulInterrupt))
    interrupted = interrupt.interrupted_at is not None and not diverged
    earlier_s = next(
        cb for cb in callbacks_run if isinstance(cb, ResumeState)
    ).earlier_s  # resumed: the segments before
    metrics = {k: finite_or_none(v) for k, v in trainer.callback_metrics.items()}
    extra: dict[str, Any] = {}
    if not diverged and not interrupted:  # Ctrl-C: last.ckpt was saved at this step; no evaluation
        evaluated, extra = task.evaluate_after_fit(trainer, datamodule, cfg.eval)  # the task's own (test split, ...)
        metrics.update(evaluated)
    status = RunStatus(
        status="interrupted" if interrupted else "diverged" if diverged else "completed",
        diverged_at_step=divergence.diverged_at if divergence is not None and diverged else None,
        divergence_reason=divergence.reason if divergence is not None and diverged else None,
        steps=trainer.global_step,
        wall_time_s=round(earlier_s + (time.perf_counter() - start), 2),
        segment_wall_time_s=round(time.perf_counter() - start, 2) if ckpt_path is not None else None,
        params=n_params,
        axes=spec.axes(),
        overrides=job.overrides,
        world_size=trainer.world_size,
        accumulate_grad_batches=accumulate,
        resumed_from=ckpt_path,
        tags=as_tags(cfg.get("tags")),
        metrics=metrics,
        extra=extra,
    )
    for key in ("status", "diverged_at_step", "steps", "wall_time_s"):
        set_wandb_summary(loggers, key, getattr(status, key))
    set_wandb_summary(loggers, "diverged", diverged)
    return status


@record  # a failing rank's traceback reaches the launching process
def _rank_main(cfg_container: dict[str, Any], control: RunControl, checked: Preflight, job: Job) -> RunStatus | None:
    """One rank of a job started by :func:`ablate.run.distributed.launch`; rank 0 returns the status."""
    rank = distributed.global_rank()
    rank_zero_only.rank = rank  # type: ignore[attr-defined] # lightning was imported before the launcher set RANK
    exit_code = 1
    try:
        status = fit(OmegaConf.create(cfg_container), control, checked, job)
        exit_code = 0
    finally:
        finish_wandb(exit_code)
    return status if rank == 0 else None


def fit_job(cfg: DictConfig, control: RunControl, job: Job) -> RunStatus:
    """Check the config, then train the job here, or in N processes started for it when it needs
    more than this one (invalid configs fail before any process starts or data is read)."""
    checked = check_config(cfg)
    if (
        sweep_stop.jobs_in_worker_processes()
        and distributed.uses_one_gpu(cfg.trainer)
        and torch.cuda.device_count() > 1
    ):
        with distributed.exclusive_gpu(torch.cuda.device_count()) as gpu:
            print(f"this job trains on GPU {gpu} (the first one no other job of this node holds)")
            with open_dict(cfg):
                cfg.trainer.devices = [gpu]
            return fit(cfg, control, checked, job)
    if not distributed.needs_launch(cfg.trainer):
        return fit(cfg, control, checked, job)
    if int(cfg.trainer.get("num_nodes", 1) or 1) > 1:
        raise ValueError(
            f"trainer.num_nodes={cfg.trainer.num_nodes}: the processes of the other nodes must be started there, by "
            "SLURM (hydra/launcher=slurm) or by torchrun on every node; a job started here runs on this node only."
        )
    # the ranks get the job's config resolved here, where Hydra's interpolations
    # (${hydra:runtime.output_dir}, ...) still resolve
    container = OmegaConf.to_container(cfg, resolve=True)
    return distributed.launch(_rank_main, (container, control, checked, job), distributed.devices_per_node(cfg.trainer))


def run(cfg: DictConfig) -> float:
    """Run one job and always leave a status record. In a multirun a crash is recorded and the
    sweep goes on; in a single run it is raised. Ctrl-C (or SIGTERM) records ``interrupted`` and
    ends the process (a sweep stops too) with exit code 130. A failed resume never overwrites the
    record of a finished run. Returns the value for sweepers to optimise."""
    quiet_known_noise()
    shortened = clip_validation_interval(cfg.trainer)  # before the checks: the sweep's were on the clipped config too
    if shortened and is_rank_zero():
        log.warning(shortened)
    environment.check_accelerator(cfg.trainer, environment.running_hydra())  # trainer=gpu with no GPU here
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    job = Job.current()
    writer = is_rank_zero()  # several ranks run this only under SLURM tasks / torchrun
    stop = sweep_stop.stop_file()  # a sweep of worker processes: Ctrl-C stops every job after its step
    if sweep_stop.stop_requested(stop):
        print(f"not started: the sweep was interrupted; re-run the same command to run {output_dir.name}", flush=True)
        return math.nan
    try:
        with (
            sweep_stop.WorkerStopHandler(stop) if stop is not None else contextlib.nullcontext(),
            RunDirectoryLock(output_dir) if writer else contextlib.nullcontext(),  # one process per run dir
        ):
            return run_locked(cfg, RunControl.from_config(cfg, output_dir), job, writer)
    except RunDirectoryBusy as err:
        cli.report_user_error(err)
        raise  # not reached


def refuse_to_mix_runs(control: RunControl) -> None:
    """A fresh run (no ``ckpt_path``) into a directory that holds another run's record or checkpoints
    would mix the two: refused, unless ``overwrite=true`` (which removes the old record first)."""
    dirs, output_dir = control.checkpoint_dirs, control.output_dir
    found = sorted({p for d in dirs if d.is_dir() for p in d.iterdir() if p.suffix == ".ckpt"})
    found += [p for p in (output_dir / "status.json",) if p.exists()]
    if not found:
        return
    if not control.overwrite:
        raise ConfigError(
            f"{output_dir} already holds a run ({', '.join(p.name for p in found[:3])}): continue it with "
            "ckpt_path=last, replace it with overwrite=true, or choose another directory"
        )
    log.info(f"overwrite=true: removing the previous run's {len(found)} record(s) in {output_dir}")
    for path in found:
        path.unlink(missing_ok=True)


def run_locked(cfg: DictConfig, control: RunControl, job: Job, writer: bool) -> float:
    """:func:`run` while holding the run directory."""
    output_dir = control.output_dir
    if job.multirun:  # single runs never skip: their directory is new each time
        done, control = previous_outcome(control)
        if done is not None:
            log.info(
                f"skipped: {output_dir} is already {done.status} (its status.json); skip_completed=false retrains it"
            )
            relabel_if_tagged(as_tags(cfg.get("tags")), WandbOptions.from_logger(cfg.get("logger")), done, control, job)
            return optimized_value(control, done)
    elif control.ckpt_path is not None:
        try:  # a damaged checkpoint or changed settings are refused, even for a finished run
            resume_point(control, run_identity(cfg), job)
        except CheckpointError as err:  # the failed attempt is recorded; a finished run's record stays
            if writer:
                record_status(output_dir, RunStatus("crashed", job.overrides, error=str(err)))
            raise
        done = finished_with_nothing_to_add(control)
        if done is not None:  # completed is final: no record is rewritten (but for new tags)
            relabel_if_tagged(as_tags(cfg.get("tags")), WandbOptions.from_logger(cfg.get("logger")), done, control, job)
            if writer:
                print(
                    f"already {done.status}: {output_dir} (its status.json: {done.steps} steps of "
                    f"trainer.max_steps={control.max_steps}); nothing was trained or rewritten. To train it "
                    "longer: trainer.max_steps=<more> '+resume_allow_changes=[trainer.max_steps]'",
                    flush=True,
                )
                print(format_run_summary(done, output_dir), flush=True)
            return optimized_value(control, done)
    elif writer:
        refuse_to_mix_runs(control)
    if control.print_config and writer:
        print_config_tree(cfg)
    exit_code = 0
    try:
        status = fit_job(cfg, control, job)
        if status.status == "interrupted":
            exit_code = EXIT_INTERRUPTED
    except (KeyboardInterrupt, SystemExit, SIGTERMException) as err:  # a second Ctrl-C, SIGTERM, Lightning's exit
        exit_code = EXIT_INTERRUPTED
        status = RunStatus(
            "interrupted", job.overrides, error=f"{type(err).__name__} before the end of a training step"
        )
    except Exception as err:
        exit_code = EXIT_CRASHED
        message, rank_trace = distributed.failure_message(err)
        status = RunStatus("crashed", job.overrides, error=message, traceback=rank_trace or traceback.format_exc())
        if not job.multirun:
            if writer:
                record_status(output_dir, status)
            if isinstance(err, UserError):  # its message says what to fix: exit 2, no traceback
                cli.report_user_error(err)
            raise
        print(f"job crashed ({status.error}); recorded in {output_dir / 'status.json'}; the sweep continues")
    finally:
        finish_wandb(exit_code)
    if writer:
        record_status(output_dir, status)
        print(format_run_summary(status, output_dir), flush=True)
    if exit_code == EXIT_INTERRUPTED:
        report_interrupt(control, status)
        if sweep_stop.jobs_in_worker_processes():
            return math.nan  # the sweep's main process ends the sweep with its table and exit code 130
        raise SystemExit(EXIT_INTERRUPTED)  # a sweep stops too: the user asked to stop
    return optimized_value(control, status)


def relabel_if_tagged(tags: list[str], wandb: WandbOptions, done: RunStatus, control: RunControl, job: Job) -> None:
    """A finished run re-run with other ``tags``: its W&B run and ``status.json`` get them, and
    nothing is trained (:mod:`ablate.tracking.relabel`)."""
    if not is_rank_zero():
        return
    output_dir = control.output_dir
    relabelled = relabel(tags, wandb, output_dir, done.tags, done.axes, job.labels)
    if relabelled is None:
        return
    tags, where = relabelled
    write_status(output_dir, dataclasses.replace(done, tags=tags))
    print(
        f"relabelled {output_dir.name} (already {done.status}): tags {tags} on its {where or 'record (no W&B run)'}; "
        "nothing was trained",
        flush=True,
    )


def report_interrupt(control: RunControl, status: RunStatus) -> None:
    output_dir = control.output_dir
    last = find_last_checkpoint(list(control.checkpoint_dirs))
    where = f"step {status.steps}" if status.steps is not None else "mid-step"
    resume = (
        f"resume with: python train.py {' '.join(job_overrides())} ckpt_path=last hydra.run.dir='{output_dir}'"
        if not is_multirun()
        else "re-run the same sweep command to resume it"
    )
    print(f"interrupted at {where}; last checkpoint: {last or 'none'}; {resume}", file=sys.stderr, flush=True)
