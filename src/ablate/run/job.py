"""What a job knows from the command line: read once from Hydra, in the process Hydra runs the job
in, and handed as it is to the ranks a job starts (which run without Hydra).

:class:`Job` holds the job's run-control keys (:class:`~ablate.run.control.RunControl`), its
command-line overrides, its labels in every logger and whether it is one job of a sweep (and of a
sweep whose jobs run in worker processes, which share a stop-request file). Nothing else in the
package asks Hydra's runtime about the running job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig

from ablate.callbacks.interrupt import STOP_FILE
from ablate.run.control import RunControl
from ablate.tracking.naming import RunLabels, multirun_group
from ablate.tracking.options import WandbOptions, as_tags


def is_rank_zero() -> bool:
    """Lightning's global rank is 0 (it sets ``rank_zero_only.rank`` at import; its stubs do not declare it)."""
    return rank_zero_only.rank == 0  # type: ignore[attr-defined]


def is_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def job_overrides() -> list[str]:
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def experiment_name() -> str | None:
    """The ``experiment=`` option this job was composed with (None: the defaults)."""
    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get("experiment")


def sweeper_optimises() -> bool:
    """The sweep's sweeper chooses jobs by their return value (Optuna, the tuned-LR sweeper), as
    opposed to Hydra's basic grid sweeper, which ignores it."""
    target = str(HydraConfig.get().sweeper.get("_target_", "")) if HydraConfig.initialized() else ""
    return bool(target) and not target.endswith("BasicSweeper")


def launches_worker_processes(launcher: Any) -> bool:
    """The ``hydra.launcher`` config runs jobs in worker processes (Hydra's joblib launcher)."""
    return "joblib" in str(launcher.get("_target_", "")).lower()


def jobs_in_worker_processes() -> bool:
    """This process belongs to a sweep whose jobs run in worker processes (Hydra's joblib launcher)."""
    return HydraConfig.initialized() and launches_worker_processes(HydraConfig.get().launcher)


def stop_file() -> Path | None:
    """The sweep's stop-request file (:mod:`ablate.callbacks.interrupt`), when this process is part of
    a sweep run by worker processes."""
    if not jobs_in_worker_processes():
        return None
    return Path(str(HydraConfig.get().sweep.dir)) / STOP_FILE


@dataclass(frozen=True)
class Job:
    """One job: its run-control keys and what Hydra knows of it."""

    control: RunControl
    overrides: list[str] = field(default_factory=list)
    name: str = "default"  # W&B run name
    group: str | None = None  # W&B group (the sweep)
    multirun: bool = False
    labels: RunLabels = field(default_factory=RunLabels)  # name, job_type, swept keys, experiment
    experiment: str | None = None  # the experiment= option (None: the defaults)
    worker_processes: bool = False  # one job of a sweep whose jobs run in worker processes (joblib)
    stop_file: Path | None = None  # that sweep's stop-request file
    optimised: bool = False  # the sweeper chooses jobs by their return value
    tags: list[str] = field(default_factory=list)  # the user's tags (a label: a finished run is relabelled)
    wandb: WandbOptions = field(default_factory=WandbOptions)  # logger.wandb, to relabel a finished run

    @classmethod
    def current(cls, cfg: DictConfig) -> Job:
        """The running Hydra job of ``cfg`` (its ``paths.output_dir`` resolved here, where Hydra runs)."""
        overrides = job_overrides()
        labels = RunLabels.current(overrides)
        return cls(
            control=RunControl.from_config(cfg, Path(cfg.paths.output_dir)),
            overrides=overrides,
            name=labels.name,
            group=multirun_group(),
            multirun=is_multirun(),
            labels=labels,
            experiment=experiment_name(),
            worker_processes=jobs_in_worker_processes(),
            stop_file=stop_file(),
            optimised=sweeper_optimises(),
            tags=as_tags(cfg.get("tags")),
            wandb=WandbOptions.from_logger(cfg.get("logger")),
        )

    @property
    def output_dir(self) -> Path:
        return self.control.output_dir
