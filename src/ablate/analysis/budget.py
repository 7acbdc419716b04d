"""Compare variants at equal cost: the validation metric at matched steps, FLOPs or training time.

Variants differ in what a step costs (on a CPU, rotary positions ~20%, a GLU feed-forward 6-13%);
equal FLOPs or time asks whether a change is worth its cost. The **matched budget** is the largest
every compared job reached; each job's metric there is interpolated on its curve, never
extrapolated, so the cheapest job is compared at its end of training and the others before their
schedule has decayed, which favours the cheap job beyond its cost (docs/analysis.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ablate.analysis.compute import job_flops_per_token
from ablate.analysis.job import Job
from ablate.analysis.runs import Sweep
from ablate.analysis.stats import mean_std

BASES = ("steps", "flops", "time")
DEFAULT_BASIS = "steps"  # the final value, as before: see docs/analysis.md for why
TOKENS_METRIC, TIME_METRIC = "train/tokens_seen", "train/time_s"
UNITS = {"steps": "steps", "flops": "FLOPs", "time": "s"}
MATCHED_COLUMN = {"steps": "matched_steps", "flops": "matched_flops", "time": "matched_time_s"}


def check_basis(basis: str) -> str:
    if basis not in BASES:
        raise ValueError(f"--basis {basis}: use one of {', '.join(BASES)}")
    return basis


def basis_column(metric: str, basis: str) -> str:
    """``val/ppl final`` for ``steps``, ``val/ppl @flops`` / ``val/ppl @time`` at the matched budget."""
    return f"{metric} final" if check_basis(basis) == "steps" else f"{metric} @{basis}"


def format_budget(value: float, basis: str) -> str:
    """``600 steps``, ``1.23e+13 FLOPs``, ``45.2 s``; ``—`` when there is none."""
    if value is None or not math.isfinite(value):
        return "—"
    if basis == "steps":
        return f"{value:.0f} steps" if float(value).is_integer() else f"{value:.4g} steps"
    return f"{value:.3g} FLOPs" if basis == "flops" else f"{value:.4g} s"


def cumulative_at(logged: pd.Series, steps: np.ndarray) -> np.ndarray:
    """A cumulative quantity at ``steps``: linear between logged steps, from 0; NaN beyond the last."""
    logged = logged.dropna().astype(float).sort_index()
    steps = np.asarray(steps, dtype=float)
    if not len(logged):
        return np.full(steps.shape, math.nan)
    xp = np.concatenate([[-1.0], logged.index.to_numpy(float)])
    fp = np.concatenate([[0.0], logged.to_numpy()])
    return np.where(steps <= xp[-1], np.interp(steps, xp, fp), math.nan)


def validation_curve(metrics: pd.DataFrame, metric: str, basis: str, flops_per_token: float | None = None) -> pd.Series:
    """The logged values of ``metric`` indexed by the cumulative budget of ``basis`` (steps, FLOPs,
    time); ValueError when the budget cannot be counted."""
    values = metrics[metric].dropna().astype(float) if metric in metrics else pd.Series(dtype=float)
    steps = values.index.to_numpy(float)
    if check_basis(basis) == "steps":
        budget = steps + 1
    else:
        name = TOKENS_METRIC if basis == "flops" else TIME_METRIC
        if basis == "flops" and not (flops_per_token and math.isfinite(flops_per_token)):
            raise ValueError("no FLOPs per token")
        if name not in metrics or not metrics[name].notna().any():
            raise ValueError(f"no {name} logged")
        budget = cumulative_at(metrics[name], steps) * (flops_per_token if basis == "flops" else 1.0)
    curve = pd.Series(values.to_numpy(), index=pd.Index(budget, name=basis), name=metric)
    return curve[np.isfinite(curve.index.to_numpy(float))].sort_index(kind="stable")


def value_at(curve: pd.Series, budget: float) -> float:
    """The curve's value at ``budget``, linear between validations; NaN outside it (no extrapolation)."""
    x, y = curve.index.to_numpy(float), curve.to_numpy(float)
    if not len(x) or not math.isfinite(budget) or budget < x[0] or budget > x[-1]:
        return math.nan
    return float(np.interp(budget, x, y))


def final_budget(curve: pd.Series) -> float:
    """The budget at the curve's last validation (NaN for an empty curve)."""
    return float(curve.index[-1]) if len(curve) else math.nan


def matched_budget(final_budgets: Iterable[float]) -> float:
    """The largest budget every job reached: the minimum of the known final budgets (NaN: none)."""
    known = [b for b in final_budgets if b is not None and math.isfinite(b)]
    return min(known) if known else math.nan


def job_curve(job: Job, metric: str, basis: str) -> pd.Series:
    """:func:`validation_curve` of one job (raises ValueError saying why it has none)."""
    fpt = job_flops_per_token(job) if basis == "flops" else None
    return validation_curve(job.metrics, metric, basis, fpt)


def last_logged(job: Job, name: str) -> float:
    """The last logged value of a cumulative metric (``train/tokens_seen``, ``train/time_s``), NaN if none."""
    values = job.series(name)
    return float(values.iloc[-1]) if len(values) else math.nan


@dataclass
class Matched:
    """One basis: the matched budget, each job's final budget and value there, why one has no curve."""

    basis: str
    budget: float
    final: dict[str, float] = field(default_factory=dict)
    values: dict[str, float] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)

    def value(self, job: Job) -> float:
        return self.values.get(job.source, math.nan)

    def late(self) -> list[str]:
        """Jobs with a curve but no value at the budget: their first validation came after it."""
        return [source for source, value in self.values.items() if math.isnan(value) and source not in self.problems]


def match(jobs: list[Job], metric: str, basis: str) -> Matched:
    """The matched budget of ``basis`` over the completed ``jobs`` and every one's ``metric`` there."""
    curves, problems = {}, {}
    for job in jobs:
        if not job.measured(metric):
            continue
        try:
            curves[job.source] = job_curve(job, metric, basis)
        except ValueError as err:
            problems[job.source] = str(err)
    final = {source: final_budget(curve) for source, curve in curves.items()}
    budget = matched_budget(final.values())
    values = {source: value_at(curve, budget) for source, curve in curves.items()}
    values.update({source: math.nan for source in problems})
    return Matched(basis, budget, final, values, problems)


def measured_once(jobs: Iterable[Job], metric: str) -> bool:
    """Whether ``metric`` is logged at most once per completed job (a ``test/*``): no curve to match on."""
    counts = [int(job.series(metric).notna().sum()) for job in jobs if job.measured(metric)]
    return bool(counts) and max(counts) <= 1


def add_cost_columns(frame: pd.DataFrame, sweep: Sweep, metric: str) -> pd.DataFrame:
    """``frame`` with each variant's cost and ``<metric> @<basis> mean`` / ``std`` at each matched budget
    (the :class:`Matched` in ``frame.attrs["matched"]``), means over the completed seeds."""
    once = measured_once(sweep.jobs, metric)
    matched = {} if once else {basis: match(sweep.jobs, metric, basis) for basis in BASES}
    rows = []
    for jobs in sweep.variants().values():
        done = [job for job in jobs if job.measured(metric)]
        fpt = []
        for job in done:
            try:
                fpt.append(job_flops_per_token(job))
            except ValueError:
                fpt.append(math.nan)
        row = {
            "params": mean_std([float(j.record.get("params") or math.nan) for j in done])[0],
            "flops_per_token": mean_std(fpt)[0],
            "tokens_seen": mean_std([last_logged(j, TOKENS_METRIC) for j in done])[0],
            "train_time_s": mean_std([last_logged(j, TIME_METRIC) for j in done])[0],
        }
        for basis, m in matched.items():
            row[f"{metric} @{basis} mean"], row[f"{metric} @{basis} std"] = mean_std([m.value(j) for j in done])
        rows.append(row)
    costs = pd.DataFrame(rows, index=frame.index)
    for basis, m in matched.items():
        costs[MATCHED_COLUMN[basis]] = m.budget
    out = pd.concat([frame, costs], axis=1)
    out.attrs.update(frame.attrs, matched=matched)
    return out


def describe_basis(metric: str, basis: str, matched: Matched | None = None) -> str:
    """For headings: ``final val/ppl``, ``val/ppl at the matched budget of 1.2e+13 FLOPs, --basis flops``."""
    if basis == "steps":
        return f"final {metric}"
    assert matched is not None, "a budget basis other than steps has a matched budget"
    return f"{metric} at the matched budget of {format_budget(matched.budget, basis)}, --basis {basis}"
