"""A locked analysis plan: what a sweep's verdicts will be, declared before its results exist
(issue 34: ALiBi's δ was set after the verdict seeds' losses were on screen), by ``train.py``
before stage 2 of a ``tune=lr`` sweep or by ``scripts/declare.py``.

The plan of record is an entry of an append-only, hash-chained ledger kept *outside* the sweep
folder (issue 43 item 2; :func:`ledger_for`): each entry's SHA-256 covers the plan, the folder, the
UTC time, the git commit, the W&B run id and the previous entry's hash, so an edited plan or a
back-dated time breaks the chain and a copied folder has no entry. ``<sweep dir>/analysis_plan.json``
is a copy for the reader; the ledger wins. :func:`check_rows`: a row is **declared** only when the
plan is intact, predates the first compared job's recorded start, covers the call's family, is the
row's in every respect and rests on enough seeds and held-out blocks; else **exploratory (why)**.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

PLAN_FILE = "analysis_plan.json"
LEDGER_FILE = "analysis_ledger.jsonl"
GENESIS = "0" * 64  # the "previous hash" of the ledger's first entry


class PlanError(ValueError):
    """A plan that cannot be declared or read; the message says why (exit 2 in the scripts)."""


@dataclass(frozen=True)
class Plan:
    """What the verdicts of a sweep will be: ``margin`` δ in each metric's units (a number, or one
    per metric); ``variants``: the compared rows as ``axis=value`` specs (empty: every other row);
    ``layout``: the ``data.splits`` the jobs must have; ``seeds``: the verdict seeds."""

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
    selection: str = ""  # how the compared settings were chosen (tune=lr: metric and selection seed)
    inference: str = "crossed seed x held-out block where per-window test losses exist, else paired t over seeds"
    note: str = ""
    declared_by: str = "scripts/declare.py"
    layout: str | None = None
    equivalence: tuple[str, ...] = ()  # the rows asked the equivalence question (empty: every row)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.metrics:
            raise PlanError("a plan names at least one metric (--metric)")
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
        """Every (slice, metric, variant) the plan compares; ``rows`` when it lists no variants."""
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
        how = f"fixed: seeds {','.join(map(str, self.seeds))}" if self.seeds else "fixed (no seeds declared)"
        compared = (
            f"the interaction of {' and '.join(self.extra['interaction'])}"
            if self.extra.get("interaction")
            else f"against {self.baseline or '(no baseline)'}"
            + (f" ({'; '.join(self.variants)})" if self.variants else "")
        )
        if self.equivalence:
            margin += f" (equivalence asked of {'; '.join(self.equivalence)} only)"
        return (
            f"{', '.join(self.metrics)} on {self.split}"
            + (f" (data.splits={self.layout})" if self.layout else "")
            + f", {compared}"
            + (f" in {'; '.join(self.where)}" if self.where else "")
            + f"; margin {margin}; {how}; alpha {self.alpha:g}, one family (Holm-Shaffer) over the declared comparisons"
        )


@dataclass(frozen=True)
class Declaration:
    """A plan as declared: its entry's hash and time, the copy's path, why it cannot be trusted."""

    plan: Plan
    sha256: str
    declared_at: str  # ISO 8601, UTC
    path: Path
    problem: str | None = None
    entry: dict[str, Any] = field(default_factory=dict)

    @property
    def intact(self) -> bool:
        return self.problem is None

    @property
    def timestamp(self) -> float:
        return datetime.fromisoformat(self.declared_at).timestamp()


# --------------------------------------------------------------------------- the ledger


def ledger_for(sweep_dir: str | os.PathLike[str], log_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where a new plan for ``sweep_dir`` is recorded: ``<log_dir>/analysis_ledger.jsonl``, else beside
    the sweep folder; never inside it, since what the folder holds a copy of it holds too."""
    from ablate.config.locations import log_dir as default_log_dir

    sweep = Path(sweep_dir).resolve()
    logs = Path(log_dir).resolve() if log_dir is not None else default_log_dir().resolve()
    return logs / LEDGER_FILE if logs in sweep.parents else sweep.parent / LEDGER_FILE


def _entry_digest(entry: Mapping[str, Any]) -> str:
    body = {k: v for k, v in entry.items() if k != "sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), default=str).encode()).hexdigest()


def read_ledger(path: Path) -> tuple[list[dict[str, Any]], int | None, str]:
    """The ledger's entries, the index of the first that breaks the chain (or None), and why."""
    if not path.is_file():
        return [], None, ""
    entries: list[dict[str, Any]] = []
    previous, last_time = GENESIS, ""
    broken, why = None, ""
    for number, line in enumerate(path.read_text().splitlines()):
        try:
            entry = json.loads(line)
            ok = isinstance(entry, dict)
        except ValueError:
            entry, ok = {}, False
        entries.append(entry if ok else {})
        if broken is not None:
            continue
        if not ok:
            broken, why = number, f"line {number + 1} is not a ledger entry"
        elif entry.get("sha256") != _entry_digest(entry):
            broken, why = number, f"entry {number + 1} was edited after it was written (its hash does not match)"
        elif entry.get("previous") != previous:
            broken, why = number, f"entry {number + 1} does not follow the entry before it (the chain is broken)"
        elif str(entry.get("declared_at", "")) < last_time:
            broken, why = number, f"entry {number + 1} is dated before the entry before it (back-dated)"
        else:
            previous, last_time = entry["sha256"], str(entry["declared_at"])
    return entries, broken, why


def _git_commit() -> str | None:
    """The commit the project's checkout is at (read from ``.git``: no subprocess), or None."""
    from ablate.config.locations import project_root

    try:
        git = project_root() / ".git"
        if git.is_file():  # a worktree or submodule: "gitdir: <path>"
            git = Path(git.read_text().split(":", 1)[1].strip())
        head = (git / "HEAD").read_text().strip()
        if not head.startswith("ref:"):
            return head or None
        ref = head.split(":", 1)[1].strip()
        common = git / "commondir"
        roots = [git] + ([(git / common.read_text().strip()).resolve()] if common.is_file() else [])
        for root in roots:
            if (root / ref).is_file():
                return (root / ref).read_text().strip() or None
            packed = root / "packed-refs"
            if packed.is_file():
                for line in packed.read_text().splitlines():
                    if line.endswith(" " + ref):
                        return line.split(" ", 1)[0]
    except (OSError, IndexError):
        return None
    return None


def _wandb_run_id() -> str | None:
    """The W&B run of this process, when one is running (never imports wandb)."""
    wandb = sys.modules.get("wandb")
    run = getattr(wandb, "run", None) if wandb is not None else None
    return str(run.id) if run is not None and getattr(run, "id", None) else os.environ.get("WANDB_RUN_ID")


def _same_dir(entry: Mapping[str, Any], sweep: Path) -> bool:
    return str(entry.get("sweep_dir", "")) == str(sweep)


def declare(
    sweep_dir: str | os.PathLike[str],
    plan: Plan,
    now: datetime | None = None,
    log_dir: str | os.PathLike[str] | None = None,
) -> Declaration:
    """Append ``plan`` to the ledger under a lock and write the copy; a different plan is refused."""
    sweep = Path(sweep_dir).resolve()
    existing = read_plan(sweep, log_dir)
    if existing is not None and existing.entry.get("ledger"):
        ledger = Path(str(existing.entry["ledger"]))
    else:
        ledger = ledger_for(sweep, log_dir)
    ledger.parent.mkdir(parents=True, exist_ok=True)
    with open(ledger.with_name(ledger.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        entries, broken, why = read_ledger(ledger)
        if broken is not None:
            raise PlanError(f"{ledger}: {why}: no plan is added to a broken ledger; restore it, or start a new one")
        mine = [e for e in entries if _same_dir(e, sweep)]
        if mine:
            first = mine[0]
            if first.get("plan_sha256") == plan.digest():
                _write_copy(sweep, first, ledger)
                return _declaration(first, sweep, ledger)
            raise PlanError(
                f"{sweep} already has a declared plan (ledger {ledger}, entry {first.get('entry')}, sha256 "
                f"{str(first.get('sha256'))[:12]}, {first.get('declared_at')}): a declared plan is never changed. "
                "Run the new plan in a new sweep directory, or analyse without it (its rows are then exploratory)"
            )
        stamp = (now or datetime.now(UTC)).astimezone(UTC).isoformat(timespec="seconds")
        entry: dict[str, Any] = {
            "entry": len(entries) + 1,
            "declared_at": stamp,
            "sweep_dir": str(sweep),
            "plan": json.loads(plan.canonical()),
            "plan_sha256": plan.digest(),
            "git_commit": _git_commit(),
            "wandb_run_id": _wandb_run_id(),
            "previous": entries[-1]["sha256"] if entries else GENESIS,
        }
        entry["sha256"] = _entry_digest(entry)
        with open(ledger, "a") as f:
            f.write(json.dumps(entry, sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        fcntl.flock(lock, fcntl.LOCK_UN)
    _write_copy(sweep, entry, ledger)
    return _declaration(entry, sweep, ledger)


def _write_copy(sweep: Path, entry: Mapping[str, Any], ledger: Path) -> None:
    path = sweep / PLAN_FILE
    sweep.mkdir(parents=True, exist_ok=True)
    body = {**entry, "ledger": str(ledger)}
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def _tuple(value: Any) -> tuple:
    return tuple(value) if isinstance(value, (list, tuple)) else () if value is None else (value,)


def _plan_of(raw: Mapping[str, Any]) -> Plan:
    raw = dict(raw)
    for key in ("metrics", "where", "variants", "seeds", "equivalence"):
        raw[key] = _tuple(raw.get(key))
    known = set(Plan.__dataclass_fields__)
    return Plan(**{k: v for k, v in raw.items() if k in known})


SEQUENTIAL_GONE = "a group-sequential plan (seeds=auto): that design is gone, so no row is declared under it"


def _declaration(entry: Mapping[str, Any], sweep: Path, ledger: Path, problem: str | None = None) -> Declaration:
    if problem is None and entry["plan"].get("stopping", "fixed") != "fixed":  # a ledger from before the design went
        problem = SEQUENTIAL_GONE
    plan, sha256, declared_at = _plan_of(entry["plan"]), str(entry["sha256"]), str(entry["declared_at"])
    return Declaration(plan, sha256, declared_at, sweep / PLAN_FILE, problem, {**entry, "ledger": str(ledger)})


def read_plan(sweep_dir: str | os.PathLike[str], log_dir: str | os.PathLike[str] | None = None) -> Declaration | None:
    """The plan of record of ``sweep_dir`` (its first ledger entry, else the folder's copy), with
    ``problem`` set when it cannot be trusted; None when neither exists."""
    sweep = Path(sweep_dir).resolve()
    copy_path = sweep / PLAN_FILE
    copy = None
    if copy_path.is_file():
        try:
            copy = json.loads(copy_path.read_text())
            if not isinstance(copy, dict):
                raise ValueError("not a JSON object")
        except (OSError, ValueError) as err:
            raise PlanError(f"{copy_path}: not a readable analysis plan ({type(err).__name__}: {err})") from None
    named = Path(str(copy["ledger"])).resolve() if copy is not None and copy.get("ledger") else None
    ledger = named if named is not None and sweep not in named.parents else ledger_for(sweep, log_dir)
    entries, broken, why = read_ledger(ledger)
    for number, entry in enumerate(entries):
        if not _same_dir(entry, sweep):
            continue
        try:
            declaration = _declaration(entry, sweep, ledger)
        except (KeyError, TypeError, ValueError) as err:
            raise PlanError(
                f"{ledger}: entry {number + 1} is not a readable plan ({type(err).__name__}: {err})"
            ) from None
        if broken is not None and broken <= number:
            return replace(declaration, problem=f"the ledger {ledger.name} is broken: {why}")
        if copy is not None and (copy.get("sha256") != entry["sha256"] or copy.get("plan") != entry["plan"]):
            edited = f"{PLAN_FILE} in the sweep folder differs from its ledger entry (edited); the ledger's is used"
            return replace(declaration, problem=edited)
        return declaration
    if copy is None:
        return None
    try:
        plan = _plan_of(copy["plan"])
        stamp = str(copy.get("declared_at", ""))
        datetime.fromisoformat(stamp)
    except (KeyError, TypeError, ValueError) as err:
        raise PlanError(f"{copy_path}: not a readable analysis plan ({type(err).__name__}: {err})") from None
    where = f"the ledger {ledger}" if ledger.is_file() else f"a ledger ({ledger} does not exist)"
    problem = (
        f"{PLAN_FILE} has no entry for this folder in {where}: copied from another folder, written by hand, "
        "or declared before the ledger existed"
    )
    return Declaration(plan, str(copy.get("sha256")), stamp, copy_path, problem, dict(copy))


# --------------------------------------------------------------------------- checking a call against it


@dataclass(frozen=True)
class Row:
    """One compared row of a call: its seeds, the baseline's, and the pairs and blocks its test rests on."""

    seeds: tuple[int, ...] = ()
    baseline_seeds: tuple[int, ...] = ()
    pairs: int = 0
    blocks: int = 0
    test: str = ""
    declared_as: str | None = None  # the plan's variant spec this row is (None: none matches)


@dataclass(frozen=True)
class Call:
    """What one ``summarize.py`` call compares, what each row rests on, and what its jobs recorded."""

    baseline: str | None
    basis: str
    margins: Mapping[str, float | None]
    tables: Sequence[tuple[str | None, str, Sequence[str]]]  # (slice, metric, compared rows)
    family_is_call: bool = True  # --family call (one family over the call's tables)
    rows: Mapping[tuple[str | None, str, str], Row] = field(default_factory=dict)
    layouts: frozenset[str] = frozenset()
    first_start: tuple[float, str] | None = None  # (Unix time, job) of the earliest recorded start
    unstarted: tuple[str, ...] = ()  # compared jobs that record no start time
    job_plans: tuple[tuple[str, str | None], ...] = ()  # (job, the plan hash its status.json records)
    missing_variants: tuple[str, ...] = ()
    equivalence: tuple[str, ...] = ()  # --equivalence: the rows asked the equivalence question (empty: all)


def _same_baseline(a: str | None, b: str | None) -> bool:
    from ablate.analysis.specs import parse_baseline  # pandas (through runs): this module is read without it

    if a is None or b is None:
        return a is b
    try:
        return parse_baseline(a) == parse_baseline(b)
    except ValueError:
        return False


def _global_problem(declaration: Declaration, call: Call) -> str | None:
    """Why no row of ``call`` is declared, or None."""
    plan = declaration.plan
    if not declaration.intact:
        return str(declaration.problem)
    before = [job for job, sha in call.job_plans if sha is None]
    other = [(job, sha) for job, sha in call.job_plans if sha is not None and sha != declaration.sha256]
    if before:
        return (
            f"{len(before)} compared job(s) started with no plan in the sweep folder (e.g. {before[0]}: their "
            "status.json records no plan_sha256), so the plan was declared after they started"
        )
    if other:
        return f"compared job {other[0][0]} started under another plan (sha256 {str(other[0][1])[:12]})"
    if call.unstarted:
        return (
            f"{len(call.unstarted)} compared job(s) record no start time (status.json started_at: runs from before "
            f"it was recorded, e.g. {call.unstarted[0]}), so the plan cannot be shown to predate them"
        )
    if call.first_start is not None and declaration.timestamp > call.first_start[0]:
        when = datetime.fromtimestamp(call.first_start[0], UTC).isoformat(timespec="seconds")
        return f"the plan ({declaration.declared_at}) was declared after the first compared job started ({call.first_start[1]}, {when})"
    if not _same_baseline(plan.baseline, call.baseline):
        return f"the baseline is not the plan's ({plan.baseline})"
    if call.basis != plan.basis:
        return f"--basis {call.basis} is not the plan's ({plan.basis})"
    if plan.layout is not None and call.layouts and call.layouts != {plan.layout}:
        return f"the jobs' data.splits ({', '.join(sorted(call.layouts))}) is not the plan's ({plan.layout})"
    if sorted(call.equivalence) != sorted(plan.equivalence):
        return (
            f"the rows asked the equivalence question ({'; '.join(call.equivalence) or 'all'}) are not the plan's "
            f"({'; '.join(plan.equivalence) or 'all'})"
        )
    if call.missing_variants:
        return f"the declared comparison(s) {'; '.join(call.missing_variants)} have no jobs (the family changed)"
    compared = {(w, m) for w, m, _ in call.tables}
    family = plan.family([r for _, _, rs in call.tables for r in rs])
    missing = [(w, m) for w, m, _ in family if (w, m) not in compared]
    if missing or (not call.family_is_call and len(family) > 1):
        return (
            "the call does not cover the plan's whole family (run it with every declared --metric and --where, "
            "--family call)"
        )
    return None


def _seed_problem(plan: Plan, row: Row) -> str | None:
    """Why the row's seeds are not the plan's, or None."""
    if not plan.seeds:
        return "the plan declares no seeds (declare.py --seeds), so seeds added later cannot be told"
    declared = set(plan.seeds)
    for side, seeds in (("", row.seeds), ("the baseline's ", row.baseline_seeds)):
        extra = sorted(set(seeds) - declared)
        if extra:
            return f"{side}seeds {','.join(map(str, extra))} are not declared ({','.join(map(str, plan.seeds))})"
        lost = sorted(declared - set(seeds))
        if lost:
            return f"declared seed(s) {','.join(map(str, lost))} have no job{' in the baseline' if side else ''}"
    return None


def _limits(row: Row) -> str | None:
    """Why the row's evidence is too thin for a declared verdict (issue 43 item 3), or None."""
    from ablate.analysis.engine import MIN_BLOCKS, MIN_SEEDS

    if row.test == "worst-rank":
        n = min(len(row.seeds), len(row.baseline_seeds))
        return None if n >= MIN_SEEDS else f"{n} seeds: a declared verdict needs >= {MIN_SEEDS}"
    if row.pairs < MIN_SEEDS:
        return f"{row.pairs} seed pair(s): a declared verdict needs >= {MIN_SEEDS}"
    if row.blocks < MIN_BLOCKS:
        what = (
            "no per-window test losses (a val/* or BLEU metric, or runs that did not save them): the text is fixed"
            if row.blocks == 0
            else f"{row.blocks} held-out text block(s)"
        )
        return f"{what}; a declared verdict needs >= {MIN_BLOCKS} held-out blocks (test/loss or test/bpb)"
    return None


def anchor_note(entry: Mapping[str, Any]) -> str:
    """What vouches for the plan's time beyond the ledger: its git commit and W&B run, or nothing."""
    commit, run_id = str(entry.get("git_commit") or "")[:12], entry.get("wandb_run_id")
    anchors = [f"git commit {commit}"] * bool(commit) + [f"W&B run {run_id}"] * bool(run_id)
    if anchors:
        return f"Anchored outside the folder: {' and '.join(anchors)} (check them against the plan's time)."
    return (
        "Not anchored outside the folder: no git commit (not declared from a checkout) and no W&B run; only the "
        "ledger vouches for the plan's time."
    )


def earlier_plans(declaration: Declaration) -> list[str]:
    """Earlier ledger entries for the same metrics and baseline elsewhere: a forking path to show."""
    ledger = declaration.entry.get("ledger")
    if not ledger:
        return []
    plan, entries = declaration.plan, read_ledger(Path(str(ledger)))[0]
    mine = next((i for i, e in enumerate(entries) if e.get("sha256") == declaration.sha256), len(entries))
    before = [
        e
        for e in entries[:mine]  # the ledger's order: appended under a lock, chained
        if isinstance(e.get("plan"), dict)
        and tuple(_tuple(e["plan"].get("metrics"))) == plan.metrics
        and _same_baseline(e["plan"].get("baseline"), plan.baseline)
    ]
    if not before:
        return []
    listed = "; ".join(
        f"entry {e.get('entry', '?')} ({e.get('declared_at')}, {Path(str(e.get('sweep_dir', '?'))).name}, "
        f"margin {e['plan'].get('margin')}, seeds {','.join(map(str, _tuple(e['plan'].get('seeds')))) or 'none'})"
        for e in before
    )
    return [f"Earlier plans for this comparison in the ledger ({len(before)}): {listed}."]


def standing(sweep_dir: str, undeclared: str, exploratory: str, problem: Callable[[Declaration], str | None]) -> str:
    """Whether an analysis is the one the plan of ``sweep_dir`` declared (``problem``: why not), as a line."""
    try:
        declaration = read_plan(sweep_dir)
    except PlanError as err:
        return f"Analysis plan: exploratory ({err})."
    if declaration is None:
        return undeclared
    why = problem(declaration) if declaration.intact else str(declaration.problem)
    stamp = f"{declaration.path.name}, sha256 {declaration.sha256[:12]}, {declaration.declared_at}"
    return f"Analysis plan ({stamp}): " + ("declared." if why is None else f"{exploratory} ({why}).")


def check_rows(declaration: Declaration | None, call: Call) -> tuple[dict, list[str]]:
    """Each row of ``call`` ``declared`` or ``exploratory (<why>)`` under the plan, and the notes."""
    rows = [(w, m, r) for w, m, compared in call.tables for r in compared]
    if declaration is None:
        return {key: "exploratory (no declared plan)" for key in rows}, [
            "No analysis plan is declared for this sweep (scripts/declare.py, or tune=lr before stage 2): every "
            "verdict here is exploratory."
        ]
    plan = declaration.plan
    notes = [
        f"Declared plan (ledger entry {declaration.entry.get('entry', '?')}, sha256 {declaration.sha256[:12]}, "
        f"{declaration.declared_at}): {plan.describe()}.",
        anchor_note(declaration.entry),
        *earlier_plans(declaration),
    ]
    if plan.margin_basis:
        notes.append(f"Margin: {plan.margin_basis}")
    problem = _global_problem(declaration, call)
    out = {}
    for w, m, r in rows:
        row = call.rows.get((w, m, r), Row())
        why: str | None = problem
        if why is None and m not in plan.metrics:
            why = f"{m} is not a declared metric"
        elif why is None and m.split("/", 1)[0] != plan.split:
            why = f"{m} is not on the declared split ({plan.split})"
        elif why is None and (w or None) not in (plan.where or (None,)):
            why = f"the slice {w} is not declared"
        elif why is None and plan.variants and row.declared_as is None:
            why = f"{r} is not a declared comparison"
        elif why is None and call.margins.get(m) != plan.margin_for(m):
            why = f"margin {call.margins.get(m)} is not the declared {plan.margin_for(m)}"
        if why is None:
            why = _seed_problem(plan, row) or _limits(row)
        out[(w, m, r)] = "declared" if why is None else f"exploratory ({why})"
    if problem is not None:
        notes.append(f"Every row is exploratory: {problem}.")
    return out, notes


def first_start(records: Sequence[tuple[str, Mapping[str, Any]]]) -> tuple[tuple[float, str] | None, tuple[str, ...]]:
    """The earliest ``started_at`` of the compared jobs, with its job, and the jobs that record none."""
    times, missing = [], []
    for name, record in records:
        stamp = record.get("started_at")
        try:
            times.append((datetime.fromisoformat(str(stamp)).timestamp(), name))
        except ValueError:
            missing.append(name)
    return (min(times) if times else None), tuple(missing)
