"""A locked analysis plan: what a sweep's verdicts will be, declared before its results exist.

A verdict is only as good as the rule that produced it: a metric, margin or family chosen after
seeing the numbers can make anything look decided (issue 34: ALiBi's δ was set after the verdict
seeds' validation losses were on screen). So a sweep directory can hold a *declaration*,
``<sweep dir>/analysis_plan.json``, written before its verdict runs start:

* by ``train.py`` itself before stage 2 of a ``tune=lr`` sweep (:mod:`ablate.sweepers.tuned_lr`:
  the verdict metric, the seeds or looks and the stopping rule from ``hydra.sweeper.*``, the
  baseline and δ from ``hydra.sweeper.baseline`` / ``hydra.sweeper.margin`` when given);
* by ``python scripts/declare.py <sweep dir> --metric ... --baseline ... --margin ...`` for any
  other sweep (a plain ``-m`` sweep: declare, then run it with ``hydra.sweep.dir=<sweep dir>``).

The file holds the plan (:class:`Plan`: metrics, split, baseline, margin δ and why it is that
number, the compared rows, slices, basis, the Holm family they form, the verdict seeds or the
looks, the stopping rule), its SHA-256 (of the plan's canonical JSON) and the UTC time it was
written. It is never overwritten: a different plan for the same directory is refused, so a plan
cannot be edited to fit the data; a file whose hash no longer matches its plan was edited, and
every row is then exploratory.

:func:`check_rows` is what ``summarize.py`` and ``compute_multiplier.py`` do with it: a row is
**declared** when its metric, baseline, slice, basis and margin are the plan's, the call covers
the plan's whole Holm family (so the correction is the declared one) and the plan was written
before the first result of the compared jobs existed (their earliest ``status.json``); anything
else is **exploratory**, and the table says so next to its verdict.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PLAN_FILE = "analysis_plan.json"
STOPPING = ("fixed", "group-sequential")


class PlanError(ValueError):
    """A plan that cannot be declared or read; the message says why (exit 2 in the scripts)."""


@dataclass(frozen=True)
class Plan:
    """What the verdicts of a sweep will be (see the module docstring). ``margin`` is δ in the
    units of each metric (a number, or one per metric); ``variants``: the rows compared with the
    baseline (empty: every other row); the Holm family is every (slice, metric, variant)."""

    metrics: tuple[str, ...]
    baseline: str | None = None
    margin: float | dict[str, float] | None = None
    margin_basis: str = ""  # why δ is that number, and when it was chosen
    split: str = "test"
    where: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    basis: str = "steps"
    alpha: float = 0.05
    seeds: tuple[int, ...] = ()
    looks: tuple[int, ...] = ()
    stopping: str = "fixed"  # fixed: every declared seed; group-sequential: looks + spending
    spending: str | None = None
    selection: str = ""  # how the compared settings were chosen (tune=lr: metric and selection seed)
    inference: str = "crossed seed x text where per-unit test losses exist, else paired t over seeds"
    note: str = ""
    declared_by: str = "scripts/declare.py"
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.metrics:
            raise PlanError("a plan names at least one metric (--metric)")
        if self.stopping not in STOPPING:
            raise PlanError(f"stopping={self.stopping!r}: one of {', '.join(STOPPING)}")
        if self.stopping == "group-sequential" and not self.looks:
            raise PlanError("a group-sequential plan names its looks")
        for metric in self.metrics:
            value = self.margin_for(metric)
            if value is not None and not (math.isfinite(value) and value > 0):
                raise PlanError(f"margin for {metric}: {value!r}; the smallest difference of interest must be > 0")
        if self.margin is not None and not self.margin_basis.strip():
            raise PlanError(
                "a margin needs its reason (--margin-basis): where δ comes from (the paper's effect, a stated "
                "smallest effect of interest) and whether it was chosen before or after seeing these data"
            )

    def margin_for(self, metric: str) -> float | None:
        if isinstance(self.margin, Mapping):
            value = self.margin.get(metric)
            return None if value is None else float(value)
        return None if self.margin is None else float(self.margin)

    def family(self, rows: Sequence[str] = ()) -> list[tuple[str | None, str, str]]:
        """The Holm family: every (slice, metric, variant) the plan compares with its baseline;
        ``rows`` (the sweep's row labels other than the baseline) when the plan lists none."""
        variants = self.variants or tuple(rows)
        return [(w, m, v) for w in (self.where or (None,)) for m in self.metrics for v in variants]

    def canonical(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"), default=str)

    def digest(self) -> str:
        return hashlib.sha256(self.canonical().encode()).hexdigest()

    def describe(self) -> str:
        """One paragraph for a table's notes."""
        margin = (
            ", ".join(f"{m} ±{self.margin_for(m):g}" for m in self.metrics if self.margin_for(m) is not None) or "none"
        )
        how = (
            f"group-sequential, looks at {','.join(map(str, self.looks))} seeds ({self.spending} spending)"
            if self.stopping == "group-sequential"
            else f"fixed: seeds {','.join(map(str, self.seeds))}"
            if self.seeds
            else "fixed"
        )
        compared = (
            f"the interaction of {' and '.join(self.extra['interaction'])}"
            if self.extra.get("interaction")
            else f"against {self.baseline or '(no baseline)'}"
        )
        return (
            f"{', '.join(self.metrics)} on {self.split}, {compared}"
            + (f" in {'; '.join(self.where)}" if self.where else "")
            + f"; margin {margin}; {how}; alpha {self.alpha:g}, Holm over the declared family"
        )


@dataclass(frozen=True)
class Declaration:
    """A plan as declared: the plan, its hash, when and whether the file still matches it."""

    plan: Plan
    sha256: str
    declared_at: str  # ISO 8601, UTC
    path: Path
    intact: bool  # the hash matches the plan (False: the file was edited after it was written)

    @property
    def timestamp(self) -> float:
        return datetime.fromisoformat(self.declared_at).timestamp()


def declare(sweep_dir: str | os.PathLike[str], plan: Plan, now: datetime | None = None) -> Declaration:
    """Write ``plan`` to ``<sweep_dir>/analysis_plan.json`` (hash, UTC time); the same plan
    declared again keeps the first file (and its time); a different one is refused."""
    path = Path(sweep_dir) / PLAN_FILE
    if path.is_file():
        existing = read_plan(sweep_dir)
        if existing is not None and existing.intact and existing.sha256 == plan.digest():
            return existing
        raise PlanError(
            f"{path} already declares another plan (sha256 {existing.sha256[:12] if existing else '?'}, "
            f"{existing.declared_at if existing else 'unreadable'}): a declared plan is never changed. "
            "Run the new plan in a new sweep directory, or analyse without it (its rows are then exploratory)"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp = (now or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds")
    body = {"plan": json.loads(plan.canonical()), "sha256": plan.digest(), "declared_at": stamp}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(path)
    return Declaration(plan, plan.digest(), stamp, path, True)


def _tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else () if value is None else (value,)


def read_plan(sweep_dir: str | os.PathLike[str]) -> Declaration | None:
    """The declaration of ``sweep_dir``, or None when it has none; an unreadable file raises
    :class:`PlanError` naming it."""
    path = Path(sweep_dir) / PLAN_FILE
    if not path.is_file():
        return None
    try:
        body = json.loads(path.read_text())
        raw = dict(body["plan"])
        for key in ("metrics", "where", "variants", "seeds", "looks"):
            raw[key] = _tuple(raw.get(key))
        plan = Plan(**raw)
        datetime.fromisoformat(body["declared_at"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise PlanError(f"{path}: not a readable analysis plan ({type(err).__name__}: {err})") from None
    return Declaration(
        plan, str(body.get("sha256")), str(body["declared_at"]), path, plan.digest() == body.get("sha256")
    )


@dataclass(frozen=True)
class Call:
    """What one ``summarize.py`` call compares: per table its slice and metric, the baseline,
    basis, margin per metric, and the row labels compared (other than the baseline)."""

    baseline: str | None
    basis: str
    margins: Mapping[str, float | None]
    tables: Sequence[tuple[str | None, str, Sequence[str]]]  # (slice, metric, compared rows)
    family_is_call: bool = True  # --family call (one Holm family over the call's tables)


def _same_baseline(a: str | None, b: str | None) -> bool:
    from ablate.analysis.specs import parse_baseline  # pandas (through runs): this module is read without it

    if a is None or b is None:
        return a is b
    try:
        return parse_baseline(a) == parse_baseline(b)
    except ValueError:
        return False


def check_rows(declaration: Declaration | None, call: Call, first_result: float | None) -> tuple[dict, list[str]]:
    """Which rows of ``call`` the declared plan covers: ``{(slice, metric, row): "declared" |
    "exploratory (<why>)"}``, and the notes to print under the tables. ``first_result``: the Unix
    time of the compared jobs' first result (None: unknown)."""
    rows = [(w, m, r) for w, m, compared in call.tables for r in compared]
    if declaration is None:
        return {key: "exploratory (no declared plan)" for key in rows}, [
            "No analysis plan is declared for this sweep (scripts/declare.py, or tune=lr before stage 2): every "
            "verdict here is exploratory."
        ]
    plan = declaration.plan
    notes = [f"Declared plan ({declaration.path.name}, sha256 {declaration.sha256[:12]}, {declaration.declared_at}): "]
    notes[0] += plan.describe() + "."
    if plan.margin_basis:
        notes.append(f"Margin: {plan.margin_basis}")
    problem: str | None = None
    if not declaration.intact:
        problem = "the plan file was edited after it was declared (its hash does not match)"
    elif first_result is not None and declaration.timestamp > first_result:
        problem = "the plan was declared after the first result of the compared jobs existed"
    elif not _same_baseline(plan.baseline, call.baseline):
        problem = f"the baseline is not the plan's ({plan.baseline})"
    elif call.basis != plan.basis:
        problem = f"--basis {call.basis} is not the plan's ({plan.basis})"
    compared = {(w, m) for w, m, _ in call.tables}
    family = plan.family([r for _, _, rs in call.tables for r in rs])
    missing = [(w, m) for w, m, _ in family if (w, m) not in compared]
    if problem is None and (missing or (not call.family_is_call and len(family) > 1)):
        problem = (
            "the call does not cover the plan's whole Holm family (run it with every declared --metric and --where, "
            "--family call)"
        )
    out = {}
    for w, m, r in rows:
        why: str | None = problem
        if why is None and m not in plan.metrics:
            why = f"{m} is not a declared metric"
        elif why is None and (w or None) not in (plan.where or (None,)):
            why = f"the slice {w} is not declared"
        elif why is None and plan.variants and r not in plan.variants:
            why = f"{r} is not a declared comparison"
        elif why is None and call.margins.get(m) != plan.margin_for(m):
            why = f"margin {call.margins.get(m)} is not the declared {plan.margin_for(m)}"
        out[(w, m, r)] = "declared" if why is None else f"exploratory ({why})"
    if problem is not None:
        notes.append(f"Every row is exploratory: {problem}.")
    return out, notes


def first_result_time(paths: Iterable[str | os.PathLike[str]]) -> float | None:
    """The earliest ``status.json`` modification time of the job directories ``paths`` (when the
    first of them finished), or None when none has one."""
    times = [(Path(p) / "status.json").stat().st_mtime for p in paths if (Path(p) / "status.json").is_file()]
    return min(times) if times else None
