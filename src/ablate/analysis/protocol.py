"""What a summary's verdicts stand on: the declared plan they follow (or not).

:func:`label_plan` labels each row of the tables ``declared`` or ``exploratory (why)``, by
:func:`ablate.analysis.plan.check_rows`: the plan of record (its ledger entry) against the jobs the
tables read (their seeds, variants, split layout, start times).
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ablate.analysis.plan import Call, Row, check_rows, first_start, read_plan
from ablate.analysis.runs import Sweep
from ablate.analysis.specs import parse_baseline


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
                test=str(row["test"]),
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
