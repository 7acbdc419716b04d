"""What a job will do, from its typed config and its run folder, decided before any data is read.

:func:`ablate.run.train.run` asks :func:`check` (a :class:`Preflight`), then :func:`decide` (a :class:`Plan`):

* a job of a sweep: completed or diverged (``status.json``): skipped with its stored result
  (``skip_completed``); a ``last.ckpt`` without such a status: resumed; ``skip_completed=false``:
  trained from scratch; a worker-process sweep asked to stop: not started;
* a single run with ``ckpt_path``: resumed (a finished run a resume would not train further is
  reported, not retrained); ``ckpt_path=last`` without a checkpoint is refused, except for a
  sweep's job and inside a SLURM job, where the same command is also the job's first run;
* a single run without ``ckpt_path`` into another run's directory: refused, unless ``overwrite=true``.

A resumed checkpoint is read once and must be the same run (:func:`read_resumable`, :func:`same_run`).
:class:`Job` is what Hydra knows of the job, read once where Hydra runs it. A failed job takes
back what it changed (:func:`note`/:func:`take_back`, :func:`keep`/:func:`settle`). No torch and no
Lightning at import: the command-line and sweep checks use it before the training stack loads.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict

from ablate.callbacks.stop_file import STOP_FILE
from ablate.checkpoints.files import (
    abandoned_writes,
    checkpoint_files,
    find_last_checkpoint,
    require_resumable,
    resolve_ckpt_path,
    resume_state,
)
from ablate.config.dotted import override_key
from ablate.config.identity import check_same_run
from ablate.errors import ConfigError
from ablate.nn.spec import ModelSpec
from ablate.run import distributed, environment, memory
from ablate.run.config import RunConfig
from ablate.run.status import FAILED_RECORD, METRICS_FILE, RunStatus, read_status
from ablate.tracking.naming import RunLabels, multirun_group
from ablate.writes import check_run_folder

log = logging.getLogger(__name__)

CONFIG_DIR = ".hydra"  # the run's config.yaml, hydra.yaml, overrides.yaml (README: where a run's config is)
# not the run's settings: where and how this command runs, and what it allows
RUN_CONTROL = ("ckpt_path", "overwrite", "resume_allow_changes", "hydra.")
# where Hydra's own values are safe unquoted: anything else in a path is written as a quoted string
_PLAIN_VALUE = re.compile(r"[\w./-]+")


# ------------------------------------------------------------------------------------ the job


def is_rank_zero() -> bool:
    """Lightning's global rank is 0 (it sets ``rank_zero_only.rank`` at import; its stubs do not declare it)."""
    from lightning.pytorch.utilities import rank_zero_only  # here: a sweep's jobs are checked before Lightning

    return rank_zero_only.rank == 0  # type: ignore[attr-defined]


def job_overrides() -> list[str]:
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def experiment_name() -> str | None:
    """The ``experiment=`` option this job was composed with (None: the defaults)."""
    if not HydraConfig.initialized():
        return None
    return HydraConfig.get().runtime.choices.get("experiment")


def sweeper_optimises() -> bool:
    """The sweeper chooses jobs by their return value (Optuna, the tuned-LR sweeper; not the grid)."""
    target = str(HydraConfig.get().sweeper.get("_target_", "")) if HydraConfig.initialized() else ""
    return bool(target) and not target.endswith("BasicSweeper")


def launches_worker_processes(launcher: Any) -> bool:
    """The ``hydra.launcher`` config runs jobs in worker processes (Hydra's joblib launcher)."""
    return "joblib" in str(launcher.get("_target_", "")).lower()


def jobs_in_worker_processes() -> bool:
    """This process belongs to a sweep whose jobs run in worker processes (Hydra's joblib launcher)."""
    return HydraConfig.initialized() and launches_worker_processes(HydraConfig.get().launcher)


def stop_file() -> Path | None:
    """The stop-request file of this process's worker-process sweep (:mod:`ablate.callbacks.interrupt`)."""
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
        """The running Hydra job of ``cfg``; a single run's new directory may give way to the run it continues."""
        overrides = job_overrides()
        labels = RunLabels.current(overrides)
        job = cls(
            control=RunControl.from_config(cfg, Path(cfg.paths.output_dir)),
            overrides=overrides,
            name=labels.name,
            group=multirun_group(),
            multirun=HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN,
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
        """A single run in a new directory after a run of the same overrides: with ``ckpt_path=last``
        it goes on in that run's directory (the latest unfinished one, else the latest finished one;
        this command's directory is removed, its log moved there); a new run names the unfinished
        run it could have continued."""
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
        """The command that continues this job's run (in ``run_dir``), quoted for the shell and Hydra."""
        keep = [o for o in self.overrides if override_key(o) not in ("ckpt_path", "hydra.run.dir", "overwrite")]
        directory = str(run_dir or self.output_dir)
        if not _PLAIN_VALUE.fullmatch(directory):
            directory = '"' + directory.replace("\\", "\\\\").replace('"', '\\"') + '"'
        return shlex.join(["python", "train.py", *keep, "ckpt_path=last", f"hydra.run.dir={directory}"])


def run_dir_given() -> bool:
    """The command line names the single run's directory (``hydra.run.dir=...``)."""
    if not HydraConfig.initialized():
        return False
    return any(override_key(str(o)) == "hydra.run.dir" for o in HydraConfig.get().overrides.hydra)


def config_files(cfg: DictConfig) -> tuple[tuple[str, str], ...]:
    """What Hydra would have written to ``<run dir>/.hydra/`` (the job writes it once decided)."""
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
    """Hydra's log of this job goes on in ``new_dir``; ``old_dir``, now empty, is removed."""
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
    """The newest run under ``runs_dir`` (not ``this_run``) of the same overrides (run control aside)
    that holds a ``last`` checkpoint and is not finished; with ``unfinished_only=False``, the newest
    finished one when none is unfinished."""

    def key(items: list[str]) -> list[str]:
        return sorted(o for o in items if not override_key(o).startswith(RUN_CONTROL))

    wanted = key(overrides)
    unfinished: list[Path] = []
    finished: list[Path] = []
    for run in runs_dir.glob("*/"):
        if run.resolve() == this_run.resolve() or not any((run / "checkpoints").glob("last*.ckpt")):
            continue
        stored = stored_overrides(run)
        if stored is None or key(stored) != wanted:
            continue
        status = read_status(run)
        (finished if status is not None and status.finished else unfinished).append(run)
    candidates = unfinished or ([] if unfinished_only else finished)
    return max(candidates, key=lambda p: p.stat().st_mtime_ns) if candidates else None


@dataclass(frozen=True)
class RunControl:
    output_dir: Path
    log_dir: Path  # paths.log_dir: single runs live in <log_dir>/runs/<timestamp>
    checkpoint_dirs: tuple[Path, ...]  # the configured checkpoint callbacks' dirpath
    ckpt_path: str | None = None  # "last", a path, or None (a fresh run)
    skip_completed: bool = True
    overwrite: bool = False
    resume_allow_changes: tuple[str, ...] = ()
    print_config: bool = False
    optimized_metric: str = "val/loss"
    max_steps: int | None = None  # trainer.max_steps; None: unset or -1 (the run is counted in epochs)

    @classmethod
    def from_config(cls, cfg: DictConfig, output_dir: Path) -> RunControl:
        """``output_dir`` is the job's directory (``paths.output_dir``, resolved where Hydra runs)."""
        nodes = (cfg.get("callbacks") or {}).values()
        max_steps = cfg.trainer.get("max_steps", -1)
        return cls(
            output_dir=output_dir,
            log_dir=Path(str(cfg.paths.log_dir)),
            checkpoint_dirs=tuple(Path(str(n.dirpath)) for n in nodes if n is not None and n.get("dirpath")),
            ckpt_path=None if cfg.get("ckpt_path") is None else str(cfg.ckpt_path),
            skip_completed=bool(cfg.get("skip_completed", True)),
            overwrite=bool(cfg.get("overwrite", False)),
            resume_allow_changes=tuple(str(k) for k in cfg.get("resume_allow_changes") or []),
            print_config=bool(cfg.get("print_config", False)),
            optimized_metric=str(cfg.get("optimized_metric", "val/loss")),
            max_steps=max_steps if isinstance(max_steps, int) and max_steps >= 0 else None,
        )

    def resuming_from(self, ckpt_path: str) -> RunControl:
        """The same job, resuming from ``ckpt_path`` (a re-run sweep found its ``last.ckpt``)."""
        return replace(self, ckpt_path=ckpt_path)


# ------------------------------------------------------------------------------------- the checks


@dataclass(frozen=True)
class Preflight:
    """What the checks established, for the training code."""

    identity: dict[str, Any]  # the run-defining settings (ablate.config.identity.run_identity)
    world_size: int
    accumulate: int  # gradient accumulation, from the global batch
    max_len: int  # the longest sequence the model sees (RunConfig.eval_max_len)
    warnings: list[str] = field(default_factory=list)  # valid settings that are probably not meant
    matmul_precision: str = "highest"  # runtime.matmul_precision resolved for the run's device
    processes: int = 1  # the processes this node starts for the job (ablate.run.distributed.launch); 1: this one
    one_gpu: bool = False  # the job trains on one GPU (in a sweep of workers, the first free one of the node)


def check(cfg: RunConfig) -> Preflight:
    """The devices the config asks for are on this machine, then :func:`preflight`."""
    environment.check_accelerator(cfg.trainer, environment.running_hydra())  # trainer=gpu with no GPU here
    return preflight(cfg)


def preflight(cfg: RunConfig) -> Preflight:
    """What a config implies on any machine: batch layout, processes, memory of a training step."""
    trainer = cfg.trainer
    world, micro, accumulate = training_layout(cfg)
    processes = distributed.devices_per_node(trainer) if distributed.needs_launch(trainer) else 1
    if processes > 1 and int(trainer.get("num_nodes", 1) or 1) > 1:
        raise ConfigError(
            f"trainer.num_nodes={trainer['num_nodes']}: the processes of the other nodes must be started there, "
            "by SLURM (hydra/launcher=slurm) or by torchrun on every node; a job started here runs on this node only."
        )
    spec = cfg.model_spec(vocab_size=1, max_len=cfg.eval_max_len)
    memory.check_training_step(cfg.data, cfg.optim.name, trainer, spec, micro)
    derived = cfg.derived
    return Preflight(
        dict(derived.identity),
        world,
        accumulate,
        cfg.eval_max_len,
        list(derived.warnings),
        derived.matmul_precision,
        processes,
        distributed.uses_one_gpu(trainer),
    )


def check_config(cfg: DictConfig) -> Preflight:
    """:func:`preflight` of a composed config (the scripts and benchmarks start from one)."""
    return preflight(RunConfig.from_hydra(cfg))


def training_layout(cfg: RunConfig) -> tuple[int, int, int]:
    """``(world size, per-device batch, gradient accumulation)`` of the global batch ``data.batch_size``."""
    trainer, data = cfg.trainer, cfg.data
    world = distributed.world_size(trainer)
    try:
        micro, accumulate = distributed.batch_layout(data["batch_size"], data.get("micro_batch_size"), world)
    except ValueError as err:  # a global batch that does not split over the devices
        raise ConfigError(str(err)) from None
    configured = trainer.get("accumulate_grad_batches")
    if configured not in (None, accumulate):
        raise ConfigError(
            f"trainer.accumulate_grad_batches={configured} conflicts with the global batch: it is derived as "
            f"data.batch_size / (world size x data.micro_batch_size) = {accumulate}. Set data.micro_batch_size instead."
        )
    return world, micro, accumulate


# ----------------------------------------------------------------------------------- the decision


@dataclass(frozen=True)
class Plan:
    """What a job does, decided once for every rank: train from ``ckpt_path`` (None: from scratch)
    into the W&B run ``wandb_run_id``; or not: it is the ``finished`` run it found, or ``stopped``."""

    ckpt_path: str | None = None
    wandb_run_id: str | None = None
    finished: RunStatus | None = None
    stopped: bool = False
    kept: bool = False  # a resume: the run's files are kept until the job ends (keep, settle)

    @property
    def trains(self) -> bool:
        return self.finished is None and not self.stopped


def decide(job: Job, identity: dict[str, Any], trainer: Mapping[str, Any] | None = None) -> Plan:
    """What this job does with its directory (module docstring); a refusal changes nothing."""
    control, output_dir = job.control, job.output_dir
    status = read_status(output_dir)
    if job.stop_file is not None and job.stop_file.exists():  # the sweep was asked to stop
        return Plan(stopped=True)
    if job.multirun and control.skip_completed and status is not None and status.finished:
        return Plan(finished=status)
    fresh = (job.multirun and not control.skip_completed) or (not job.multirun and control.ckpt_path is None)
    plan = Plan() if fresh else _resume(job, status, identity, trainer)
    records = (output_dir / "status.json", output_dir / FAILED_RECORD)
    found = [*checkpoint_files(control.checkpoint_dirs), *[p for p in records if p.exists()]]
    if fresh and found and not job.multirun and not control.overwrite and is_rank_zero():
        raise ConfigError(  # two runs would mix their checkpoints
            f"{output_dir} already holds a run ({', '.join(p.name for p in found[:3])}): continue it with "
            "ckpt_path=last, replace it with overwrite=true, or choose another directory"
        )
    plan = replace(plan, kept=plan.trains and not fresh)
    if plan.trains and is_rank_zero():  # rank 0 takes the directory, before any rank trains
        take(job, plan, found if fresh else [])
    return plan


def take(job: Job, plan: Plan, replaced: list[Path]) -> None:
    """Take the directory: keep a resumed run's files, remove ``replaced`` ones, write the config."""
    output_dir, dirs = job.output_dir, job.control.checkpoint_dirs
    abandoned = abandoned_writes(dirs)  # of processes killed while writing a checkpoint
    check_run_folder(output_dir, dirs)  # no link out of it: nothing elsewhere is deleted
    if plan.kept:  # before anything of the run changes: a failed resume puts it back
        keep(output_dir, dirs)
    else:  # a fresh run: what a killed resume kept (hard links to old checkpoints) goes
        settle(output_dir, dirs, failed=False)
    if replaced:
        why = "skip_completed=false" if job.multirun else "overwrite=true"
        log.info(f"{why}: training {output_dir} from scratch; removing its previous status.json and checkpoints")
    for path in [*replaced, *abandoned]:
        if path.is_dir() and not path.is_symlink():  # a sharded checkpoint's folder
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    (output_dir / CONFIG_DIR).mkdir(parents=True, exist_ok=True)
    for name, text in job.config_files:  # what Hydra would have written before the checks
        (output_dir / CONFIG_DIR / name).write_text(text)


def _resume(job: Job, status: RunStatus | None, identity: dict[str, Any], trainer: Mapping[str, Any] | None) -> Plan:
    """The checkpoint a job resumes, read once; a finished run it would not train further is reported."""
    control = job.control
    last = find_last_checkpoint(control.checkpoint_dirs)
    announced = False  # the console's one line that says the run resumes (Lightning's own are dropped)
    if job.multirun and last is not None and control.ckpt_path is None:  # killed or crashed before
        log.info(f"resuming {job.output_dir} ({status.status if status else 'interrupted'}) from {last}")
        ckpt_path: str | None = str(last)
        announced = True
    else:
        ckpt_path = resolve_ckpt_path(control.ckpt_path, control.checkpoint_dirs)
    if ckpt_path is None and control.ckpt_path == "last":
        # a named directory whose run took it (its config is written) and stopped before its first checkpoint
        if job.directory_given and (job.output_dir / CONFIG_DIR / "config.yaml").is_file():
            log.info(
                f"ckpt_path=last: {job.output_dir} stopped before its first checkpoint; it starts again from step 0"
            )
        elif job.multirun or "SLURM_JOB_ID" in os.environ:  # a sweep's job, or a SLURM job's every (re)submission
            log.info(
                f"ckpt_path=last: no checkpoint in {job.output_dir} yet; this first run of the job starts from step 0"
            )
        else:
            raise ConfigError(nothing_to_resume(job))
    more = status is not None and control.max_steps is not None and control.max_steps > int(status.steps or 0)
    finished = status if not job.multirun and status is not None and status.finished else None
    plan = Plan(ckpt_path, finished=None if more and finished and finished.status == "completed" else finished)
    if ckpt_path is None or not Path(ckpt_path).exists():  # "best", "hpc", a URL: Lightning's to find
        if ckpt_path is not None:
            _rank_zero_info(f"resuming {ckpt_path}")
        return plan
    if trainer is not None:
        require_sharded_loader(ckpt_path, trainer)
    checkpoint = read_resumable(ckpt_path)
    if not job.multirun:
        refuse_another_runs_checkpoint(job, Path(ckpt_path))
    wandb_run_id, changes = same_run(checkpoint, ckpt_path, identity, control.resume_allow_changes)
    if changes is None:
        _rank_zero_info(f"{ckpt_path} predates the resume check: its settings cannot be compared with this config")
    elif changes:
        _rank_zero_info(f"resuming {ckpt_path} with allowed changes: {'; '.join(changes)}")
        announced = True
    if not announced:
        _rank_zero_info(f"resuming {ckpt_path} at step {checkpoint['global_step']}")
    return replace(plan, wandb_run_id=wandb_run_id)


def read_resumable(ckpt_path: str) -> dict[str, Any]:
    """The checkpoint a job resumes: checked (:func:`ablate.tasks.checkpoints.inspect_checked`), with
    the training state, of a model this version builds alike (:func:`require_same_scales`)."""
    from ablate.tasks.checkpoints import inspect_checked  # torch, Lightning: only once a checkpoint is read

    checkpoint = inspect_checked(ckpt_path)
    require_resumable(checkpoint, ckpt_path)
    require_same_scales(checkpoint, ckpt_path)
    return checkpoint


def same_run(
    checkpoint: Mapping[str, Any], ckpt_path: str, identity: Mapping[str, Any], allowed: Sequence[str]
) -> tuple[str | None, list[str] | None]:
    """The W&B run a resumed checkpoint logs to, and the allowed changes (None: it predates the check)."""
    state = resume_state(dict(checkpoint))
    stored = state.get("run_identity")
    changes = None if stored is None else check_same_run(stored, dict(identity), list(allowed), ckpt_path)
    return state.get("wandb_run_id"), changes


def _rank_zero_info(message: str) -> None:
    from lightning.pytorch.utilities import rank_zero_info  # here: the checks run before Lightning loads

    rank_zero_info(message)


def refuse_another_runs_checkpoint(job: Job, ckpt_path: Path) -> None:
    """Refuse to resume another run folder's checkpoint here, naming the command that continues it."""
    run = ckpt_path.resolve().parent.parent
    if ckpt_path.resolve().parent.name != "checkpoints" or not (run / CONFIG_DIR).is_dir():
        return  # not a run's checkpoint: a file of the user's, loaded as asked
    if run == job.output_dir.resolve():
        return
    raise ConfigError(
        f"ckpt_path={ckpt_path} is a checkpoint of the run {run}; this command would continue it in another "
        f"folder, {job.output_dir}. Continue it in its own folder: {job.resume_command(run)}"
    )


def require_same_scales(checkpoint: Mapping[str, Any], ckpt_path: str) -> None:
    """Refuse to resume a run trained before the scale contract with a model the contract changes."""
    stored = (checkpoint.get("hyper_parameters") or {}).get("spec")
    if isinstance(stored, Mapping) and ModelSpec.from_dict(stored).contract_changes_model():
        raise ConfigError(
            f"{ckpt_path} was trained before the scale contract (docs/architecture.md#the-scale-contract): its "
            "additive position signal has the old scale (a unit-amplitude sinusoid, or a learned table not "
            "scaled with model.scale_embeddings), which this version no longer builds for training, so resuming it "
            "would change the model mid-run. Evaluate it as it is (eval.py, generate.py), or train it anew"
        )


def require_sharded_loader(ckpt_path: str | None, trainer: Mapping[str, Any]) -> None:
    """A sharded FSDP checkpoint (a folder) is resumed by the FSDP strategy only: refused otherwise."""
    if ckpt_path is None or not Path(ckpt_path).is_dir():
        return
    strategy = trainer.get("strategy", "auto")
    name = str(strategy.get("_target_", "")) if isinstance(strategy, Mapping) else str(strategy or "")
    if "fsdp" in name.lower():
        return
    raise ConfigError(
        f"{ckpt_path} is a sharded FSDP checkpoint (a folder of shards, written by trainer=fsdp "
        f"trainer.strategy.state_dict_type=sharded), which only FSDP resumes; this run's trainer.strategy is "
        f"{name.rsplit('.', 1)[-1] or 'auto'}. Resume it with trainer=fsdp (on GPUs); eval.py, generate.py and the "
        "exports read it as it is"
    )


def nothing_to_resume(job: Job) -> str:
    """Why a single run's ``ckpt_path=last`` continues nothing, and what to type instead."""
    if job.directory_given:
        return (
            f"ckpt_path=last: {job.output_dir} holds no checkpoint to continue (no last.ckpt in "
            f"{', '.join(dict.fromkeys(map(str, job.control.checkpoint_dirs)))}); nothing was started. Give the directory of the run "
            "to continue (printed at its start and in its summary), or leave out ckpt_path=last to start a new run there"
        )
    return (
        f"ckpt_path=last: no run of this configuration under {job.control.log_dir / 'runs'} holds a checkpoint; "
        "nothing was started. Give the run's directory (hydra.run.dir=<run dir> ckpt_path=last), or leave out "
        "ckpt_path=last to start a new run"
    )


# ----------------------------------------------------------------------- the run folder as it was


@dataclass(frozen=True)
class Found:
    folder: Path  # the run folder, absolute
    existing: Path  # the folder itself, or its nearest ancestor that existed
    entries: dict[str, int] | None  # name -> size of each entry the folder held (None: there was no folder)


_found: Found | None = None


def note(run_dir: str | os.PathLike[str] | None) -> None:
    """Look at ``run_dir`` (a single run's ``hydra.run.dir``; None: a sweep) before Hydra does."""
    global _found
    if run_dir is None:
        _found = None
        return
    folder = Path(run_dir).absolute()
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    entries = {p.name: p.lstat().st_size for p in folder.iterdir()} if folder.is_dir() else None
    _found = Found(folder, existing, entries)


def found(folder: str | os.PathLike[str], made: bool) -> Found | None:
    """What :func:`note` saw of ``folder`` (of a sibling named a second later: new when ``made``)."""
    folder = Path(folder).absolute()
    if _found is None or _found.folder.parent != folder.parent:
        return None
    if _found.folder == folder:
        return _found
    return Found(folder, _found.existing, None) if made else None


def take_back(found: Found, job_log: str | None) -> None:
    """Remove what the command added to ``found.folder`` (and the job log's new lines)."""
    folder = found.folder
    if found.entries is None:
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
        for parent in folder.parents:  # logs/runs/ made for this command, up to the folder that existed
            if parent == found.existing or found.existing not in parent.parents:
                break
            try:
                parent.rmdir()  # only if empty
            except OSError:
                break
        return
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.name not in found.entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
        elif entry.name == job_log and entry.is_file() and not entry.is_symlink():
            os.truncate(entry, min(entry.stat().st_size, found.entries[entry.name]))  # its lines as they were


KEPT = ".before-attempt"
_MANIFEST = "kept.json"


def _restorable(run_dir: Path, checkpoint_dirs: Sequence[Path]) -> list[Path]:
    """What an attempt may change: checkpoints, the run's config, its metrics log (``csv/``)."""
    logged = (run_dir / METRICS_FILE).parent
    return [
        *checkpoint_files(checkpoint_dirs),
        *sorted((run_dir / CONFIG_DIR).glob("*.yaml")),
        *sorted(logged.glob("*")),
    ]


def keep(run_dir: Path, checkpoint_dirs: Sequence[Path]) -> Path:
    """Keep the run's files as they are before an attempt changes them; returns the folder."""
    folder = run_dir / KEPT
    if folder.exists():  # a killed attempt's: what it left is the run now
        shutil.rmtree(folder)
    folder.mkdir()
    found = _restorable(run_dir, checkpoint_dirs)
    kept: dict[str, str | None] = {str(p): None for p in found}  # None: there, not kept (a sharded checkpoint)
    for i, path in enumerate(p for p in found if p.is_file()):
        copy = folder / str(i)
        if path.suffix == ".ckpt":
            try:
                os.link(path, copy)
            except OSError:  # a file system without hard links
                shutil.copy2(path, copy)
        else:
            shutil.copy2(path, copy)
        kept[str(path)] = copy.name
    (folder / _MANIFEST).write_text(json.dumps(kept))
    return folder


def settle(run_dir: Path, checkpoint_dirs: Sequence[Path], failed: bool) -> None:
    """End the attempt: ``failed``, the run's files put back as :func:`keep` found them."""
    folder = run_dir / KEPT
    if failed:
        kept: dict[str, str | None] = json.loads((folder / _MANIFEST).read_text())
        for path in {*_restorable(run_dir, checkpoint_dirs), *map(Path, kept)}:
            copy = kept.get(str(path))
            if copy is not None:
                os.replace(folder / copy, path)
            elif str(path) in kept:  # there before, as a folder: left as it is
                continue
            elif path.is_dir() and not path.is_symlink():  # a sharded checkpoint's folder the attempt wrote
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
    shutil.rmtree(folder, ignore_errors=True)


# ------------------------------------------------------------------- the command line of a resume


MULTIRUN_FLAGS = ("-m", "--multirun")


def resumed_run_dir(overrides: Sequence[str]) -> Path | None:
    """The directory of ``hydra.run.dir=<dir> ckpt_path=last`` on a single-run command line, or None."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except HydraException:  # the command-line check names what does not parse
        return None
    values = {o.key_or_group: o.value() for o in parsed if not o.is_delete()}
    run_dir = values.get("hydra.run.dir")
    if values.get("ckpt_path") != "last" or not isinstance(run_dir, str) or "${" in run_dir:
        return None
    return Path(run_dir)


def stored_overrides(run_dir: Path) -> list[str] | None:
    """The overrides the run in ``run_dir`` was started with (None: no readable record of them)."""
    try:
        stored = yaml.safe_load((run_dir / CONFIG_DIR / "overrides.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return [str(o) for o in stored] if isinstance(stored, list) else None


def with_stored_overrides(argv: Sequence[str]) -> list[str]:
    """``argv`` with the resumed run's own overrides (those not typed, run control aside) before the typed ones."""
    argv = list(argv)
    if any(a in MULTIRUN_FLAGS for a in argv):
        return argv
    typed = [a for a in argv if not a.startswith("-")]
    run_dir = resumed_run_dir(typed)
    stored = stored_overrides(run_dir) if run_dir is not None else None
    if not stored:
        return argv
    keys = {override_key(o) for o in typed}
    added = [o for o in stored if override_key(o) not in keys and not override_key(o).startswith(RUN_CONTROL)]
    if not added:
        return argv
    print(f"resuming {run_dir} with its own overrides: {' '.join(added)}", flush=True)
    first = next(i for i, a in enumerate(argv) if not a.startswith("-"))
    return [*argv[:first], *added, *argv[first:]]
