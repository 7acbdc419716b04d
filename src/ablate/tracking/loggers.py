"""A job's loggers (:func:`build_loggers`): CSV always, plus W&B, TensorBoard and MLflow when
selected, all labelled alike (name, group, job type, tags, flat axes); and the TensorBoard and
MLflow loggers, Lightning's with the changes ablate needs. The W&B run itself is started by
:mod:`ablate.tracking.wandb_run`.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger
from lightning.pytorch.utilities import rank_zero_only

from ablate.compat import flatten_params
from ablate.tracking.csv_logger import AppendingCSVLogger, whole_rows
from ablate.tracking.hparams import new_hparams, scalar_hparams
from ablate.tracking.naming import RunLabels, flat_axes, run_tags
from ablate.tracking.options import MLflowOptions, TensorBoardOptions, WandbOptions, require_installed
from ablate.tracking.wandb_run import build_wandb_logger


def build_loggers(
    options: Mapping[str, Any],
    user_tags: Sequence[str],
    output_dir: Path,
    run_name: str,
    group: str | None,
    extra_config: dict[str, Any],
    resume_id: str | None = None,
    resuming: bool = False,
    labels: RunLabels | None = None,
) -> list[Logger]:
    """The job's loggers: CSV, plus W&B, TensorBoard and MLflow when selected in ``options`` (W&B and
    MLflow on global rank 0 only: one run per job). ``extra_config``: the run config (flat ``axis_*``
    keys added); ``resume_id``: the W&B run to continue; ``resuming``: CSV appends to ``metrics.csv``
    (Lightning's would delete it), MLflow reopens the job's run; ``labels``: the Hydra job's by default."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    labels = labels if labels is not None else RunLabels.current()
    axes = flat_axes(extra_config, labels.swept)
    wandb = options.get("wandb") or WandbOptions()
    group = wandb.group or group  # a configured logger.wandb.group names the group in every logger
    tags = run_tags(user_tags, labels.experiment, axes)
    run = _LoggedRun(output_dir, run_name, group, labels.job_type, tags, extra_config, axes)
    loggers: list[Logger] = [_build_csv_logger(output_dir, extra_config, resuming)]
    if wandb.enabled and rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # set by lightning at import, not in its types
        wandb_tags = list(dict.fromkeys([*wandb.tags, *run.tags]))  # in order, no duplicates
        wandb_logger = build_wandb_logger(
            wandb, run.output_dir, run.name, run.group, run.params, resume_id, tags=wandb_tags, job_type=run.job_type
        )
        if wandb_logger is not None:
            loggers.append(wandb_logger)
    if (options.get("tensorboard") or TensorBoardOptions()).enabled:
        loggers.append(_build_tensorboard_logger(run))
    mlflow_options = options.get("mlflow") or MLflowOptions()
    if mlflow_options.enabled and rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # other ranks would race to create the store
        loggers.append(_build_mlflow_logger(mlflow_options, run, resuming))
    return loggers


@dataclass(frozen=True)
class _LoggedRun:
    """The job as every logger labels it: output directory, name, group, job type, tags, config, flat axes."""

    output_dir: Path
    name: str
    group: str | None
    job_type: str
    tags: list[str]
    config: dict[str, Any]
    axes: dict[str, Any]

    @property
    def params(self) -> dict[str, Any]:
        """The run config W&B and MLflow store: the resolved config plus the flat ``axis_*`` keys."""
        return {**self.config, **self.axes}

    @property
    def config_keys(self) -> frozenset[str]:
        """The config's top-level keys, which the task's own hyper-parameters must not log again."""
        return frozenset(self.config)


def _build_csv_logger(output_dir: Path, extra_config: dict[str, Any], resuming: bool) -> Logger:
    """``output_dir/csv/metrics.csv`` (appended to by a resumed job) and ``csv/hparams.yaml``."""
    # flushed at every logging step: a killed job's metrics up to its last checkpoint are on
    # disk, and the resumed job appends after them (rows it logs again carry the same values)
    csv_class = AppendingCSVLogger if resuming else CSVLogger
    # its rows written whole: a full disk leaves no half row (ablate.tracking.csv_logger)
    csv_logger = whole_rows(csv_class(save_dir=output_dir, name="csv", version="", flush_logs_every_n_steps=1))
    # csv/hparams.yaml: the run config as W&B gets it (the optimiser's used keys only, the axes,
    # the parameter count); the task modules log no hyper-parameters of their own
    csv_logger.log_hyperparams(extra_config)
    return csv_logger


class AblateTensorBoardLogger(TensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` skipping the task's duplicate hyper-parameters (as W&B's does)."""

    def __init__(self, *args: Any, config_keys: Collection[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config_keys = frozenset(config_keys)

    @rank_zero_only
    def log_hyperparams(self, params: Any, metrics: dict[str, Any] | None = None, step: int | None = None) -> None:
        params = new_hparams(params, self._config_keys)
        if params:
            super().log_hyperparams(params, metrics=metrics, step=step)


def _build_tensorboard_logger(run: _LoggedRun) -> TensorBoardLogger:
    """``output_dir/tensorboard/``: the run's labels and axes as HPARAMS, the tags as text."""
    require_installed("tensorboard", True)  # its package, named with the pip command when missing
    summary = {
        "run_name": run.name,
        "group": run.group or "",
        "job_type": run.job_type,
        "tags": ", ".join(run.tags),
        **scalar_hparams(run.config),
        **run.axes,
    }
    logger = AblateTensorBoardLogger(
        save_dir=run.output_dir, name="tensorboard", version="", default_hp_metric=False, config_keys=run.config_keys
    )
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # set by lightning at import, not in its types
        TensorBoardLogger.log_hyperparams(logger, summary)
        logger.experiment.add_text("run/tags", "\n".join(f"- {t}" for t in run.tags) or "(none)", 0)
        print(f"tensorboard  {run.output_dir / 'tensorboard'}  (view: tensorboard --logdir {run.output_dir.parent})")
    return logger


class AblateMLFlowLogger(MLFlowLogger):
    """Lightning's ``MLFlowLogger`` that skips the task's duplicate hyper-parameters, never logs
    a param twice (MLflow refuses to change a param: a resumed run keeps its first values) and
    spells ``test/ppl@512`` as ``test/ppl_at_512`` (MLflow allows no ``@`` in a name)."""

    def __init__(self, *args: Any, config_keys: Collection[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config_keys = frozenset(config_keys)
        self._logged_params: set[str] | None = None

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        self.log_params(new_hparams(params, self._config_keys))

    @rank_zero_only
    def log_params(self, params: dict[str, Any]) -> None:
        """Log ``params`` (nested dicts flattened with ``/``), skipping keys the run already has."""
        if self._logged_params is None:
            self._logged_params = set(self.experiment.get_run(self.run_id).data.params)
        flat = {k: v for k, v in flatten_params(params).items() if k not in self._logged_params}
        if flat:
            super().log_hyperparams(flat)
            self._logged_params.update(flat)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        super().log_metrics({k.replace("@", "_at_"): v for k, v in metrics.items()}, step)


OUTPUT_DIR_TAG = "ablate.output_dir"


def _build_mlflow_logger(options: MLflowOptions, run: _LoggedRun, resuming: bool) -> MLFlowLogger:
    """An MLflow run tagged with the group, job type, output directory and tags (``key:value`` ->
    ``key=value``), the config and axes as params; a resumed job reopens its output directory's run."""
    require_installed("mlflow", True)
    uri = options.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"file:{run.output_dir.parent / 'mlruns'}"
    if uri.startswith("file:"):
        # MLflow 3 keeps the file store only as an opt-in (it otherwise raises, asking for a
        # database); a file store needs no server and takes concurrent jobs (one folder per run)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow_tags = {"group": run.group or "", "job_type": run.job_type, OUTPUT_DIR_TAG: str(run.output_dir.resolve())}
    for tag in run.tags:
        key, _, value = tag.partition(":")
        mlflow_tags.setdefault(key, value)
    run_id = _prepare_mlflow(uri, options.experiment_name, run.output_dir if resuming else None)
    logger = AblateMLFlowLogger(
        experiment_name=options.experiment_name,
        run_name=run.name,
        tracking_uri=uri,
        tags=mlflow_tags,
        run_id=run_id,
        config_keys=run.config_keys,
    )
    logger.log_params(run.params)
    print(
        f"mlflow       {uri}  experiment {options.experiment_name}, run {logger.run_id}  (view: mlflow ui "
        f"--backend-store-uri {uri})"
    )
    return logger


def _prepare_mlflow(uri: str, experiment_name: str, resume_dir: Path | None) -> str | None:
    """Create the experiment (a racing job finds it made); with ``resume_dir``, the id of its latest run."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        try:
            client.create_experiment(experiment_name)
        except MlflowException:
            pass  # created meanwhile by another job
        experiment = client.get_experiment_by_name(experiment_name)
    if resume_dir is None or experiment is None:
        return None
    value = str(resume_dir.resolve()).replace("'", "\\'")
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{OUTPUT_DIR_TAG}` = '{value}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None
