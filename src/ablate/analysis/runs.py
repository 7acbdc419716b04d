"""Load the jobs of a sweep and find what varies across them.

A Hydra multirun (``python train.py -m norm=pre,post seed=1,2``) writes one directory per job,
``<sweep dir>/<job dir>/``, holding ``status.json`` (written by :func:`ablate.run.train.run`),
``csv/metrics.csv`` (Lightning's CSVLogger: one row per logged metric group, so a step can span
several rows), ``.hydra/overrides.yaml`` and ``.hydra/config.yaml``/``hydra.yaml``.

The *ablation axes* of a sweep are the override keys whose value differs between jobs, ``seed``
excluded: jobs that agree on every axis are seeds of one *variant* (one row of the summary, one
line of a figure). A key that a job does not override still has a value (its config group
choice, or its config value), so jobs appended to a sweep directory by a second command line,
e.g. ``norm=post seed=3 optim.lr=1e4``, compare correctly with the jobs that left it at its
default.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ablate import metrics
from ablate.config.dotted import select as select_key
from ablate.eval_units import FILENAME as UNITS_FILE
from ablate.eval_units import Units, read_units
from ablate.tasks import TASKS, task_of_metrics

STATUSES = ("completed", "diverged", "crashed", "incomplete")
# Overrides that choose where or how a job runs, never what it trains.
_NOT_AXES = re.compile(
    r"^(seed|ckpt_path|print_config|tags|resume_allow_changes|sweep_name|skip_completed|tune|hparams_search)$|^(hydra|paths|logger)(\.|$)|^callbacks\.progress_bar(\.|$)"
)


def override_key(override: str) -> str:
    """``+optim.lr=1e-3`` -> ``optim.lr`` (Hydra's ``+``/``++``/``~`` prefixes dropped)."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def canonical(value: Any) -> str:
    """One spelling per value, so that ``1e-3`` and ``0.001`` name the same variant."""
    text = str(value).strip()
    if text.lower() in ("true", "false", "null", "none"):
        return text.lower().replace("none", "null")
    try:
        number = float(text)
    except ValueError:
        return text
    return f"{number:g}" if math.isfinite(number) else text


def parse_overrides(overrides: Iterable[str]) -> dict[str, str]:
    """Hydra override strings -> ``{key: canonical value}`` (deletions ``~key`` are skipped)."""
    parsed = {}
    for item in overrides:
        if "=" in item and not item.startswith("~"):
            parsed[override_key(item)] = canonical(item.split("=", 1)[1])
    return parsed


def higher_is_better(metric: str) -> bool:
    """Whether a larger value of ``metric`` is better, as its task declares it (BLEU up; loss,
    perplexity and bits per byte down: :func:`ablate.metrics.higher_is_better`); a metric that no
    task declares is refused by name rather than ranked by a guess."""
    return metrics.higher_is_better(metric)


def read_metrics_csv(path: Path) -> pd.DataFrame:
    """A CSVLogger ``metrics.csv`` as one row per step (index ``step``), columns = metric names.

    Lightning writes a separate row for each group of metrics logged at a step (grad norms,
    train metrics, validation), and a resumed run repeats the steps since its last checkpoint;
    both collapse to the last logged value of each metric at each step.
    """
    if not path.is_file():
        return pd.DataFrame(index=pd.Index([], name="step", dtype=int))
    frame = pd.read_csv(path)
    frame = frame.drop(columns=[c for c in ("epoch",) if c in frame])
    return frame.groupby("step").last().sort_index()


@dataclass
class Job:
    """One training job of a sweep: identity, outcome and logged metrics."""

    name: str  # the job directory's name (local) or the run's name (W&B)
    source: str  # where it was read from: a directory or a W&B run path
    overrides: dict[str, str]
    status: str = "incomplete"  # one of STATUSES
    record: dict[str, Any] = field(default_factory=dict)  # status.json (or the W&B summary)
    config: dict[str, Any] = field(default_factory=dict)  # the resolved config
    choices: dict[str, str] = field(default_factory=dict)  # Hydra's config group choices
    metrics: pd.DataFrame = field(default_factory=pd.DataFrame)
    started: float = 0.0  # when the job started (Unix time), to list configurations in run order
    _cache: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def value(self, key: str) -> str | None:
        """The job's value of config key ``key``: its override, else its config group choice,
        else the resolved config value (the ``axes`` summary for groups: ``norm`` -> ``pre``)."""
        if key in self.overrides:
            return self.overrides[key]
        if key in self.choices and self.choices[key] is not None:
            return canonical(self.choices[key])
        found = select_key(self.config, key)
        if found is None or isinstance(found, dict):  # a config group (norm: {placement: pre, ...}): its option
            axes = self.record.get("axes") or self.config.get("axes") or {}
            found = axes.get(key) or (found.get("name") if isinstance(found, dict) else None)
        return None if found is None else canonical(found)

    @property
    def seed(self) -> int | None:
        value = self.value("seed")
        return int(float(value)) if value not in (None, "null") else None

    @property
    def task(self) -> str:
        return self.value("task") or task_of_metrics(set(self.metrics.columns) | set(self.record.get("metrics") or {}))

    def series(self, metric: str) -> pd.Series:
        """The logged values of ``metric`` by step (empty when never logged)."""
        if metric not in self.metrics:
            return pd.Series(dtype=float)
        return self.metrics[metric].dropna()

    def final(self, metric: str) -> float:
        """The last logged value of ``metric``, else the one in ``status.json``; NaN if none."""
        values = self.series(metric)
        if len(values):
            return float(values.iloc[-1])
        recorded = (self.record.get("metrics") or {}).get(metric)
        return float(recorded) if recorded is not None else math.nan

    def best(self, metric: str) -> float:
        """The best logged value of ``metric`` (max for BLEU-like metrics, min for loss/ppl)."""
        values = self.series(metric)
        if not len(values):
            return self.final(metric)
        return float(values.max() if higher_is_better(metric) else values.min())

    def median(self, metric: str) -> float:
        values = self.series(metric)
        return float(values.median()) if len(values) else math.nan

    def units(self, tag: str) -> Units | None:
        """The per-unit losses of this job's test evaluation ``tag`` (``""``, ``"@512"``; see
        :mod:`ablate.eval_units`), or None when the job recorded none (a run from before they
        existed, a W&B run, a damaged file)."""
        if "units" not in self._cache:
            path = Path(self.source) / UNITS_FILE
            try:
                self._cache["units"] = read_units(path)[0] if path.is_file() else {}
            except ValueError:
                self._cache["units"] = {}
        return self._cache["units"].get(tag)


class DamagedJob(ValueError):
    """A job directory whose files cannot be read (garbage ``status.json``, an empty or binary
    ``metrics.csv``); the message names the file. The sweep is read without it, and says so."""


def _read_status(path: Path) -> dict[str, Any]:
    """``status.json`` as a mapping (``{}`` when absent); anything else is :class:`DamagedJob`."""
    if not path.is_file():
        return {}
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as err:  # UnicodeDecodeError is a ValueError
        raise DamagedJob(f"{path}: not readable as JSON ({err})") from None
    if not isinstance(record, dict) or not isinstance(record.get("status", ""), str):
        raise DamagedJob(f"{path}: not a status record (a JSON object with a status string)")
    return record


def _read_metrics(path: Path) -> pd.DataFrame:
    try:
        return read_metrics_csv(path)
    except (OSError, ValueError, pd.errors.ParserError, KeyError) as err:  # EmptyDataError is a ValueError
        why = "empty" if path.is_file() and path.stat().st_size == 0 else f"{type(err).__name__}: {err}"
        raise DamagedJob(f"{path}: not a metrics table ({why})") from None


def _yaml_list(path: Path) -> list[Any]:
    try:
        found = yaml.safe_load(path.read_text()) if path.is_file() else []
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise DamagedJob(f"{path}: not readable as YAML ({type(err).__name__})") from None
    if not isinstance(found, list):
        raise DamagedJob(f"{path}: not a list of overrides")
    return found


def _mapping(path: Path) -> dict[str, Any]:
    try:
        found = _read_yaml(path)
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise DamagedJob(f"{path}: not readable as YAML ({type(err).__name__})") from None
    if not isinstance(found, dict):
        raise DamagedJob(f"{path}: not a mapping")
    return found


def load_job(job_dir: Path) -> Job:
    """Read one job directory (any of its files may be missing: a job killed early).

    Its identity is what the run recorded itself: the overrides in ``status.json`` and the
    resolved config the CSV logger wrote when the run started (``csv/hparams.yaml``). Hydra's
    ``.hydra/`` files are the fallback (a job killed before either exists): a later command on
    the same directory, even one that was refused, rewrites them, so when they are newer than the
    finished run's ``status.json`` their group choices are not used. A file that cannot be read
    raises :class:`DamagedJob` naming it."""
    status_file, hydra_dir = job_dir / "status.json", job_dir / ".hydra"
    record = _read_status(status_file)
    overrides_file = hydra_dir / "overrides.yaml"
    # .hydra/ newer than the finished run's status.json: a later command rewrote it (issue 32)
    rewritten = (
        status_file.is_file()
        and overrides_file.is_file()
        and overrides_file.stat().st_mtime > status_file.stat().st_mtime + 1
    )
    recorded = record.get("overrides")
    if isinstance(recorded, list) and recorded and (rewritten or not overrides_file.is_file()):
        overrides = recorded
    else:
        overrides = _yaml_list(overrides_file)
    hparams = job_dir / "csv" / "hparams.yaml"
    config = _mapping(hparams) if hparams.is_file() else {}
    config = config if "model" in config or "data" in config else _mapping(hydra_dir / "config.yaml")
    hydra_cfg = {} if rewritten else _mapping(hydra_dir / "hydra.yaml")
    choices = (hydra_cfg.get("hydra") or {}).get("runtime", {}).get("choices") or {}
    status = record.get("status", "incomplete")
    marker = next((p for p in (hparams, hydra_dir / "config.yaml") if p.is_file()), job_dir)
    if status not in STATUSES:
        status = "incomplete"
    return Job(
        name=job_dir.name,
        source=str(job_dir),
        overrides=parse_overrides([str(o) for o in overrides or []]),
        status=status,
        record=record,
        config=config,
        choices=choices,
        metrics=_read_metrics(job_dir / "csv" / "metrics.csv"),
        started=marker.stat().st_mtime,
    )


def _read_yaml(path: Path) -> dict[str, Any]:
    # Hydra writes plain YAML; interpolations (${...}) stay strings, which is all we need
    return (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}


def find_job_dirs(root: Path) -> list[Path]:
    """The job directories of a multirun (``root/<job>/``), or ``root`` itself if it is one run."""

    def is_job(path: Path) -> bool:
        return (path / "status.json").is_file() or (path / ".hydra" / "overrides.yaml").is_file()

    if not root.is_dir():
        raise FileNotFoundError(
            f"{root} is not a directory: pass a multirun directory such as logs/multirun/<timestamp>"
        )
    jobs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and is_job(p))
    if not jobs and is_job(root):
        return [root]
    if not jobs:
        raise FileNotFoundError(
            f"no jobs under {root}: expected <dir>/<job>/status.json or <dir>/<job>/.hydra/overrides.yaml "
            "(the directory a `python train.py -m ...` sweep writes, e.g. logs/multirun/<timestamp>)"
        )
    return jobs


@dataclass
class Sweep:
    """The jobs of one sweep and the axes along which they differ."""

    source: str
    jobs: list[Job]
    axes: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # jobs left out (damaged) or counted once (duplicates)

    @classmethod
    def from_jobs(cls, source: str, jobs: list[Job], notes: list[str] | None = None) -> Sweep:
        jobs = sorted(jobs, key=lambda j: (j.started, j.name))  # run order: the sweep's command-line order
        return cls(source, jobs, varying_axes(jobs), list(notes or []))

    def variant_key(self, job: Job) -> tuple[str | None, ...]:
        return tuple(job.value(axis) for axis in self.axes)

    def variants(self) -> dict[tuple[str | None, ...], list[Job]]:
        """Jobs grouped by their axis values (seeds of one configuration together), in the order
        the configurations first ran (a sweep runs its values in command-line order; jobs appended
        later come last); within a group, by seed."""
        groups: dict[tuple[str | None, ...], list[Job]] = {}
        for job in self.jobs:
            groups.setdefault(self.variant_key(job), []).append(job)
        return {k: sorted(v, key=lambda j: (j.seed is None, j.seed or 0)) for k, v in groups.items()}

    def short_names(self) -> dict[str, str]:
        """Axis key -> the name shown in labels: its last component where that is unambiguous
        (``optim.lr`` -> ``lr``), the full key otherwise."""
        last = [axis.rsplit(".", 1)[-1] for axis in self.axes]
        return {axis: short if last.count(short) == 1 else axis for axis, short in zip(self.axes, last)}

    def full_name(self, name: str) -> str:
        """The axis key that ``name`` (a full or a short axis name, see :meth:`short_names`) denotes;
        a name that is no axis comes back unchanged (a config key compared as it is)."""
        return next((axis for axis, short in self.short_names().items() if short == name), name)

    def label(self, key: tuple[str | None, ...]) -> str:
        """A variant's name from its axes, e.g. ``norm=post, lr=0.001``."""
        if not self.axes:
            return "all jobs"
        names = self.short_names()
        return ", ".join(f"{names[axis]}={value}" for axis, value in zip(self.axes, key))

    @property
    def task(self) -> str:
        tasks = [job.task for job in self.jobs]
        return max(TASKS, key=tasks.count) if tasks else next(iter(TASKS))


def shared_number(jobs: Iterable[Job], key: str) -> float | None:
    """Config key ``key`` as a number when every job that sets it agrees on one value, else None."""
    values = {v for job in jobs if (v := job.value(key)) is not None and v != "null"}
    return float(values.pop()) if len(values) == 1 else None


def varying_axes(jobs: list[Job]) -> list[str]:
    """Override keys (in command-line order) whose value is not the same in every job, ``seed``
    and run-control keys (``hydra.*``, ``paths.*``, ``logger``, ``tune``, ...) excluded."""
    keys: list[str] = []
    for job in jobs:
        keys += [k for k in job.overrides if k not in keys and not _NOT_AXES.search(k)]
    return [k for k in keys if len({job.value(k) for job in jobs}) > 1]


# what does not change what a run trains: left out when two jobs are compared as the same run
_NOT_IDENTITY = re.compile(
    r"^(paths|hydra|logger|callbacks|tags|sweep_name|print_config|ckpt_path|skip_completed|resume_allow_changes|"
    r"runtime|axes|params|params_estimate|world_size|accumulate_grad_batches|tune|hparams_search)(\.|$)|"
    r"^data\.(data_dir|cache_dir|num_workers|pin_memory)$"
)


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: node}


def run_key(job: Job) -> str | None:
    """What makes two jobs the same run: their resolved config (where things live and how they
    are logged left out) and seed, or None when the job has no config to compare."""
    if not job.config:
        return None
    flat = {k: v for k, v in _flat(job.config).items() if not _NOT_IDENTITY.search(k)}
    flat["seed"] = job.seed
    # an override the config does not show (a partial config) keeps the job apart
    flat.update(
        {f"override:{k}": v for k, v in job.overrides.items() if select_key(job.config, k) is None and k != "seed"}
    )
    return json.dumps(flat, sort_keys=True, default=str)


def drop_duplicates(jobs: list[Job]) -> tuple[list[Job], list[str]]:
    """One job per run: a job with the configuration and seed of an earlier one (two sweeps mixed
    under one ``sweep_name``, a job copied twice) is counted once, the earliest kept; with a note."""
    kept: list[Job] = []
    seen: dict[str, Job] = {}
    notes: list[str] = []
    for job in sorted(jobs, key=lambda j: (j.started, j.name)):
        key = run_key(job)
        if key is not None and key in seen:
            notes.append(
                f"{job.source}: the same run as {seen[key].name} (same configuration and seed {job.seed}): counted once"
            )
            continue
        if key is not None:
            seen[key] = job
        kept.append(job)
    return kept, notes


def load_sweep(root: str | Path) -> Sweep:
    """All jobs of the multirun directory ``root`` (see the module docstring). A damaged job is
    left out and a duplicate of another (the same configuration and seed) counted once; each with
    a one-line note in :attr:`Sweep.notes`, naming the file or the job."""
    root = Path(root)
    jobs, notes = [], []
    for path in find_job_dirs(root):
        try:
            jobs.append(load_job(path))
        except DamagedJob as err:
            notes.append(f"skipped (damaged): {err}")
    jobs, duplicates = drop_duplicates(jobs)
    sweep = Sweep.from_jobs(str(root), jobs)
    sweep.notes = notes + duplicates
    return sweep


TUNING_FILE = "lr_tuning.json"  # written by the tuned-LR sweeper (ablate.sweepers.tuned_lr)


def tuned_key(root: str | Path) -> str | None:
    """The key a ``tune=lr`` sweep tuned (``optim.lr``), or None when ``root`` is not one."""
    path = Path(root) / TUNING_FILE
    return json.loads(path.read_text()).get("key", "optim.lr") if path.is_file() else None


def at_tuned_rates(sweep: Sweep, root: str | Path) -> tuple[Sweep, str | None]:
    """The jobs of a ``tune=lr`` sweep at each variant's chosen learning rate (stage 2, every
    verdict seed), without the other rates of the grid and without the selection seed's jobs
    (stage 1 ran on ``selection_seed``, held out from the verdicts), and a note saying so; the
    sweep unchanged (and None) when ``root`` has no ``lr_tuning.json``. Each variant is then one
    row, with the rate it was tuned to as an axis. A selection written before the selection seed
    existed (stage 1 on the first verdict seed) is kept as it was, and the note says its first
    seed won the selection."""
    path = Path(root) / TUNING_FILE
    if not path.is_file():
        return sweep, None
    tuning = json.loads(path.read_text())
    # each command's own selection seed (per variant); older files: the one (or every) recorded seed
    recorded = [str(s) for s in tuning.get("selection_seeds") or []]
    top = tuning.get("selection_seed")
    every = set(recorded) | ({str(top)} if top is not None else set())
    wanted: list[tuple[dict[str, str], set[str]]] = []
    for variant in tuning.get("variants", []):
        if variant.get("chosen_override"):
            own = variant.get("selection_seed")
            held = {str(own)} if own is not None else every
            wanted.append((parse_overrides([*variant["overrides"], variant["chosen_override"]]), held))

    def matching(job: Job) -> list[set[str]]:
        return [held for want, held in wanted if all(job.overrides.get(k) == v for k, v in want.items())]

    at_rate = [job for job in sweep.jobs if matching(job)]
    kept = [job for job in at_rate if job.seed is None or not any(str(job.seed) in held for held in matching(job))]
    held_out = (
        ",".join(
            sorted(
                every
                | {str(v["selection_seed"]) for v in tuning.get("variants", []) if v.get("selection_seed") is not None},
                key=str,
            )
        )
        or None
    )
    dropped, selection = len(sweep.jobs) - len(at_rate), len(at_rate) - len(kept)
    # the seeds the kept jobs have, not lr_tuning.json's "seeds": that list is the last command's,
    # and a sweep finished by several commands (a few seeds each) has more
    seeds = ",".join(str(seed) for seed in sorted({job.seed for job in kept if job.seed is not None}))
    if held_out is not None:
        how = (
            f"seeds {seeds}, each trained at that rate after the selection; the selection ran on "
            + (f"seed {held_out}" if "," not in held_out else f"seeds {held_out} (each command's own)")
            + f", whose {selection} job(s) at the chosen rates are left out with the grid"
        )
    elif tuning.get("tuning_seed") is not None:
        how = (
            f"seeds {seeds}; written before held-out selection: seed {tuning.get('tuning_seed')}'s job at the "
            "chosen rate is the one that won the selection (optimistic)"
        )
    else:
        how = "its seeds there"
    note = (
        f"{TUNING_FILE}: each variant at its tuned learning rate, {how} ({dropped} job(s) of the other grid rates "
        "left out; --all-lrs shows them)"
    )
    return Sweep.from_jobs(sweep.source, kept, sweep.notes), note
