"""Load the jobs of a sweep and find what varies across them: the *axes* are the override keys
whose value differs between jobs (``seed`` excluded), and jobs that agree on every axis are seeds
of one *variant*. A key a job does not override still has a value (its config group choice or
config value), so jobs appended by a second command line compare with those left at the default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.analysis.job import DamagedJob, Job, load_job, parse_overrides
from ablate.config.dotted import flatten
from ablate.config.dotted import select as select_key
from ablate.tasks import TASKS

# Overrides that choose where or how a job runs, never what it trains.
_NOT_AXES = re.compile(
    r"^(seed|ckpt_path|print_config|tags|resume_allow_changes|sweep_name|skip_completed|tune|hparams_search)$|^(hydra|paths|logger)(\.|$)|^callbacks\.progress_bar(\.|$)"
)


def find_job_dirs(root: Path) -> list[Path]:
    """The job directories of a multirun (``root/<job>/``), or ``root`` itself if it is one run."""

    def is_job(path: Path) -> bool:
        return (path / "status.json").is_file() or (path / ".hydra" / "overrides.yaml").is_file()

    if not root.is_dir():
        raise FileNotFoundError(
            f"{root} is not a directory: pass a sweep's directory, logs/multirun/<sweep> (its sweep_name, or the "
            "name the end-of-sweep table printed: `sweep logs/multirun/<sweep>: ...`)"
        )
    jobs = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".") and is_job(p))
    if not jobs and is_job(root):
        return [root]
    if not jobs:
        raise FileNotFoundError(
            f"no jobs under {root}: expected <dir>/<job>/status.json or <dir>/<job>/.hydra/overrides.yaml "
            "(the directory a `python train.py -m ...` sweep writes: logs/multirun/<sweep>, its sweep_name or the "
            "name its end-of-sweep table printed)"
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
        """Jobs grouped by their axis values, in the order the configurations first ran, each by seed."""
        groups: dict[tuple[str | None, ...], list[Job]] = {}
        for job in self.jobs:
            groups.setdefault(self.variant_key(job), []).append(job)
        return {k: sorted(v, key=lambda j: (j.seed is None, j.seed or 0)) for k, v in groups.items()}

    def short_names(self) -> dict[str, str]:
        """Axis key -> its label name: the last component where unambiguous (``optim.lr`` -> ``lr``)."""
        last = [axis.rsplit(".", 1)[-1] for axis in self.axes]
        return {axis: short if last.count(short) == 1 else axis for axis, short in zip(self.axes, last)}

    def full_name(self, name: str) -> str:
        """The axis key that ``name`` (full or short) denotes; a name that is no axis, unchanged."""
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
    """Override keys (in command-line order) whose value differs between jobs, run-control keys excluded."""
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


def run_key(job: Job) -> str | None:
    """What makes two jobs the same run: their config (where and how logged left out) and seed."""
    if not job.config:
        return None
    flat = {k: v for k, v in flatten(job.config).items() if not _NOT_IDENTITY.search(k)}
    flat["seed"] = job.seed
    # an override the config does not show (a partial config) keeps the job apart
    flat.update(
        {f"override:{k}": v for k, v in job.overrides.items() if select_key(job.config, k) is None and k != "seed"}
    )
    return json.dumps(flat, sort_keys=True, default=str)


def drop_duplicates(jobs: list[Job]) -> tuple[list[Job], list[str]]:
    """One job per run: a job with an earlier one's configuration and seed counted once, with a note."""
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
    """All jobs of ``root``: a damaged job left out, a duplicate counted once, each with a note."""
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
    """The jobs of a ``tune=lr`` sweep at each variant's chosen rate, without the grid's other rates
    and the held-out selection seed's jobs, and a note saying so (no ``lr_tuning.json``: unchanged)."""
    path = Path(root) / TUNING_FILE
    if not path.is_file():
        return sweep, None
    tuning = json.loads(path.read_text())
    # each command's own selection seed (per variant); older files: the one (or every) recorded seed
    recorded = [str(s) for s in tuning.get("selection_seeds") or []]
    top = tuning.get("selection_seed")
    every = set(recorded) | ({str(top)} if top is not None else set())
    wanted: list[tuple[dict[str, Any], set[str]]] = []
    for variant in tuning.get("variants", []):
        if variant.get("chosen_override"):
            own = variant.get("selection_seed")
            wanted.append((variant, {str(own)} if own is not None else every))

    def matching(job: Job) -> list[set[str]]:
        return [held for variant, held in wanted if _ran_at(job, variant)]

    at_rate = [job for job in sweep.jobs if matching(job)]
    kept = [job for job in at_rate if job.seed is None or not any(str(job.seed) in held for held in matching(job))]
    own = {str(v["selection_seed"]) for v in tuning.get("variants", []) if v.get("selection_seed") is not None}
    held_out = ",".join(sorted(every | own, key=str)) or None
    dropped, selection = len(sweep.jobs) - len(at_rate), len(at_rate) - len(kept)
    # the seeds the kept jobs have, not lr_tuning.json's "seeds": that list is the last command's,
    # and a sweep finished by several commands (a few seeds each) has more
    seeds = ",".join(str(seed) for seed in sorted({job.seed for job in kept if job.seed is not None}))
    nested = tuning.get("selection") == "nested"
    if nested:
        how = (
            f"seeds {seeds}, each trained at the rate its own selection grid chose (on that seed + "
            f"{tuning.get('selection_offset')}, hydra.sweeper.selection=nested), so the selection's noise is in "
            "the seeds' spread"
        )
    elif held_out is not None:
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
    out = Sweep.from_jobs(sweep.source, kept, sweep.notes)
    if nested:  # the rate is each seed's own, not a variant's: its seeds are one row
        out.axes = [a for a in out.axes if a != tuning.get("key", "optim.lr")]
    return out, note


def _job_value(job: Job, key: str) -> str | None:
    """A job's override of ``key``; for ``seed``, its seed as text."""
    if key == "seed":
        return None if job.seed is None else str(job.seed)
    return job.overrides.get(key)


def neighbour_text(gaps: list[list[float | None]]) -> str:
    """``neighbours`` of one arm (one per selection) as a cell: the mean cost of a step down / up."""

    def mean(values: list[float | None]) -> str:
        finite = [x for x in values if x is not None]
        return f"{sum(finite) / len(finite):+.3g}" if finite else "-"

    return f"{mean([g[0] for g in gaps])} / {mean([g[1] for g in gaps])}"


def rates_text(texts: list[str]) -> str:
    """An arm's chosen rates as a cell: one value, or each verdict seed's (``selection=nested``)."""
    return texts[0] if len(set(texts)) == 1 else ",".join(texts)


EDGE_WORDS = {"lowest": "bottom edge", "highest": "top edge", "only": "the grid's only rate"}


def tuned_choices(sweep: Sweep, root: str | Path) -> dict[tuple[str | None, ...], str]:
    """Each variant's tuned rate as the verdict table states it: ``0.008 (top edge)`` (issue 43 item 4)."""
    path = Path(root) / TUNING_FILE
    if not path.is_file():
        return {}
    records = [v for v in json.loads(path.read_text()).get("variants", []) if v.get("chosen_override")]
    out = {}
    for key, jobs in sweep.variants().items():
        mine = [r for r in records if any(_ran_at(job, r) for job in jobs)]  # selection=nested: one per seed
        if not mine:
            continue
        mine.sort(key=lambda r: int(r.get("verdict_seed") or 0))  # nested: integer seeds (the sweeper refuses others)
        rates = rates_text([r["chosen_override"].split("=", 1)[1] for r in mine])
        notes = list(dict.fromkeys(EDGE_WORDS.get(r["edge"], str(r["edge"])) for r in mine if r.get("edge")))
        extended = sorted({x for r in mine for x in r.get("extended") or []})
        if extended:
            notes.append("grid extended: " + ", ".join(f"{x:g}" for x in extended))
        if any("neighbours" in r for r in mine):
            notes.append("Δ a step down / up: " + neighbour_text([r.get("neighbours") or [None, None] for r in mine]))
        out[key] = rates + (f" ({'; '.join(notes)})" if notes else "")
    return out


def _ran_at(job: Job, record: dict[str, Any]) -> bool:
    """Whether ``job`` ran at the rate ``record`` (of ``lr_tuning.json``) chose, and its verdict seed."""
    want = parse_overrides([*record["overrides"], record["chosen_override"]])
    if record.get("verdict_seed") is not None:
        want["seed"] = str(record["verdict_seed"])
    return all(_job_value(job, k) == v for k, v in want.items())
