"""What a job knows from the command line: read once from Hydra, in the process Hydra runs the job
in, and handed as it is to the ranks a job starts (which run without Hydra).

:class:`Job` holds the job's run-control keys (:class:`~ablate.run.control.RunControl`), its
command-line overrides, its labels in every logger, whether it is one job of a sweep (and of a
sweep whose jobs run in worker processes, which share a stop-request file), the config files that
describe it (``.hydra/``, written once the job is decided: a refused command rewrites nothing) and
whether its directory was made for this command (a refused command leaves none behind). Nothing
else in the package asks Hydra's runtime about the running job.

A single run whose directory is new (``logs/runs/<time>``, no ``hydra.run.dir`` typed) is the command
the user typed again: with ``ckpt_path=last`` it continues the latest unfinished run of the same
overrides, in that run's directory; without, it starts a new run and says which unfinished run it
could have resumed (:func:`earlier_run`). A run whose directory is typed is that directory's run,
whatever else exists.
"""

from __future__ import annotations

import logging
import re
import shlex
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from ablate.callbacks.stop_file import STOP_FILE
from ablate.run.control import RunControl
from ablate.run.status import read_status
from ablate.tracking.naming import RunLabels, multirun_group

CONFIG_DIR = ".hydra"  # the run's config.yaml, hydra.yaml, overrides.yaml (README: where a run's config is)
# where Hydra's own values are safe unquoted: anything else in a path is written as a quoted string
_PLAIN_VALUE = re.compile(r"[\w./-]+")


def is_rank_zero() -> bool:
    """Lightning's global rank is 0 (it sets ``rank_zero_only.rank`` at import; its stubs do not declare it)."""
    from lightning.pytorch.utilities import rank_zero_only  # here: a sweep's jobs are checked before Lightning

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
    wandb_options: Any = field(default_factory=dict)  # logger.wandb, resolved: to relabel a finished run
    config_files: tuple[tuple[str, str], ...] = ()  # (name, text) of .hydra/, as composed (before any check)
    new_directory: bool = False  # Hydra made the job's directory for this command: nothing of a run is in it
    directory_given: bool = False  # the command line names it (hydra.run.dir=...): a resume continues that one

    @classmethod
    def current(cls, cfg: DictConfig) -> Job:
        """The running Hydra job of ``cfg`` (its ``paths.output_dir`` resolved here, where Hydra runs);
        a single run's new directory may give way to the unfinished run it continues."""
        overrides = job_overrides()
        labels = RunLabels.current(overrides)
        job = cls(
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
            tags=[cfg.tags] if isinstance(cfg.get("tags"), str) else [str(t) for t in cfg.get("tags") or []],
            wandb_options=OmegaConf.to_container(cfg.logger.wandb, resolve=True)
            if "wandb" in (cfg.get("logger") or {})
            else {},
            config_files=config_files(cfg),
            new_directory=made_for_this_command(Path(cfg.paths.output_dir)),
            directory_given=run_dir_given(),
        )
        return job.retyped(cfg) if job.new_directory and not job.multirun and not job.directory_given else job

    @property
    def output_dir(self) -> Path:
        return self.control.output_dir

    def retyped(self, cfg: DictConfig) -> Job:
        """A single run in a new directory, typed again after a run of the same overrides: with
        ``ckpt_path=last`` it goes on in that run's directory (the latest unfinished one, else the
        latest finished one, which is then reported rather than retrained; this command's new
        directory is removed, its log moved there); a new run says which unfinished run it could
        have continued. Starting a new run is what the command says; the note keeps the other run
        one paste away."""
        runs_dir = self.control.log_dir / "runs"
        if self.output_dir.parent.resolve() != runs_dir.resolve():
            return self  # another run directory pattern (a preset's): not the timestamped runs of this command
        unfinished = earlier_run(runs_dir, self.overrides, self.output_dir)
        if self.control.ckpt_path is None and unfinished is not None:
            print(
                f"note: {unfinished} is an unfinished run of this configuration; this command starts a new one in "
                f"{self.output_dir}. To continue that run instead: {self.resume_command(unfinished)}",
                flush=True,
            )
        if self.control.ckpt_path != "last":
            return self
        earlier = unfinished or earlier_run(runs_dir, self.overrides, self.output_dir, unfinished_only=False)
        if earlier is None:
            return self  # the first run of this configuration: it starts here
        state = "unfinished" if earlier == unfinished else "finished"
        print(f"ckpt_path=last: continuing {earlier}, the latest {state} run of this configuration", flush=True)
        with open_dict(cfg):
            cfg.paths.output_dir = str(earlier)  # the checkpoint, log and status paths follow
        move_job_log(self.output_dir, earlier)
        return replace(self, control=RunControl.from_config(cfg, earlier), new_directory=False)

    def resume_command(self, run_dir: Path | None = None) -> str:
        """The one command that continues this job's run (in ``run_dir``, default its own directory):
        its overrides, less those naming a checkpoint, a directory or a replacement, then
        ``ckpt_path=last hydra.run.dir=<dir>``, quoted for the shell (pasted, it runs no code) and
        for Hydra (a directory with quotes or spaces stays one value)."""
        keep = [o for o in self.overrides if override_key(o) not in ("ckpt_path", "hydra.run.dir", "overwrite")]
        directory = str(run_dir or self.output_dir)
        if not _PLAIN_VALUE.fullmatch(directory):
            directory = '"' + directory.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return shlex.join(["python", "train.py", *keep, "ckpt_path=last", f"hydra.run.dir={directory}"])


def override_key(override: str) -> str:
    """``+a.b=1`` -> ``a.b``."""
    return override.split("=", 1)[0].lstrip("+~")


def run_dir_given() -> bool:
    """The command line names the single run's directory (``hydra.run.dir=...``)."""
    if not HydraConfig.initialized():
        return False
    return any(override_key(str(o)) == "hydra.run.dir" for o in HydraConfig.get().overrides.hydra)


def config_files(cfg: DictConfig) -> tuple[tuple[str, str], ...]:
    """What Hydra would have written to ``<run dir>/.hydra/`` (``hydra.output_subdir`` is null: the job
    writes them itself, once it is decided): the composed config, Hydra's config and the overrides."""
    if not HydraConfig.initialized():
        return ()
    hydra: Any = HydraConfig.instance().cfg  # {"hydra": ...}, as Hydra saves it
    return (
        ("config.yaml", OmegaConf.to_yaml(cfg)),
        ("hydra.yaml", OmegaConf.to_yaml(hydra)),
        ("overrides.yaml", OmegaConf.to_yaml(HydraConfig.get().overrides.task)),
    )


def job_log_name() -> str | None:
    """The file name of Hydra's log of this job (``<job name>.log``), if Hydra runs the job."""
    return f"{HydraConfig.get().job.name}.log" if HydraConfig.initialized() else None


def made_for_this_command(run_dir: Path) -> bool:
    """``run_dir`` holds nothing but Hydra's empty log of this job: Hydra made it for this command."""
    log = job_log_name()
    entries = list(run_dir.iterdir()) if run_dir.is_dir() else []
    return all(p.name == log and p.is_file() and p.stat().st_size == 0 for p in entries)


def move_job_log(old_dir: Path, new_dir: Path) -> None:
    """Hydra's log of this job goes on in ``new_dir`` (appended); ``old_dir``, made for this command
    and now empty, is removed."""
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler) and Path(handler.baseFilename).parent == old_dir.resolve():
            target = new_dir / Path(handler.baseFilename).name
            stream = open(target, "a", encoding=handler.encoding)  # noqa: SIM115  the handler owns it from here
            previous = handler.setStream(stream)
            handler.baseFilename = str(target.resolve())
            if previous is not None:
                previous.close()
    log = job_log_name()
    if log is not None:
        (old_dir / log).unlink(missing_ok=True)
    try:
        old_dir.rmdir()
    except OSError:
        pass  # something else is in it: left alone


def earlier_run(runs_dir: Path, overrides: list[str], this_run: Path, unfinished_only: bool = True) -> Path | None:
    """The newest run directory under ``runs_dir`` (other than ``this_run``) made by the same
    overrides (its ``.hydra/overrides.yaml``; ``ckpt_path``, ``hydra.*``, ``overwrite`` and
    ``resume_allow_changes`` aside) that holds a ``last`` checkpoint and is not finished
    (interrupted, killed or crashed: ``status.json`` not completed or diverged); with
    ``unfinished_only=False``, the newest finished one when none is unfinished."""
    ignored = ("ckpt_path", "overwrite", "resume_allow_changes", "hydra.")

    def key(items: list[str]) -> list[str]:
        return sorted(o for o in items if not override_key(o).startswith(ignored))

    wanted = key(overrides)
    unfinished: list[Path] = []
    finished: list[Path] = []
    for run in runs_dir.glob("*/"):
        if run.resolve() == this_run.resolve() or not any((run / "checkpoints").glob("last*.ckpt")):
            continue
        try:
            same = key(yaml.safe_load((run / CONFIG_DIR / "overrides.yaml").read_text()) or []) == wanted
        except (OSError, yaml.YAMLError):
            continue
        status = read_status(run)
        if same:
            (finished if status is not None and status.finished else unfinished).append(run)
    candidates = unfinished or ([] if unfinished_only else finished)
    return max(candidates, key=lambda p: p.stat().st_mtime_ns) if candidates else None
