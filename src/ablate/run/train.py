"""One training job: check -> decide -> build -> fit -> record.

``train.py`` hands the job (:meth:`ablate.run.plan.Job.current`) and its typed config
(:meth:`ablate.run.config.RunConfig.from_hydra`) to :func:`run`, which reads top to bottom: hold
the run directory and check (:func:`ablate.run.plan.check`), decide (:func:`ablate.run.plan.decide`),
build and fit here or in the N processes it starts (:mod:`ablate.run.distributed`), record
(:func:`ablate.run.record.finish`).

Resuming restores what Lightning restores plus the RNG states, the position in the training data
and the W&B run (:mod:`ablate.callbacks.checkpointing`; the data modules' ``state_dict``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import warnings
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.distributed.elastic.multiprocessing.errors import record

from ablate import cli
from ablate.callbacks.checkpointing import ResumeState
from ablate.callbacks.divergence import DivergenceMonitor
from ablate.callbacks.interrupt import GracefulInterrupt, TrainingInterrupted, hold_stop_signals
from ablate.checkpoints import safe_load
from ablate.cli.console import quiet_known_noise
from ablate.errors import UserError
from ablate.metrics import finite_or_none
from ablate.run import distributed
from ablate.run.assembly import build
from ablate.run.config import RunConfig, TargetConfig
from ablate.run.plan import Job, Plan, Preflight, check, decide, is_rank_zero
from ablate.run.record import finish, recording
from ablate.run.status import RunStatus, read_status
from ablate.tracking.wandb_run import finish_wandb

log = logging.getLogger(__name__)


def run(cfg: RunConfig, job: Job) -> float:
    """Run one job and always leave a record of it; returns the value for sweepers to optimise."""
    quiet_known_noise()
    with recording(job) as record:  # hold the run directory; keep whatever ends this block
        checked = check(cfg)  # the devices, the batch layout, the memory of a step: before anything is read
        record.plan = plan = decide(job, checked.identity, cfg.trainer)  # skip, resume (the same run), fresh
        if plan.trains and checked.processes > 1:  # build -> fit in the N processes started for it
            # the ranks get the job's typed config, resolved here, where Hydra's interpolations resolve
            record.status = distributed.launch(
                _rank_main, (cfg, job, checked, plan), checked.processes, stop_file=job.stop_file
            )
        elif plan.trains:
            record.status = fit(cfg, job, checked, plan)  # build -> fit, here
    return finish(job, record)  # status.json, the summary, the value for a sweeper


@record  # a failing rank's traceback reaches the launching process
def _rank_main(cfg: RunConfig, job: Job, checked: Preflight, plan: Plan) -> RunStatus | None:
    """One rank of a job started by :func:`ablate.run.distributed.launch`; rank 0 returns the status.
    A user error or an interrupt ends the rank with its exit code (:func:`ablate.run.distributed.end_rank`)."""
    hold_stop_signals()  # the launching process relays stop signals: here they are requests, held until training
    quiet_known_noise()  # a spawned rank is a fresh interpreter: the filters the launching process set are not in it
    rank = distributed.global_rank()
    rank_zero_only.rank = rank  # type: ignore[attr-defined] # lightning was imported before the launcher set RANK
    status, code = None, cli.EXIT_CRASHED
    stopped_by: BaseException | None = None  # a user error or an interrupt: the rank's exit code says which
    try:
        status = fit(cfg, job, checked, plan)
        code = cli.EXIT_OK
    except UserError as err:
        code, stopped_by = cli.EXIT_USER_ERROR, err
    except (KeyboardInterrupt, SIGTERMException) as err:
        code, stopped_by = cli.EXIT_INTERRUPTED, err
    except Exception as err:  # a crash: noted at once, before the agent stops this rank for another's failure
        distributed.note_crash(err)
        raise
    finally:  # rank 0's W&B run ends here, with the outcome in its summary
        finish_wandb(code, None if status is None else status.outcome())
    if stopped_by is not None:
        distributed.end_rank(stopped_by, code)
    return status if rank == 0 else None


def plan_in_force(output_dir: Path) -> str | None:
    """The hash of the analysis plan of this run's sweep folder (:mod:`ablate.analysis.plan`), or None."""
    try:
        record = json.loads((Path(output_dir).parent / "analysis_plan.json").read_text())
    except (OSError, ValueError):
        return None
    sha = record.get("sha256") if isinstance(record, dict) else None
    return sha if isinstance(sha, str) else None


def fit(cfg: RunConfig, job: Job, checked: Preflight, plan: Plan) -> RunStatus:
    """Train one configuration in this process (one rank, under DDP) and return its status record; in
    a sweep of worker processes on a node of several GPUs, a one-GPU job takes the first free one."""
    one_gpu = job.worker_processes and checked.one_gpu and torch.cuda.device_count() > 1
    with distributed.exclusive_gpu(torch.cuda.device_count()) if one_gpu else contextlib.nullcontext() as gpu:
        if gpu is not None:
            print(f"this job trains on GPU {gpu} (the first one no other job of this node holds)")
            cfg = replace(cfg, trainer=TargetConfig({**cfg.trainer, "devices": [gpu]}))
        return _fit_here(cfg, job, checked, plan)


def _fit_here(cfg: RunConfig, job: Job, checked: Preflight, plan: Plan) -> RunStatus:
    """:func:`fit` on the devices ``cfg.trainer`` names."""
    earlier = read_status(job.output_dir) if plan.ckpt_path is not None else None  # a resumed run: its first start
    plan_sha256 = plan_in_force(job.output_dir)
    for warning in checked.warnings if is_rank_zero() else []:
        log.warning(warning)
    assembled = build(cfg, checked, job, plan)
    trainer, task = assembled.trainer, assembled.task
    start, segment_started = time.perf_counter(), datetime.now(UTC)
    try:
        with warnings.catch_warnings():
            if plan.ckpt_path is not None:  # resuming writes on into its own checkpoint directory, as expected
                warnings.filterwarnings("ignore", message=r"Checkpoint directory .* exists and is not empty")
                # the data modules keep their place in the training order in the checkpoint (their
                # state_dict): a mid-epoch resume is exact, though the DataLoader itself has no state_dict
                warnings.filterwarnings("ignore", message=r".*your dataloader is not resumable.*")
            # the checkpoint was read with the restricted unpickler (plan.decide); Lightning reads it the same way
            weights_only = safe_load.lightning_weights_only()
            trainer.fit(task, datamodule=assembled.datamodule, ckpt_path=plan.ckpt_path, weights_only=weights_only)
    except TrainingInterrupted:  # Ctrl-C: the step's checkpoint is saved (GracefulInterrupt)
        pass
    callbacks_run: list[Callback] = trainer.callbacks  # type: ignore[attr-defined]  # set by Lightning's connector
    divergence = next((cb for cb in callbacks_run if isinstance(cb, DivergenceMonitor)), None)
    diverged_at = divergence.diverged_at if divergence is not None else None
    interrupted = next(cb for cb in callbacks_run if isinstance(cb, GracefulInterrupt)).interrupted_at is not None
    interrupted = interrupted and diverged_at is None
    earlier_s = next(
        cb for cb in callbacks_run if isinstance(cb, ResumeState)
    ).earlier_s  # resumed: the segments before
    metrics = {k: finite_or_none(v) for k, v in trainer.callback_metrics.items()}
    extra: dict[str, Any] = {"scale_at_init": assembled.scale.as_dict()} if assembled.scale is not None else {}
    same_text = getattr(assembled.datamodule, "validation_as_test", None)
    if callable(same_text) and same_text(cfg.data):  # test/* then grades the validation text again: say so
        extra["test_is_validation"] = same_text(cfg.data)
    if diverged_at is None and not interrupted:  # Ctrl-C: last.ckpt was saved at this step; no evaluation
        evaluated, task_extra = task.evaluate_after_fit(
            trainer, assembled.datamodule, cfg.eval.as_dict()
        )  # the task's own
        metrics |= evaluated
        extra |= task_extra
    elapsed = time.perf_counter() - start  # this segment: training and the evaluation after it
    started_at = (earlier.started_at if earlier is not None else None) or (
        segment_started - timedelta(seconds=earlier_s)
    ).isoformat(timespec="seconds")
    if earlier is not None and earlier.started_at:  # the plan in force when the run first started
        plan_sha256 = earlier.plan_sha256
    return RunStatus(
        status="interrupted" if interrupted else "diverged" if diverged_at is not None else "completed",
        diverged_at_step=diverged_at,
        divergence_reason=divergence.reason if divergence is not None and diverged_at is not None else None,
        steps=trainer.global_step,
        wall_time_s=round(earlier_s + elapsed, 2),
        segment_wall_time_s=round(elapsed, 2) if plan.ckpt_path is not None else None,
        params=assembled.n_params,
        axes=assembled.config["axes"],
        overrides=job.overrides,
        world_size=trainer.world_size,
        accumulate_grad_batches=checked.accumulate,
        resumed_from=plan.ckpt_path,
        tags=job.tags,
        started_at=started_at,
        plan_sha256=plan_sha256,
        metrics=metrics,
        extra=extra,
    )
