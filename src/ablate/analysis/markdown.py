"""The summary table of a sweep as Markdown (what ``scripts/summarize.py`` prints and writes as
``summary.md``): the main table with its notes, the table "against the baseline" with its legend
(:func:`~ablate.analysis.comparison.compare_to_baseline` computes its columns), the table "at equal
cost" (:func:`cost_table`), and writing ``summary.csv`` / ``summary.md``.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from ablate.analysis import budget
from ablate.analysis.convergence import LATE_FRACTION, LATE_METRIC, STALL_METRIC, STALL_TOLERANCE
from ablate.analysis.job import higher_is_better
from ablate.analysis.runs import Sweep
from ablate.analysis.stats import NOT_TRAINED


def fmt(value: float, std: float = math.nan) -> str:
    """``55.9 ± 0.22``; ``—`` for a missing value."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    text = f"{value:.4g}"
    return text if math.isnan(std) else f"{text} ± {std:.2g}"


def _diverged(row: pd.Series) -> str:
    n = int(row["diverged"])
    return f"yes ({n}/{int(row['seeds'])})" if n else "no"


def _steps(row: pd.Series) -> str:
    low, high = row["steps_min"], row["steps_max"]
    if low is None or pd.isna(low):
        return "—"
    return f"{int(low)}" if low == high else f"{int(low)}–{int(high)}"


def _paper(value: object, note: str) -> str:
    text = fmt(value) if isinstance(value, float) else ("—" if value is None else str(value))
    return f"{text} ({note})" if note else text


def markdown_table(frame: pd.DataFrame, sweep: Sweep) -> str:
    """The summary as Markdown tables with their notes; with a baseline, its verdicts first."""
    metric, test, paper = frame.attrs["metric"], frame.attrs["test"], frame.attrs["paper"]
    names = sweep.short_names()
    failed = bool((frame["crashed"] + frame["incomplete"]).sum())
    header = [names[a] for a in sweep.axes] + ["seeds", f"{metric} final", f"{metric} best"]
    header += [test] if test else []
    header += [f"paper {paper.metric}"] if paper else []
    stalled = bool(frame["stalled"].sum())
    header += (
        ["diverged"]
        + (["stalled"] if stalled else [])
        + (["crashed"] if failed else [])
        + ["steps", f"Δ {LATE_METRIC} per last {LATE_FRACTION:.0%}"]
    )
    header += ["wall time (s)", "tokens/s"]
    align = [" --- " if i < len(sweep.axes) else " ---: " for i in range(len(header))]  # axes left, numbers right
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    for _, row in frame.iterrows():
        cells = [str(row[a]) for a in sweep.axes] + [str(int(row["seeds"]))]
        cells += [fmt(row[f"{metric} {kind} mean"], row[f"{metric} {kind} std"]) for kind in ("final", "best")]
        cells += [fmt(row[f"{test} mean"], row[f"{test} std"])] if test else []
        cells += [_paper(row[f"paper {paper.metric}"], row["paper note"])] if paper else []
        cells += [_diverged(row)]
        cells += [f"{int(row['stalled'])}/{int(row['completed'])}" if row["stalled"] else "no"] if stalled else []
        cells += [f"{int(row['crashed'] + row['incomplete'])}/{int(row['seeds'])}"] if failed else []
        rate = "—" if pd.isna(row["tokens_per_sec"]) else f"{row['tokens_per_sec']:.0f}"
        cells += [_steps(row), fmt(row["late_change"], row["late_change_std"]), fmt(row["wall_time_s"]), rate]
        lines.append("| " + " | ".join(cells) + " |")
    table = "\n".join(lines) + "\n\n" + legend(frame, sweep)
    table += "\n" + cost_table(frame, sweep) if "matched" in frame.attrs else ""
    if not frame.attrs.get("baseline"):
        return table
    # the answer first (the verdicts, each table followed by its notes), then the tables it rests on
    return baseline_table(frame, sweep) + "\nPer variant:\n\n" + table


def format_ci(low: float, high: float) -> str:
    """A confidence interval as tables print it, four significant digits."""
    return "—" if pd.isna(low) else f"[{low:.4g}, {high:.4g}]"


def format_p(value: float) -> str:
    """A p-value as tables print it (two significant digits, <1e-4 below)."""
    return "—" if pd.isna(value) else (f"{value:.2g}" if value >= 1e-4 else "<1e-4")


def _rate(row: pd.Series) -> str:
    k, n = int(row["diverged"]), int(row["seeds"])
    return f"{k}/{n} [{row['diverged_ci_low']:.2f}, {row['diverged_ci_high']:.2f}]"


def _delta_on(row: pd.Series) -> str:
    """Which seeds the Δ rests on: the pairs' seeds, or the two sample sizes (Welch)."""
    if row["test"] == "paired":
        one = " (the test text is one passage)" if row.get("text_blocks") == 1 else ""
        return f"paired, seeds {row['diff_seeds']}{one}"
    if row["test"] == "welch":
        return f"welch, {int(row['n_variant'])} vs {int(row['n_baseline'])} seeds"
    if row["test"] == "crossed":
        return f"crossed, seeds {row['diff_seeds']} x {int(row['text_blocks'])} text blocks"
    if row["test"] == "worst-rank":
        return str(row["inference"])
    return "—"


def _plan_word(row: pd.Series, declared: bool) -> str:
    """The verdict with ``— exploratory (why)`` when the row is outside the declared plan."""
    plan = row.get("plan")
    if not declared or not isinstance(plan, str) or not plan or plan == "declared":
        return str(row["verdict"])
    return f"{row['verdict']} — {plan}"


def baseline_table(frame: pd.DataFrame, sweep: Sweep) -> str:
    """The statistics against the baseline (:func:`compare_to_baseline`) as a Markdown table with its notes."""
    names, column = sweep.short_names(), frame.attrs["basis_column"]
    margin = frame.attrs.get("margin")
    diverging = bool(frame["diverged"].sum())
    crossed = bool((frame["test"] == "crossed").any())
    choices = frame.attrs.get("lr_choice") or {}
    header = [names[a] for a in sweep.axes] + (["tuned LR"] if choices else [])
    header += ["seeds", "n", column, "95% CI", "Δ vs baseline", "Δ 95% CI", "Δ on", "p", "p (Holm)"]
    header += ["seed SE", "text SE"] if crossed else []
    header += [f"p equiv ±{margin:g} (Holm)"] if margin is not None else []
    header += ["diverged (95% CI)"] if diverging else []
    header += ["MDE (80%, α/m)", "verdict"]
    left = ("seeds", "Δ on", "verdict", "diverged (95% CI)", "tuned LR")
    align = [" --- " if i < len(sweep.axes) or name in left else " ---: " for i, name in enumerate(header)]
    lines = [
        f"Against the baseline {frame.attrs['baseline']} ({frame.attrs['basis_text']}):",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(align) + "|",
    ]
    for key, (_, row) in zip(sweep.variants(), frame.iterrows(), strict=True):
        base = row["verdict"] == "baseline"
        cells = [str(row[a]) for a in sweep.axes] + ([choices.get(key, "—")] if choices else [])
        cells += [row["mean_seeds"] or "—", str(int(row[f"{column} n"]))]
        cells += [
            fmt(row[f"{column} mean"], row[f"{column} std"]),
            format_ci(row[f"{column} ci_low"], row[f"{column} ci_high"]),
        ]
        if base:
            cells += ["—"] * (5 + (margin is not None) + 2 * crossed)
            cells += [_rate(row)] if diverging else []
            cells += ["—"]
        else:
            cells += [
                fmt(row["diff"]),
                format_ci(row["diff_ci_low"], row["diff_ci_high"]),
                _delta_on(row),
                format_p(row["p"]),
                format_p(row["p_holm"]),
            ]
            cells += [fmt(row["seed_se"]), fmt(row["text_se"])] if crossed else []
            cells += [format_p(row["p_tost_holm"])] if margin is not None else []
            cells += [_rate(row)] if diverging else []
            cells += [fmt(row["mde"])]
        cells.append(_plan_word(row, bool(frame.attrs.get("plan_declared"))) if not base else "baseline")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + baseline_legend(frame, sweep)


METHODS = "docs/analysis.md"  # where every column, test and verdict of the table is explained


def baseline_legend(frame: pd.DataFrame, sweep: Sweep) -> str:
    """The legend under :func:`baseline_table`: a short line per thing the rows need."""
    alpha, margin = frame.attrs["alpha"], frame.attrs.get("margin")
    m = frame.attrs.get("family", frame.attrs.get("tested", 0))
    notes = [_family_note(frame, m)]
    cross = frame[frame["test"] == "crossed"]
    if len(cross):
        notes.append(_crossed_note(cross))
        caution = _text_dominated(cross)
        if caution:
            notes.append(caution)
    notes.append(_verdicts_note(margin))
    notes.append(
        f"MDE (80%, α/m): the true |Δ| this test would detect with 80% power at alpha/m = {alpha:g}/{max(m, 1)}: "
        "design information for the next sweep, not a bound on this one's effect."
    )
    planner = _planner_note(frame, sweep, margin, alpha / max(m, 1))
    if planner:
        notes.append(planner)
    if bool(frame["diverged"].sum()):
        notes.append(
            "diverged: kept as an outcome; such a row is tested by the worst-rank test (a diverged run ranked worst, "
            "exact p), its Δ is the surviving seeds' and it gets no equivalence test."
        )
    if bool(frame["stalled"].sum()):
        notes.append(
            f"stalled k/n: completed seeds whose final {STALL_METRIC} is within {STALL_TOLERANCE:.0%} of "
            "their first validation's (they never left the starting plateau); their values are in the test."
        )
    if frame["verdict"].astype(str).str.startswith(NOT_TRAINED).any():
        notes.append(
            "not trained (stalled k/n): most seeds of the row, or of the baseline, stalled, so there is no "
            "verdict and the row is outside the family: a difference between plateaus says nothing about the "
            "component. Make both arms train first: a longer budget (trainer.max_steps), another learning rate "
            "(optim.lr, or tune=lr), and the run header's scale probe line (a signal far off its expected scale)."
        )
    if frame.attrs.get("lr_choice"):
        notes.append(
            "tuned LR: each arm's rate, chosen on held-out runs (tune=lr; one per verdict seed under "
            "hydra.sweeper.selection=nested; Δ a step down / up: stage 1's loss one grid step either side minus the "
            "chosen rate's); an edge: the best rate was the lowest or highest tried, so the optimum may lie outside "
            "the grid."
        )
    few = [sweep.label(key) for key, n in zip(sweep.variants(), frame[f"{frame.attrs['basis_column']} n"]) if n < 2]
    if few:
        notes.append(
            f"No CI or test for {'; '.join(few)}: fewer than 2 completed seeds (a t interval and a t-test "
            "need the seed spread, which one value does not give); run more seeds (seed=1,2,3)."
        )
    notes.append(f"Methods, and what each column means: {METHODS}.")
    return "\n".join(notes) + "\n"


def _family_note(frame: pd.DataFrame, m: int) -> str:
    """What Δ is and the one Holm family of the table."""
    metric, alpha, slices = frame.attrs["metric"], frame.attrs["alpha"], frame.attrs.get("family_frames", 1)
    way = "higher" if higher_is_better(metric) else "lower"
    family = (
        f"the {m} comparisons of this table"
        if slices == 1
        else f"the {m} comparisons of all {slices} tables of this call"
    )
    return (
        f"Δ = variant - baseline of the {frame.attrs['basis_text']} ({way} is better); Δ on: the test and seeds it "
        f"rests on. p (Holm): one family, {family}, difference and equivalence tests together (Holm-Shaffer): "
        f"at most alpha = {alpha:g} chance of any false better, worse or equivalent."
    )


def _crossed_note(cross: pd.DataFrame) -> str:
    """The crossed seed x text analysis of the ``cross`` rows, with how much pairing the text narrowed them."""
    shrink = (cross["diff_ci_high"] - cross["diff"]) / cross["half_width_unpaired"]
    return (
        "crossed: a 95% interval for the mean difference over seeds and held-out text, both random, not a "
        "prediction for one new run (seed SE, text SE: the part each adds); pairing the windows made it "
        f"{shrink.min():.2f}-{shrink.max():.2f} times as wide as two independent texts would."
    )


TEXT_DOMINATED_BLOCKS = 4  # at or below this many held-out blocks, a text-dominated crossed test runs liberal


def _text_dominated(cross: pd.DataFrame) -> str | None:
    """A caution where the crossed test runs liberal, at any alpha: <= 4 held-out blocks, >= 5 seeds
    and a text SE above the seed SE (Satterthwaite's df run high when the 3 block df carry the
    variance; benchmarks/verdicts/README.md). One rule whatever the family's size. A screen."""
    risky = cross[
        (cross["text_blocks"] <= TEXT_DOMINATED_BLOCKS) & (cross["pairs"] >= 5) & (cross["text_se"] > cross["seed_se"])
    ]
    if risky.empty:
        return None
    return (
        f"Caution: in {len(risky)} crossed row(s) the text SE exceeds the seed SE on {int(risky['text_blocks'].max())} "
        "held-out blocks; there the crossed test runs liberal (simulated with 10 seeds: 5.4-5.9% false better/worse "
        f"at alpha 5%, 1.3-1.8 times its level at 1%; {METHODS}). Hold out 8 blocks (data.splits=blocks "
        "data.heldout_blocks=8)."
    )


def _planner_note(frame: pd.DataFrame, sweep: Sweep, margin: float | None, level: float) -> str | None:
    """The planner's line: per row, the seeds that detect δ (:func:`ablate.analysis.stats.seeds_for`)."""
    if margin is None:
        return None
    from ablate.analysis.stats import seeds_for

    names = []
    for key, (_, row) in zip(sweep.variants(), frame.iterrows(), strict=True):
        crossed = row["test"] == "crossed"
        if row["verdict"] == "baseline" or row["test"] not in ("crossed", "paired") or not row["se"] > 0:
            continue
        seed_se = row["seed_se"] if crossed else row["se"]
        text_se = row["text_se"] if crossed else 0.0
        n = seeds_for(margin, seed_se, text_se, int(row["pairs"]), int(row["text_blocks"]) if crossed else 1, level)
        label = sweep.label(key)
        names.append(f"{label}: {n}" if n else f"{label}: none (the text alone is too noisy: hold out more blocks)")
    if not names:
        return None
    return f"Planner, seeds to detect ±{margin:g} (80%, α/m) at each row's spread: " + "; ".join(names) + "."


def _verdicts_note(margin: float | None) -> str:
    """What each verdict means, with or without an equivalence margin."""
    return (
        "better / worse: p (Holm) < alpha; "
        + (
            f"equivalent (±{margin:g}): p equiv (Holm) < alpha (TOST); equivalence not shown: neither"
            if margin is not None
            else "inconclusive: neither (--margin δ adds the equivalence test)"
        )
        + '. Neither is "no difference".'
    )


def legend(frame: pd.DataFrame, sweep: Sweep) -> str:
    metric, paper = frame.attrs["metric"], frame.attrs["paper"]
    best = "maximum" if metric.endswith(("bleu", "acc", "accuracy")) else "minimum"
    stalled = (
        f"stalled: completed seeds whose final val/loss is within {STALL_TOLERANCE:.0%} of their first "
        "validation's (never left the starting plateau); they are in the means."
    )
    notes = [
        f"Sweep: {sweep.source} ({len(sweep.jobs)} jobs; axes: {', '.join(sweep.axes) or 'none'}).",
        f"Metrics: mean ± sample std (n-1) over the seeds that completed; final = last validation, best = its {best}. "
        "Diverged and crashed seeds are counted, not averaged. Wall time: mean per job; tokens/s: median over training.",
        *([stalled] if frame["stalled"].sum() else []),
        f"Δ {LATE_METRIC} per last {LATE_FRACTION:.0%}: the slope of {LATE_METRIC} between the last two validations, per "
        f"{LATE_FRACTION:.0%} of the run's steps (mean ± std over completed seeds; negative: still falling; a secant, so "
        "steeper than the very end of a flattening curve). A gap between rows much smaller than it may close or "
        "reverse with more steps.",
    ]
    if paper is not None:
        notes.append(f"Paper: {paper.metric} from {paper.source or 'the paper file'}.")
    notes += [f"left out: {why}." for why in frame.attrs.get("left_out", ())]
    failed = [job for job in sweep.jobs if job.status in ("crashed", "incomplete")]
    for job in failed:
        why = (job.record.get("error") or "no status.json: still running, or killed").strip().splitlines()[0]
        notes.append(f"{job.status}: {job.name}: {why}")
    return "\n".join(notes) + "\n"


def write_summary(frame: pd.DataFrame, markdown: str, out_dir: str | Path, name: str = "summary") -> tuple[Path, Path]:
    """``<name>.csv`` (numbers) and ``<name>.md`` (the table as printed) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / f"{name}.csv", out / f"{name}.md"
    frame.to_csv(csv_path, index=False)
    md_path.write_text(markdown)
    return csv_path, md_path


def cost_table(frame: pd.DataFrame, sweep: Sweep) -> str:
    """The cost of each variant and its metric at the matched budgets as a Markdown table, with notes."""
    metric, matched, names = frame.attrs["metric"], frame.attrs["matched"], sweep.short_names()
    header = [names[a] for a in sweep.axes] + ["params", "FLOPs/token", "tokens seen", "train time (s)"]
    header += [f"{metric} @ {budget.format_budget(matched[b].budget, b)}" for b in matched]
    align = [" --- " if i < len(sweep.axes) else " ---: " for i in range(len(header))]
    title = "At equal cost (matched budget = the largest that every completed job reached):"
    lines = [
        title if matched else "Cost of each variant:",
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join(align) + "|",
    ]
    for _, row in frame.iterrows():
        cells = [str(row[a]) for a in sweep.axes]
        cells += [
            "—" if pd.isna(row["params"]) else f"{row['params']:,.0f}",
            fmt(row["flops_per_token"]),
            "—" if pd.isna(row["tokens_seen"]) else f"{row['tokens_seen']:,.0f}",
            fmt(row["train_time_s"]),
        ]
        cells += [fmt(row[f"{metric} @{b} mean"], row[f"{metric} @{b} std"]) for b in matched]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + cost_legend(frame)


def cost_legend(frame: pd.DataFrame) -> str:
    metric, matched = frame.attrs["metric"], frame.attrs["matched"]
    cost = (
        "Cost: params = status.json params; FLOPs/token = 6N + 12 L d T (as train/mfu); tokens seen and train "
        "time = the final train/tokens_seen and train/time_s (validation left out); means over completed seeds."
    )
    if not matched:
        return (
            f"{cost}\n{metric} is measured once, after training: it has no curve to read at a matched budget, "
            "so no column compares it at equal cost (a validation metric, e.g. val/loss, has one).\n"
        )
    notes = [
        cost,
        (
            f"{metric} @ budget: each completed job's validation curve (against optimiser steps, FLOPs = FLOPs/token x "
            "train/tokens_seen, or train/time_s) interpolated linearly at the matched budget = the minimum over the "
            "completed jobs of their budget at their last validation (no extrapolation); mean ± std over seeds. "
            "The cheapest job is then at its end of training, the others part-way (learning rate not yet decayed)."
        ),
    ]
    for basis, m in matched.items():
        if m.problems:
            why = "; ".join(f"{_job_name(s)}: {p}" for s, p in m.problems.items())
            notes.append(
                f"No {basis} budget for {len(m.problems)} job(s) ({why}): left out of @ {budget.UNITS[basis]}."
            )
        if m.late():
            note = (
                f"No value @ {budget.format_budget(m.budget, basis)} for {len(m.late())} job(s) whose first "
                f"validation came later: {_some_jobs(m.late())}."
            )
            if note not in notes:  # bases without a budget ("—") would repeat the same list
                notes.append(note)
    return "\n".join(notes) + "\n"


def _some_jobs(sources: list[str], shown: int = 4) -> str:
    """The first ``shown`` job names and how many more: a note a person reads, not a dump."""
    names = [_job_name(s) for s in sources]
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _job_name(source: str) -> str:
    """A job's directory name from its source path (for notes)."""
    return source.rstrip("/").rsplit("/", 1)[-1]
