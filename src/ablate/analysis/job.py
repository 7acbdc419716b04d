"""One job of a sweep: the :class:`Job` record, read from its directory by :func:`load_job`
(``status.json``, ``csv/metrics.csv``, ``csv/hparams.yaml``, ``.hydra/*.yaml``), and one spelling
per override value (:func:`canonical`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ablate.config.dotted import override_key
from ablate.config.dotted import select as select_key
from ablate.eval_units import FILENAME as UNITS_FILE
from ablate.eval_units import Units, read_units
from ablate.metrics import higher_is_better  # which way a metric improves, as its task declares it
from ablate.run.status import OUTCOMES, unknown_outcome
from ablate.tasks import task_of_metrics

STATUSES = ("completed", "diverged", "crashed", "incomplete")


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


def read_metrics_csv(path: Path) -> pd.DataFrame:
    """A CSVLogger ``metrics.csv`` as one row per step: Lightning's rows per metric group, and the steps
    a resumed run repeats, collapse to the last logged value of each metric."""
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
        """The job's value of ``key``: its override, else its config group choice, else its config value."""
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
        """The last logged value of ``metric``, else the one in ``status.json``; NaN if none (or NaN only)."""
        values = self.series(metric)
        if len(values):
            return float(values.iloc[-1])
        if metric in self.metrics:
            return math.nan
        recorded = (self.record.get("metrics") or {}).get(metric)
        return float(recorded) if recorded is not None else math.nan

    def measured(self, metric: str) -> bool:
        """Whether the job enters the means of ``metric``: completed, with a finite final value."""
        return self.status == "completed" and math.isfinite(self.final(metric))

    def unmeasured(self, metric: str) -> str | None:
        """Why a completed job has no final ``metric`` (the note saying it was left out), or None."""
        if self.status != "completed" or self.measured(metric):
            return None
        if metric in self.metrics:
            where = "in every row of csv/metrics.csv"
        else:
            where = "in status.json" if metric in (self.record.get("metrics") or {}) else "never logged, nor recorded"
        why = where if where.startswith("never") else f"NaN {where}"
        return f"{self.name} (seed {self.seed}) completed, but its {metric} is {why}: left out of every mean"

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
        """The per-unit losses of this job's test evaluation ``tag`` (``""``, ``"@512"``), or None."""
        if "units" not in self._cache:
            path = Path(self.source) / UNITS_FILE
            try:
                self._cache["units"] = read_units(path)[0] if path.is_file() else {}
            except ValueError:
                self._cache["units"] = {}
        return self._cache["units"].get(tag)


class DamagedJob(ValueError):
    """A job directory whose files cannot be read; the message names the file."""


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
        # Hydra writes plain YAML; interpolations (${...}) stay strings, which is all we need
        found = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    except (OSError, ValueError, yaml.YAMLError) as err:
        raise DamagedJob(f"{path}: not readable as YAML ({type(err).__name__})") from None
    if not isinstance(found, dict):
        raise DamagedJob(f"{path}: not a mapping")
    return found


def load_job(job_dir: Path) -> Job:
    """Read one job directory (any file may be missing): ``.hydra/`` is only the fallback to what the
    run recorded, and ignored when newer than ``status.json`` (a later command rewrites it)."""
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
        if status not in OUTCOMES:  # named, not reported as a missing record
            record = {**record, "error": unknown_outcome(status_file, status)}
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
