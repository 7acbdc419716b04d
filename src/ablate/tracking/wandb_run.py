"""The job's W&B run, started here rather than lazily by Lightning, so that its mode, settings and
metric definitions are fixed before training and no run left by an earlier job of the process (a
multirun) is reused; wrapped for Lightning, given summary values and finished at the job's end."""

from __future__ import annotations

import os
import shutil
import sys
import warnings
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_only

import ablate.tasks  # noqa: F401  (the tasks declare the metrics whose goals W&B summarises)
from ablate import metrics
from ablate.tracking.hparams import new_hparams
from ablate.tracking.options import WandbOptions
from ablate.tracking.wandb_mode import decide_wandb_mode

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

# Lightning's WandbLogger adds this key to every row; it is the x-axis.
STEP_METRIC = "trainer/global_step"


def summary_goals() -> dict[str, str]:
    """Which aggregate the run summary keeps per validation metric (what sweeps compare on): the
    goal every declared metric with a direction has (:mod:`ablate.metrics`)."""
    return {f"val/{m.name}": m.goal for m in metrics.registered() if m.goal is not None}


# Cumulative training tokens and time (ablate.callbacks.throughput): alternative x-axes.
TOKENS_METRIC = "train/tokens_seen"
TIME_METRIC = "train/time_s"


class AblateWandbLogger(WandbLogger):
    """Lightning's ``WandbLogger`` without the duplicate of the run config that Lightning logs
    as hyper-parameters (the task's ``spec``/``optim``/``data``); other hyper-parameters, such as
    the translation task's ``bleu_signature``, still reach the run config."""

    def __init__(self, *args: Any, config_keys: Collection[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config_keys = frozenset(config_keys)

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        params = new_hparams(params, self._config_keys)
        if params:
            super().log_hyperparams(params)


def build_wandb_logger(
    options: WandbOptions,
    output_dir: Path,
    run_name: str,
    group: str | None,
    extra_config: dict[str, Any],
    resume_id: str | None = None,
    tags: list[str] | None = None,
    job_type: str = "train",
) -> WandbLogger | None:
    """Start the W&B run ourselves (see the module docstring) and wrap it; None when disabled."""
    mode, reason = decide_wandb_mode(options.mode)
    if mode == "disabled":
        print(f"W&B disabled ({reason}); metrics only in {output_dir / 'csv' / 'metrics.csv'}", flush=True)
        return None
    finish_stale_run()
    init_kwargs = {
        "dir": str(output_dir),
        "project": options.project,
        "entity": options.entity,
        "name": run_name,
        "group": options.group or group,
        "job_type": job_type,
        "tags": list(options.tags) if tags is None else list(tags),
        "config": extra_config,
    }
    if resume_id:
        init_kwargs.update(id=resume_id, resume="allow")
    run, mode, reason = init_run(mode, reason, init_kwargs)
    _define_metrics(run)
    if mode == "offline":
        # a resumed offline run is one more local folder with the same run id; wandb sync given
        # all of them uploads them in order of start time into that one run
        target = Path(run.dir).parent
        if resume_id:
            target = target.parent / f"offline-run-*-{resume_id}"
        print(f"W&B offline ({reason}); upload: wandb sync {_short_path(target)}", flush=True)
    return AblateWandbLogger(
        experiment=run, save_dir=output_dir, name=run_name, project=options.project, config_keys=extra_config
    )


def init_run(mode: str, reason: str, init_kwargs: dict[str, Any]) -> tuple[Run, str, str]:
    """``wandb.init`` in ``mode``; a failed online start (wrong key, server error) is retried offline."""
    import wandb

    run_root = Path(init_kwargs["dir"]) / "wandb"
    before = set(run_root.glob("run-*"))
    try:
        wandb_mode = cast(Literal["online", "offline", "disabled", "shared"], mode)  # decide_wandb_mode's modes
        return wandb.init(mode=wandb_mode, settings=_quiet_settings(), **init_kwargs), mode, reason
    except wandb.errors.Error as err:
        if mode != "online":
            raise
        # The failed attempt leaves an empty run-* dir; drop it so the job
        # directory holds exactly one run, the offline one.
        for stale in set(run_root.glob("run-*")) - before:
            shutil.rmtree(stale, ignore_errors=True)
        offline_reason = f"online start failed: {type(err).__name__}: {err}"
        return wandb.init(mode="offline", settings=_quiet_settings(), **init_kwargs), "offline", offline_reason


def _quiet_settings() -> Any:
    """Settings under which wandb never waits for stdin nor floods stdout."""
    import wandb

    # console="off": the job's stdout is already kept by Hydra's job log;
    # wrapping it would also duplicate every line into the run files.
    return wandb.Settings(silent=True, console="off")


def _define_metrics(run: Run) -> None:
    """Everything against the global step (as Lightning would define it), the best value of key
    metrics, and the cumulative tokens and time; a named definition replaces the ``*`` glob, so
    each repeats ``step_metric``."""
    run.define_metric(STEP_METRIC)
    run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
    for name, goal in summary_goals().items():
        run.define_metric(name, summary=goal, step_metric=STEP_METRIC, step_sync=True)
    # the other x-axes: cumulative tokens and training time, logged in the training rows and in
    # every validation row (ablate.callbacks.throughput), so any panel can be drawn against them
    for name in (TOKENS_METRIC, TIME_METRIC):
        run.define_metric(name, summary="max", step_metric=STEP_METRIC, step_sync=True)


def finish_stale_run() -> None:
    """Close a run some earlier job forgot to finish, so ours is a new one."""
    import wandb

    if wandb.run is not None:
        warnings.warn(
            f"W&B run {wandb.run.name!r} was still active; finishing it before starting a new one "
            "(call ablate.tracking.wandb_run.finish_wandb() at the end of every job).",
            RuntimeWarning,
            stacklevel=3,
        )
        wandb.finish()


@rank_zero_only
def _short_path(path: Path) -> str:
    """``path`` relative to the working directory when below it (the printed command runs as is), else absolute."""
    relative = os.path.relpath(path)
    return str(path) if relative.startswith("..") else relative


def finish_wandb(exit_code: int = 0, summary: Mapping[str, Any] | None = None) -> None:
    """Write ``summary`` into the active W&B run's summary and finish it; a no-op when wandb was never
    imported (``sys.modules``: a CSV-only job does not pay its import)."""
    wandb = sys.modules.get("wandb")
    if wandb is None or getattr(wandb, "run", None) is None:
        return
    for key, value in (summary or {}).items():
        try:
            wandb.run.summary[key] = value
        except wandb.errors.Error as err:  # a finished run: warn, never fail the job over its summary
            warnings.warn(f"could not set W&B summary {key!r}: {err}", RuntimeWarning, stacklevel=2)
    wandb.finish(exit_code=exit_code)
