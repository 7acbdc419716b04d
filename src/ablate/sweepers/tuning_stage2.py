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


def read_plan_quietly(sweep_dir: Path) -> Any:
    """The sweep directory's declared plan (:func:`ablate.analysis.plan.read_plan`), or None when it
    has none or it cannot be read."""
    from ablate.analysis.plan import PlanError, read_plan

    try:
        return read_plan(sweep_dir)
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
) -> None:
    """Write the verdict's rule to ``<sweep dir>/analysis_plan.json`` before stage 2 starts.
    ``looks`` None: a fixed set of ``seeds``; a list: ``seeds=auto``'s looks. A plan the user
    declared before (``scripts/declare.py``) is kept, and a different one is not written over it:
    a message says so."""
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
        )
        declared = declare(sweep_dir, plan)
    except PlanError as err:
        existing = read_plan_quietly(sweep_dir)
        if existing is None:
            log.warning("tuned_lr: %s", err)
        else:  # declared before the sweep (scripts/declare.py): that is the plan of record
            print(
                f"LR tuning: keeping the analysis plan declared before this sweep, {existing.path} (sha256 "
                f"{existing.sha256[:12]}, {existing.declared_at}): {existing.plan.describe()}",
                flush=True,
            )
        return
    print(f"LR tuning: analysis plan {declared.path} (sha256 {declared.sha256[:12]}): {plan.describe()}", flush=True)


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


def _record_outcomes(plan: list[tuple[Variant, str]], returns: list[JobReturn], metric: str) -> None:
    """Append each launched job's final ``metric`` to its variant's seed records."""
    for (v, s), ret in zip(plan, returns, strict=True):
        job_dir = job_dir_of(ret)
        status, value = read_outcome(job_dir, metric, failed=ret.status == JobStatus.FAILED)
        v.seeds.append(seed_record(s, status, value, job_dir.name if job_dir else None))


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
    """Every variant with a usable learning rate at that rate, with every verdict seed, fresh."""
    plan = [(v, s) for v in variants if v.selection.chosen is not None for s in seeds]
    if plan:
        print(
            f"LR tuning, stage 2: {len({id(v) for v, _ in plan})} variant(s) at their chosen learning rate, "
            f"{seed_name}={','.join(seeds)}",
            flush=True,
        )
    returns = launch(_jobs(plan, lr_name, seed_name))
    for v in variants:
        v.seeds = []
    _record_outcomes(plan[: len(returns)], returns, metric)
    return returns


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
    added up to each look; after each look every undecided variant gets the sequential verdict
    on its paired differences of ``metric`` (the held-out verdict metric, not the one the rate
    was selected on; seeds both have a finite value for, in seed order); decided variants get
    no more seeds. A diverged seed has no difference: it delays the decision, and a variant
    still undecided after the last look is ``inconclusive``."""
    from ablate.analysis.job import higher_is_better
    from ablate.analysis.sequential import ALPHA, sequential_verdict

    higher = higher_is_better(metric)
    base = _baseline_variant(variants, baseline)
    for v in variants:
        v.seeds = []
    if base.selection.chosen is None:
        log.warning("tuned_lr: the baseline %s has no usable learning rate: no stage 2", base.label)
        return []
    others = [v for v in variants if v is not base and v.selection.chosen is not None]
    alpha = ALPHA / max(len(others), 1)
    undecided, returns, done = list(others), [], 0
    for n in looks:
        batch = seeds[done:n]
        plan = [(v, s) for v in [base, *undecided] for s in batch]
        print(
            f"LR tuning, stage 2 (seeds=auto): {seed_name}={','.join(batch)} for {base.label} (baseline) and "
            f"{len(undecided)} undecided variant(s)",
            flush=True,
        )
        rets = launch(_jobs(plan, lr_name, seed_name))
        returns += rets
        if interrupted():  # this look's seeds are incomplete: no verdict rests on them
            break
        _record_outcomes(plan, rets, metric)
        done = n
        base_values = {str(r["seed"]): r["value"] for r in base.seeds if r["value"] is not None}
        for v in list(undecided):
            mine = {str(r["seed"]): r["value"] for r in v.seeds if r["value"] is not None}
            diffs = [mine[s] - base_values[s] for s in seeds[:n] if s in mine and s in base_values]
            v.decision = sequential_verdict(diffs, margin, looks, alpha, spending, higher)
            if v.decision.verdict != "continue":
                undecided.remove(v)
        if not undecided:
            break
    rows = [["variant", f"verdict vs {base.label}", "seeds", "look"]]
    for v in others:
        look = v.decision.look + 1 if v.decision is not None and v.decision.look >= 0 else "-"
        rows.append([v.label, v.verdict, str(len(v.seeds)), str(look)])
    print(
        f"LR tuning, stage 2 (seeds=auto): group-sequential verdicts on {metric} (held-out text; the rates were "
        f"selected on validation), margin ±{margin:g}, looks at {','.join(map(str, looks))} seeds, "
        f"{spending} spending (exact boundaries), alpha {alpha:.3g} per variant\n" + table(rows),
        flush=True,
    )
    return returns
