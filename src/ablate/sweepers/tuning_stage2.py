"""Stage 2 of a ``tune=lr`` sweep (:mod:`ablate.sweepers.tuned_lr`): each variant at its chosen
learning rate with fresh seeds, judged by a rule fixed before its data.

* :func:`declare_plan` writes ``<sweep dir>/analysis_plan.json`` (:mod:`ablate.analysis.plan`)
  after stage 1 and before stage 2: the held-out metric, the baseline and margin, the seeds or
  looks and the stopping rule.
* :func:`fixed_stage2`: every variant with a usable rate, every verdict seed.
* :func:`sequential_stage2` (``hydra.sweeper.seeds=auto``) adds seeds in batches up to each look
  and stops a comparison once the group-sequential verdict (:mod:`ablate.analysis.sequential`:
  alpha spent over the looks, Bonferroni over the variants) is ``better``, ``worse`` or
  ``equivalent``. The verdict reads the held-out metric (:func:`held_out_metric`), never the one
  the learning rate was selected on.

Imported at Hydra's plugin scan: the analysis code only inside the functions.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException

from ablate.sweepers.lr_selection import job_dir_of, read_outcome
from ablate.sweepers.tuning_report import Variant, number, seed_record, table

log = logging.getLogger(__name__)


def auto_settings(
    seeds: Any, baseline: str | None, margin: float | None, looks: Sequence[int], spending: str
) -> tuple[str, float, list[int], str] | None:
    """``hydra.sweeper.seeds=auto``'s settings, checked: (baseline, margin, looks, spending), or
    None when the seeds are a list."""
    if not (isinstance(seeds, str) and seeds.strip().lower() == "auto"):
        return None
    from ablate.analysis.sequential import look_levels

    if not baseline or margin is None or not float(margin) > 0:
        raise ValueError(
            "hydra.sweeper.seeds=auto adds seeds until each variant is decided against a "
            "baseline: give hydra.sweeper.baseline=AXIS=VALUE and hydra.sweeper.margin=DELTA "
            "(the smallest difference of interest, > 0)"
        )
    try:
        look_levels(list(looks), kind=spending)
    except ValueError as err:
        raise ValueError(f"hydra.sweeper.looks / spending: {err}") from None
    return str(baseline), float(margin), [int(n) for n in looks], spending


def held_out_metric(metric: str, given: str | None = None) -> str:
    """The metric the verdicts read: ``hydra.sweeper.verdict_metric`` when given, else the
    selection metric on the test split (``val/loss`` -> ``test/loss``): the rate is chosen on
    validation, the verdict read on text the choice never saw."""
    if given:
        return str(given)
    return "test/" + metric.split("/", 1)[1] if metric.startswith("val/") else metric


def read_plan_quietly(sweep_dir: Path, log_dir: str | None = None) -> Any:
    """The sweep directory's declared plan (:func:`ablate.analysis.plan.read_plan`), or None when it
    has none or it cannot be read."""
    from ablate.analysis.plan import PlanError, read_plan

    try:
        return read_plan(sweep_dir, log_dir)
    except PlanError:
        return None


def declare_plan(
    sweep_dir: Path,
    *,
    selection: str,
    verdict_metric: str,
    seeds: list[str],
    baseline: str | None,
    margin: float | None,
    margin_basis: str | None,
    looks: list[int] | None,
    spending: str,
    variants: tuple[str, ...] = (),
    layout: str | None = None,
    log_dir: str | None = None,
) -> None:
    """Declare the verdict's rule in the ledger (:mod:`ablate.analysis.plan`; a copy in
    ``<sweep dir>/analysis_plan.json``) before stage 2 starts: the held-out metric, the baseline
    and margin, the compared ``variants`` (those with a chosen rate), the split ``layout``
    (``data.splits``), the seeds or looks and the stopping rule. ``looks`` None: a fixed set of
    ``seeds``; a list: ``seeds=auto``'s looks. A plan the user declared before
    (``scripts/declare.py``) is kept, and a different one is not written over it: a message says so."""
    from ablate.analysis.plan import Plan, PlanError, declare

    basis = margin_basis or (
        f"hydra.sweeper.margin={margin:g}, given with the command before stage 2 (its reason was not "
        "recorded: hydra.sweeper.margin_basis='...')"
        if margin is not None
        else ""
    )
    auto = looks is not None
    try:
        plan = Plan(
            metrics=(verdict_metric,),
            baseline=baseline,
            margin=margin,
            margin_basis=basis,
            split=verdict_metric.split("/", 1)[0],
            seeds=() if auto else tuple(number(s) for s in seeds),
            looks=tuple(looks) if looks is not None else (),
            stopping="group-sequential" if auto else "fixed",
            spending=spending if auto else None,
            selection=selection,
            declared_by="train.py (tune=lr), before stage 2",
            note="" if baseline else "no hydra.sweeper.baseline: no comparison was declared",
            variants=variants if baseline else (),
            layout=layout,
        )
        declared = declare(sweep_dir, plan, log_dir=log_dir)
    except PlanError as err:
        _keep_declared_plan(sweep_dir, log_dir, err)
        return
    print(
        f"LR tuning: analysis plan declared (ledger entry {declared.entry.get('entry')}, sha256 {declared.sha256[:12]}; "
        f"copy in {declared.path}): {plan.describe()}",
        flush=True,
    )


def _keep_declared_plan(sweep_dir: Path, log_dir: str | None, err: Exception) -> None:
    """Say which plan stands when the sweep's was refused: one declared before (scripts/declare.py), or none."""
    existing = read_plan_quietly(sweep_dir, log_dir)
    if existing is None:
        log.warning("tuned_lr: %s", err)
        return
    # declared before the sweep (scripts/declare.py): that is the plan of record
    print(
        f"LR tuning: keeping the analysis plan declared before this sweep, {existing.path} (sha256 "
        f"{existing.sha256[:12]}, {existing.declared_at}): {existing.plan.describe()}",
        flush=True,
    )


def _baseline_variant(variants: list[Variant], baseline: str) -> Variant:
    from ablate.analysis.job import parse_overrides
    from ablate.analysis.specs import parse_baseline

    wanted = parse_baseline(baseline)
    matches = [v for v in variants if all(parse_overrides(v.overrides).get(k) == x for k, x in wanted.items())]
    if len(matches) != 1:
        raise HydraException(
            f"tuned_lr: hydra.sweeper.baseline={baseline} matches {len(matches)} variants "
            f"of {', '.join(v.label for v in variants)}: name exactly one"
        )
    return matches[0]


def _record_outcomes(
    plan: list[tuple[Variant, str]], returns: list[JobReturn], metric: str, with_outcomes: bool = False
) -> None:
    """Append each launched job's final ``metric`` to its variant's seeds (and, if asked, its engine outcome)."""
    for (v, s), ret in zip(plan, returns, strict=True):
        job_dir = job_dir_of(ret)
        status, value = read_outcome(job_dir, metric, failed=ret.status == JobStatus.FAILED)
        v.seeds.append(seed_record(s, status, value, job_dir.name if job_dir else None))
        if with_outcomes:
            v.outcomes.append(_outcome(v.seeds[-1], job_dir, metric))


def _jobs(plan: list[tuple[Variant, str]], lr_name: str, seed_name: str) -> list[list[str]]:
    return [[*v.overrides, f"{lr_name}={v.chosen_text}", f"{seed_name}={s}"] for v, s in plan]


def fixed_stage2(
    variants: list[Variant],
    launch: Callable[[list[list[str]]], list[JobReturn]],
    *,
    metric: str,
    lr_name: str,
    seed_name: str,
    seeds: list[str],
) -> list[JobReturn]:
    """Every variant with a usable learning rate at that rate, with every verdict seed, fresh
    (``selection=nested``: each variant's selection of one verdict seed, with that seed only)."""
    plan = [(v, s) for v in variants if v.selection.chosen is not None for s in ([v.seed] if v.seed else seeds)]
    if plan:
        print(
            f"LR tuning, stage 2: {len({v.label for v, _ in plan})} variant(s) at their chosen learning rate"
            + (" (each verdict seed's own)" if any(v.seed for v, _ in plan) else "")
            + f", {seed_name}={','.join(seeds)}",
            flush=True,
        )
    returns = launch(_jobs(plan, lr_name, seed_name))
    for v in variants:
        v.seeds = []
    _record_outcomes(plan[: len(returns)], returns, metric)
    return returns


def _outcome(record: dict[str, Any], job_dir: Path | None, metric: str) -> Any:
    """The engine's outcome of one stage-2 job (:class:`ablate.analysis.engine.Outcome`): read from
    its directory as ``summarize.py`` reads it (per-window test losses included), so the sweeper
    and the table decide on the same numbers."""
    from ablate.analysis.engine import Outcome, outcomes
    from ablate.analysis.job import DamagedJob, load_job

    if job_dir is not None and job_dir.is_dir():
        try:
            return outcomes([load_job(job_dir)], metric)[0]
        except DamagedJob:
            pass
    value = record["value"] if record["value"] is not None else float("nan")
    return Outcome(number(str(record["seed"])), record["status"], value)


def sequential_stage2(
    variants: list[Variant],
    launch: Callable[[list[list[str]]], list[JobReturn]],
    interrupted: Callable[[], bool],
    *,
    metric: str,
    lr_name: str,
    seed_name: str,
    seeds: list[str],
    baseline: str,
    margin: float,
    looks: list[int],
    spending: str,
) -> list[JobReturn]:
    """``seeds=auto``: the baseline and every undecided variant at their chosen rates, seeds
    added up to each look; after each look every undecided variant gets the sequential verdict of
    the one inference engine (:func:`ablate.analysis.engine.sequential`) on ``metric`` (the
    held-out verdict metric, not the one the rate was selected on): the row's own test on the
    seeds that ran by that look (crossed seed x block where the runs saved per-window test losses;
    the worst-rank test when a seed diverged: a diverged seed is an outcome, never dropped).
    Decided variants get no more seeds; a variant still undecided after the last look is
    ``inconclusive`` (``equivalence not shown``)."""
    from ablate.analysis import engine
    from ablate.analysis.job import higher_is_better
    from ablate.analysis.sequential import ALPHA

    higher = higher_is_better(metric)
    base = _baseline_variant(variants, baseline)
    for v in variants:
        v.seeds, v.outcomes = [], []
    if base.selection.chosen is None:
        log.warning("tuned_lr: the baseline %s has no usable learning rate: no stage 2", base.label)
        return []
    others = [v for v in variants if v is not base and v.selection.chosen is not None]
    alpha = ALPHA / max(len(others), 1)
    order = [int(number(s)) for s in seeds]
    undecided, returns, done = list(others), [], 0
    for n in looks:
        batch = seeds[done:n]
        plan = [(v, s) for v in [base, *undecided] for s in batch]
        _announce_look(seed_name, batch, base, len(undecided))
        rets = launch(_jobs(plan, lr_name, seed_name))
        returns += rets
        if interrupted():  # this look's seeds are incomplete: no verdict rests on them
            break
        _record_outcomes(plan, rets, metric, with_outcomes=True)
        done = n
        for v in list(undecided):
            v.decision = engine.sequential(
                v.outcomes, base.outcomes, metric, higher, margin, looks, alpha, spending, order, adjust=False
            )
            v.verdict_text = _verdict_text(v.decision, margin)
            if v.decision.decided:
                undecided.remove(v)
        if not undecided:
            break
    _print_verdicts(others, base, metric, margin, looks, spending, alpha)
    return returns


def _announce_look(seed_name: str, batch: list[str], base: Variant, undecided: int) -> None:
    """The seeds one look of ``seeds=auto`` adds, and to how many variants."""
    print(
        f"LR tuning, stage 2 (seeds=auto): {seed_name}={','.join(batch)} for {base.label} (baseline) and "
        f"{undecided} undecided variant(s)",
        flush=True,
    )


def _verdict_text(decision: Any, margin: float) -> str:
    """A variant's sequential decision (:class:`ablate.analysis.engine.Decision`) in the tool's words."""
    from ablate.analysis import engine

    evidence = decision.evidence
    if evidence is None:
        return f"not decided ({decision.waiting})"
    return engine.words(decision.code, margin, evidence.diverged, evidence.ran, both=decision.both)


def _print_verdicts(
    others: list[Variant], base: Variant, metric: str, margin: float, looks: list[int], spending: str, alpha: float
) -> None:
    """Each compared variant's verdict against ``base``, its seeds, the look it stopped at and the test it rests on."""
    rows = [["variant", f"verdict vs {base.label}", "seeds", "look", "on"]]
    for v in others:
        decision = v.decision
        look = decision.look + 1 if decision is not None and decision.look >= 0 else "-"
        on = decision.evidence.inference if decision is not None and decision.evidence is not None else "-"
        rows.append([v.label, v.verdict, str(len(v.seeds)), str(look), on])
    print(
        f"LR tuning, stage 2 (seeds=auto): group-sequential verdicts on {metric} (held-out text; the rates were "
        f"selected on validation), margin ±{margin:g}, looks at {','.join(map(str, looks))} seeds, "
        f"{spending} spending, alpha {alpha:.3g} per variant, each look on the seeds that ran by it\n" + table(rows),
        flush=True,
    )
