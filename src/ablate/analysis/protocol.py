"""What a summary's verdicts stand on: the declared plan they follow (or not), and the stopping
rule of a sweep whose seeds were added until decided.

* :func:`label_plan`: each row of the tables ``declared`` or ``exploratory (why)``, by
  :func:`ablate.analysis.plan.check_rows` against the sweep's ``analysis_plan.json``;
* :func:`apply_sequential`: on a ``tune=lr hydra.sweeper.seeds=auto`` sweep the seeds were added
  until each comparison was decided, so a fixed-n test on them ignores the optional stopping. The
  rows the sequential rule decided get its verdict, recomputed from the jobs' own values
  (:func:`ablate.analysis.sequential.sequential_verdict` with the rule's looks, margin, spending
  and alpha / m), and the repeated confidence interval at the look it stopped at
  (:func:`ablate.analysis.sequential.repeated_interval`), which matches it; the p-value of the
  fixed-n test is left out (``test = group-sequential``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ablate.analysis import sequential
from ablate.analysis.job import higher_is_better
from ablate.analysis.plan import Call, check_rows, first_result_time, read_plan
from ablate.analysis.runs import TUNING_FILE, Sweep
from ablate.analysis.specs import find_baseline


def compared_labels(frame: pd.DataFrame, sweep: Sweep) -> list[str]:
    """The row labels of ``frame`` other than its baseline (``norm=post, lr=0.006``)."""
    labels = [sweep.label(key) for key in sweep.variants()]
    return [label for label, verdict in zip(labels, frame["verdict"], strict=True) if verdict != "baseline"]


def label_plan(
    root: str | Path | None,
    tables: list[tuple[str | None, str, pd.DataFrame, Sweep]],
    baseline: str | None,
    basis: str,
    family_is_call: bool,
) -> list[str]:
    """Fill each table's ``plan`` column (``declared`` / ``exploratory (why)``) from the plan
    declared in ``root`` (none: every row exploratory) and return the notes for the output."""
    declaration = read_plan(root) if root is not None else None
    call = Call(
        baseline=baseline,
        basis=basis,
        margins={metric: frame.attrs.get("margin") for _, metric, frame, _ in tables},
        tables=[(spec, metric, compared_labels(frame, sweep)) for spec, metric, frame, sweep in tables],
        family_is_call=family_is_call,
    )
    compared = [job.source for _, _, frame, sweep in tables for job in sweep.jobs]
    labels, notes = check_rows(declaration, call, first_result_time(compared))
    for spec, metric, frame, sweep in tables:
        rows = dict(zip([sweep.label(k) for k in sweep.variants()], frame.index, strict=True))
        frame.attrs["plan_declared"] = declaration is not None
        frame["plan"] = ""
        for label, index in rows.items():
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
    """Replace the fixed-n statistics of the rows the sequential rule decided (same metric and
    baseline) with its verdict and repeated interval; returns the note that states the rule."""
    metric = frame.attrs["metric"]
    looks, margin = [int(n) for n in rule["looks"]], float(rule["margin"])
    spending, m = str(rule.get("spending") or sequential.DEFAULT_SPENDING), max(int(rule.get("variants", 1)), 1)
    alpha = sequential.ALPHA / m
    note = (
        f"Seeds added until decided (tune=lr seeds=auto): group-sequential on {rule.get('metric', metric)} against "
        f"{rule['baseline']}, margin ±{margin:g}, looks at {','.join(map(str, looks))} seeds, {spending} spending with "
        f"exact boundaries, alpha {sequential.ALPHA:g}/{m} per variant (src/ablate/analysis/sequential.py)."
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
    base = {j.seed: j.final(metric) for j in variants[base_key] if j.status == "completed" and j.seed is not None}
    for (key, jobs), index in zip(variants.items(), frame.index, strict=True):
        if key == base_key:
            continue
        mine = {j.seed: j.final(metric) for j in jobs if j.status == "completed" and j.seed is not None}
        seeds = sorted(s for s in mine if s in base and math.isfinite(mine[s]) and math.isfinite(base[s]))
        diffs = [mine[s] - base[s] for s in seeds]
        decision = sequential.sequential_verdict(diffs, margin, looks, alpha, spending, better_up)
        if decision.verdict == "continue" or decision.look < 0:
            continue
        used = diffs[: decision.seeds]
        low, high = sequential.repeated_interval(used, looks, decision.look, alpha, spending)
        frame.loc[index, ["diff", "diff_ci_low", "diff_ci_high"]] = [float(np.mean(used)), low, high]
        frame.loc[index, ["p", "p_holm", "p_tost", "p_tost_holm", "mde"]] = math.nan
        frame.loc[index, "test"] = "group-sequential"
        frame.loc[index, "inference"] = (
            f"group-sequential, stopped at look {decision.look + 1} ({decision.seeds} seeds)"
        )
        frame.loc[index, "diff_seeds"] = ",".join(str(s) for s in seeds[: decision.seeds])
        frame.loc[index, "verdict"] = decision.verdict
    return note + " Rows it decided show its verdict and the repeated 95% interval at the look it stopped at."
