"""What a summary's verdicts stand on: the declared plan they follow (or not), and the stopping
rule of a sweep whose seeds were added until decided.

* :func:`label_plan`: each row of the tables ``declared`` or ``exploratory (why)``, by
  :func:`ablate.analysis.plan.check_rows`: the plan of record (its ledger entry) against the jobs
  the tables read (their seeds, variants, split layout, start times, the stopping rule);
* :func:`apply_sequential`: on a ``tune=lr hydra.sweeper.seeds=auto`` sweep the seeds were added
  until each comparison was decided, so a fixed-n test on them ignores the optional stopping.
  Every row gets the rule's verdict, recomputed from the jobs by the one engine
  (:func:`ablate.analysis.engine.sequential`: the row's own test, crossed or worst-rank, at each
  look on the seeds that ran by it), with the repeated confidence interval at the look it stopped
  at and the bias-adjusted estimate (``test = group-sequential``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.analysis import engine, sequential
from ablate.analysis.job import higher_is_better
from ablate.analysis.plan import Call, Row, check_rows, first_start, read_plan
from ablate.analysis.runs import TUNING_FILE, Sweep
from ablate.analysis.specs import find_baseline, parse_baseline


def compared_labels(frame: pd.DataFrame, sweep: Sweep) -> list[str]:
    """The row labels of ``frame`` other than its baseline (``norm=post, lr=0.006``)."""
    labels = [sweep.label(key) for key in sweep.variants()]
    return [label for label, verdict in zip(labels, frame["verdict"], strict=True) if verdict != "baseline"]


def _seeds(jobs: list) -> tuple[int, ...]:
    return tuple(sorted({job.seed for job in jobs if job.seed is not None}))


def _declared_as(sweep: Sweep, jobs: list, specs: tuple[str, ...]) -> str | None:
    """The plan's variant spec (``norm=post``) this row's jobs match, or None."""
    for spec in specs:
        try:
            wanted = parse_baseline(spec)
        except ValueError:
            continue
        if all(jobs[0].value(sweep.full_name(k)) == v for k, v in wanted.items()):
            return spec
    return None


def _rows(tables, declaration) -> tuple[dict, tuple[str, ...]]:
    """Per compared row, what the plan check needs (:class:`ablate.analysis.plan.Row`), and the
    plan's variants that match no row of any table."""
    specs = declaration.plan.variants if declaration is not None else ()
    rows, matched = {}, set()
    for spec, metric, frame, sweep in tables:
        variants = sweep.variants()
        base_key = next(
            (key for key, verdict in zip(variants, frame["verdict"], strict=True) if verdict == "baseline"), None
        )
        base_seeds = _seeds(variants[base_key]) if base_key is not None else ()
        for (key, jobs), (_, row) in zip(variants.items(), frame.iterrows(), strict=True):
            if key == base_key:
                continue
            declared_as = _declared_as(sweep, jobs, specs)
            matched.add(declared_as)
            rows[(spec, metric, sweep.label(key))] = Row(
                seeds=_seeds(jobs),
                baseline_seeds=base_seeds,
                pairs=int(row["pairs"]) if pd.notna(row.get("pairs")) else 0,
                blocks=int(row["text_blocks"]) if pd.notna(row.get("text_blocks")) else 0,
                test=str(row.get("sequential_test", "")) if row.get("test") == "group-sequential" else str(row["test"]),
                rule_check=str(row.get("rule_check") or ""),
                declared_as=declared_as,
            )
    return rows, tuple(s for s in specs if s not in matched)


def label_plan(
    root: str | Path | None,
    tables: list[tuple[str | None, str, pd.DataFrame, Sweep]],
    baseline: str | None,
    basis: str,
    family_is_call: bool,
    equivalence: tuple[str, ...] = (),
) -> list[str]:
    """Fill each table's ``plan`` column (``declared`` / ``exploratory (why)``) from the plan of
    record of ``root`` (:func:`ablate.analysis.plan.read_plan`; none: every row exploratory),
    checked against the jobs the tables read (:func:`ablate.analysis.plan.check_rows`), and return
    the notes for the output."""
    declaration = read_plan(root) if root is not None else None
    rule = sequential_rule(root) if root is not None else None
    rows, missing = _rows(tables, declaration)
    finished = [job for _, _, _, sweep in tables for job in sweep.jobs if job.status in ("completed", "diverged")]
    start, unstarted = first_start([(job.name, job.record) for job in finished])
    layouts = {str(job.value("data.splits")) for job in finished if job.value("data.splits") is not None}
    call = Call(
        baseline=baseline,
        basis=basis,
        margins={metric: frame.attrs.get("margin") for _, metric, frame, _ in tables},
        tables=[(spec, metric, compared_labels(frame, sweep)) for spec, metric, frame, sweep in tables],
        family_is_call=family_is_call,
        rows=rows,
        stopping="group-sequential" if rule is not None else "fixed",
        looks=tuple(int(n) for n in rule["looks"]) if rule is not None else (),
        spending=str(rule.get("spending")) if rule is not None else None,
        layouts=frozenset(layouts),
        first_start=start,
        unstarted=unstarted,
        job_plans=tuple((job.name, job.record.get("plan_sha256")) for job in finished),
        missing_variants=missing,
        equivalence=tuple(equivalence),
    )
    labels, notes = check_rows(declaration, call)
    for spec, metric, frame, sweep in tables:
        labels_of_rows = dict(zip([sweep.label(k) for k in sweep.variants()], frame.index, strict=True))
        frame.attrs["plan_declared"] = declaration is not None
        frame["plan"] = ""
        for label, index in labels_of_rows.items():
            if frame.at[index, "verdict"] != "baseline":
                frame.at[index, "plan"] = labels.get((spec, metric, label), "exploratory")
    return notes


def sequential_rule(root: str | Path) -> dict[str, Any] | None:
    """The stopping rule of a ``seeds=auto`` sweep (its ``lr_tuning.json``), or None."""
    path = Path(root) / TUNING_FILE
    if not path.is_file():
        return None
    try:
        tuning = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    rules = [v["sequential"] for v in tuning.get("variants", []) if isinstance(v.get("sequential"), dict)]
    if not rules:
        return None
    rule = dict(rules[0])
    rule["variants"] = len(rules)
    return rule


def apply_sequential(frame: pd.DataFrame, sweep: Sweep, rule: dict[str, Any]) -> str:
    """Give every row of a ``seeds=auto`` sweep the sequential rule's verdict, recomputed from the
    jobs by the one engine (:func:`ablate.analysis.engine.sequential`: the row's own test, crossed
    or worst-rank, at each look on the seeds that ran by it, diverged ones included), with the
    repeated interval and the bias-adjusted estimate at the look it stopped at; returns the note
    that states the rule. A row whose seeds do not follow the rule (run past its stop, or a look's
    seed missing) gets ``rule_check`` saying so, which makes it exploratory."""
    metric = frame.attrs["metric"]
    looks, margin = [int(n) for n in rule["looks"]], float(rule["margin"])
    spending, m = str(rule.get("spending") or sequential.DEFAULT_SPENDING), max(int(rule.get("variants", 1)), 1)
    alpha = float(rule.get("alpha", sequential.ALPHA)) / m
    order = [int(s) for s in rule.get("order") or range(1, looks[-1] + 1)]
    note = (
        f"Seeds added until decided (tune=lr seeds=auto): group-sequential on {rule.get('metric', metric)} against "
        f"{rule['baseline']}, margin ±{margin:g}, looks at {','.join(map(str, looks))} seeds, {spending} spending "
        f"(each look's boundary applied to the row's own test at its nominal level), alpha "
        f"{float(rule.get('alpha', sequential.ALPHA)):g}/{m} per variant (src/ablate/analysis/engine.py)."
    )
    if metric != rule.get("metric", metric):
        return (
            note
            + f" This table's {metric} is not the rule's metric: its fixed-n tests ignore the stopping (exploratory)."
        )
    try:
        base_key = find_baseline(sweep, rule["baseline"])
    except ValueError:
        return note
    variants, better_up = sweep.variants(), higher_is_better(metric)
    base = engine.outcomes(variants[base_key], metric)
    frame["diff_adjusted"] = math.nan
    frame["rule_check"] = ""
    frame["sequential_test"] = ""
    for (key, jobs), index in zip(variants.items(), frame.index, strict=True):
        if key == base_key:
            continue
        mine = engine.outcomes(jobs, metric)
        decision = engine.sequential(mine, base, metric, better_up, margin, looks, alpha, spending, order)
        frame.loc[index, "rule_check"] = _follows_rule(mine, decision, looks, order)
        frame.loc[index, ["p_holm", "p_tost_holm", "mde"]] = math.nan
        frame.loc[index, "test"] = "group-sequential"
        if decision.evidence is None:
            frame.loc[index, "inference"] = f"group-sequential, not decided: {decision.waiting}"
            frame.loc[index, "verdict"] = f"not decided yet ({decision.waiting})"
            frame.loc[index, ["p", "p_tost", "diff", "diff_ci_low", "diff_ci_high"]] = math.nan
            continue
        _write_decision(frame, index, decision, margin)
    return note + (
        " Each row shows its verdict at the look it stopped at, the repeated 95% interval there and the "
        "bias-adjusted estimate (adj.; Whitehead 1986): the raw Δ at an early stop exaggerates the effect."
    )


def _write_decision(frame: pd.DataFrame, index: Any, decision: engine.Decision, margin: float) -> None:
    """Row ``index`` at the look its rule stopped at: test, repeated interval, adjusted estimate, verdict."""
    evidence = decision.evidence
    assert evidence is not None  # the caller writes a look that still waits for seeds
    c = evidence.comparison
    frame.loc[index, "sequential_test"] = c.test
    frame.loc[index, ["diff", "diff_ci_low", "diff_ci_high", "diff_adjusted"]] = [
        c.diff,
        decision.low,
        decision.high,
        decision.adjusted,
    ]
    frame.loc[index, ["p", "p_tost", "se", "df", "pairs"]] = [c.p, c.p_tost, c.se, c.df, c.n_pairs]
    if evidence.crossed:
        frame.loc[index, ["seed_se", "text_se", "text_se_unpaired", "half_width_unpaired"]] = [
            evidence.seed_se,
            evidence.text_se,
            evidence.text_se_unpaired,
            evidence.half_width_unpaired,
        ]
    frame.loc[index, "text_blocks"] = evidence.n_blocks
    n = len(decision.seeds)
    frame.loc[index, "inference"] = f"group-sequential, look {decision.look + 1} ({n} seeds): {evidence.inference}"
    frame.loc[index, "diff_seeds"] = ",".join(str(s) for s in decision.seeds)
    frame.loc[index, "verdict"] = engine.words(
        decision.code,
        margin,
        evidence.diverged,
        evidence.ran,
        int(frame.loc[index, "stalled"]),
        int(frame.loc[index, "completed"]),
        both=decision.both,
    )


def _follows_rule(outcomes: list[engine.Outcome], decision: engine.Decision, looks: list[int], order: list[int]) -> str:
    """ "" when the variant's seeds are the ones the rule ran: the first ``looks[k]`` seeds of
    ``order`` for the look k it stopped at (or is waiting for), no more; else what differs."""
    ran = sorted(o.seed for o in outcomes if o.seed is not None)
    if decision.decided and decision.look >= 0:
        wanted = order[: looks[decision.look]]
        extra = [s for s in ran if s not in wanted]
        if extra:
            return f"seeds {','.join(map(str, extra))} ran after the rule stopped at look {decision.look + 1}"
    unknown = [s for s in ran if s not in order]
    if unknown:
        return f"seeds {','.join(map(str, unknown))} are not the rule's"
    return ""
