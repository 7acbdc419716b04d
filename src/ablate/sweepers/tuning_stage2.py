"""Stage 2 of a ``tune=lr`` sweep: each variant at its chosen rate with fresh seeds (a fixed design,
:func:`fixed_stage2`), judged by a rule declared before its data (:func:`declare_plan`, on the
held-out metric). Imported at Hydra's plugin scan: the analysis code only inside the functions."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hydra.core.utils import JobReturn, JobStatus

from ablate.sweepers.lr_selection import job_dir_of, read_outcome
from ablate.sweepers.tuning_report import Variant, number, seed_record

log = logging.getLogger(__name__)


AUTO_SEEDS_GONE = (
    "hydra.sweeper.seeds=auto: the group-sequential design is gone (it saved at most about 20% of the seeds); "
    "use a fixed design: give the verdict seeds, e.g. hydra.sweeper.seeds=[1,2,3,4,5] (or seed=1,2,3,4,5). "
    "How many seeds detect a difference of δ: run a pilot sweep and read the planner line under "
    "`python scripts/summarize.py <pilot sweep> --baseline AXIS=VALUE --margin δ` (docs/analysis.md, "
    '"Planning a sweep")'
)


def refuse_auto_seeds(seeds: Any) -> None:
    """Refuse ``hydra.sweeper.seeds=auto``, naming the fixed design and the planner that replace it."""
    if isinstance(seeds, str) and seeds.strip().lower() == "auto":
        raise ValueError(AUTO_SEEDS_GONE)


def held_out_metric(metric: str, given: str | None = None) -> str:
    """``hydra.sweeper.verdict_metric``, else the selection metric on the test split (``val/loss`` -> ``test/loss``)."""
    if given:
        return str(given)
    return "test/" + metric.split("/", 1)[1] if metric.startswith("val/") else metric


def declare_plan(
    sweep_dir: Path,
    *,
    selection: str,
    verdict_metric: str,
    seeds: list[str],
    baseline: str | None,
    margin: float | None,
    margin_basis: str | None,
    variants: tuple[str, ...] = (),
    layout: str | None = None,
    log_dir: str | None = None,
) -> None:
    """Declare the verdict's rule (:mod:`ablate.analysis.plan`, a copy in ``<sweep dir>/analysis_plan.json``)
    before stage 2: metric, baseline, margin, compared ``variants``, split ``layout`` and seeds. A plan
    declared before (``scripts/declare.py``) is kept, and a message says so."""
    from ablate.analysis.plan import Plan, PlanError, declare, read_plan

    basis = margin_basis or (
        f"hydra.sweeper.margin={margin:g}, given with the command before stage 2 (its reason was not "
        "recorded: hydra.sweeper.margin_basis='...')"
        if margin is not None
        else ""
    )
    try:
        plan = Plan(
            metrics=(verdict_metric,),
            baseline=baseline,
            margin=margin,
            margin_basis=basis,
            split=verdict_metric.split("/", 1)[0],
            seeds=tuple(number(s) for s in seeds),
            selection=selection,
            declared_by="train.py (tune=lr), before stage 2",
            note="" if baseline else "no hydra.sweeper.baseline: no comparison was declared",
            variants=variants if baseline else (),
            layout=layout,
        )
        declared = declare(sweep_dir, plan, log_dir=log_dir)
    except PlanError as err:  # one declared before the sweep (scripts/declare.py) is the plan of record
        try:
            existing = read_plan(sweep_dir, log_dir)
        except PlanError:
            existing = None
        if existing is None:
            log.warning("tuned_lr: %s", err)
        else:
            print(
                f"LR tuning: keeping the analysis plan declared before this sweep, {existing.path} (sha256 "
                f"{existing.sha256[:12]}, {existing.declared_at}): {existing.plan.describe()}",
                flush=True,
            )
        return
    print(
        f"LR tuning: analysis plan declared (ledger entry {declared.entry.get('entry')}, sha256 {declared.sha256[:12]}; "
        f"copy in {declared.path}): {plan.describe()}",
        flush=True,
    )


def _record_outcomes(plan: list[tuple[Variant, str]], returns: list[JobReturn], metric: str) -> None:
    """Append each launched job's final ``metric`` to its variant's seeds."""
    for (v, s), ret in zip(plan, returns, strict=True):
        job_dir = job_dir_of(ret)
        status, value = read_outcome(job_dir, metric, failed=ret.status == JobStatus.FAILED)
        v.seeds.append(seed_record(s, status, value, job_dir.name if job_dir else None))


def fixed_stage2(
    variants: list[Variant],
    launch: Callable[[list[list[str]]], list[JobReturn]],
    *,
    metric: str,
    lr_name: str,
    seed_name: str,
    seeds: list[str],
) -> list[JobReturn]:
    """Every variant with a usable rate at that rate, with every verdict seed (``nested``: its own seed)."""
    plan = [(v, s) for v in variants if v.selection.chosen is not None for s in ([v.seed] if v.seed else seeds)]
    if plan:
        print(
            f"LR tuning, stage 2: {len({v.label for v, _ in plan})} variant(s) at their chosen learning rate"
            + (" (each verdict seed's own)" if any(v.seed for v, _ in plan) else "")
            + f", {seed_name}={','.join(seeds)}",
            flush=True,
        )
    returns = launch([[*v.overrides, f"{lr_name}={v.chosen_text}", f"{seed_name}={s}"] for v, s in plan])
    for v in variants:
        v.seeds = []
    _record_outcomes(plan[: len(returns)], returns, metric)
    return returns
