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
from ablate.analysis.convergence import LATE_FRACTION, LATE_METRIC, STALL_TOLERANCE
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
    """The summary as Markdown tables, each with its notes underneath; with a baseline, the
    verdicts against it come first."""
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
    if row["test"] in ("worst-rank", "group-sequential"):
        return str(row["inference"])
    return "—"


def _plan_word(row: pd.Series, declared: bool) -> str:
    """The verdict with its standing under the sweep's declared plan: ``— exploratory (why)`` when
    the row is outside it (without a plan every row is, which one note under the table says)."""
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
    header = _baseline_header([names[a] for a in sweep.axes], column, bool(choices), crossed, margin, diverging)
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
            adjusted = row.get("diff_adjusted")
            cells += [
                fmt(row["diff"]) + (f" (adj. {fmt(adjusted)})" if adjusted is not None and pd.notna(adjusted) else ""),
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


def _baseline_header(
    axes: list[str], column: str, tuned: bool, crossed: bool, margin: float | None, diverging: bool
) -> list[str]:
    """The columns of :func:`baseline_table`: the axes, then those its rows need."""
    header = (
        axes
        + (["tuned LR"] if tuned else [])
        + [
            "seeds",
            "n",
            column,
            "95% CI",
            "Δ vs baseline",
            "Δ 95% CI",
            "Δ on",
            "p",
            "p (Holm)",
        ]
    )
    header += ["seed SE", "text SE"] if crossed else []
    header += [f"p equiv ±{margin:g} (Holm)"] if margin is not None else []
    header += ["diverged (95% CI)"] if diverging else []
    header += ["MDE (80%, α/m)", "verdict"]
    return header


def baseline_legend(frame: pd.DataFrame, sweep: Sweep) -> str:
    """The notes under :func:`baseline_table`: what its columns and verdicts mean, and the notes its rows need."""
    alpha, margin = frame.attrs["alpha"], frame.attrs.get("margin")
    m = frame.attrs.get("family", frame.attrs.get("tested", 0))
    notes = [_family_note(frame, m)]
    cross = frame[frame["test"] == "crossed"]
    if len(cross):
        notes.append(_crossed_note(cross))
        liberal = _liberal_first_steps(cross, alpha / max(m, 1))
        if liberal:
            notes.append(liberal)
    if margin is not None:
        notes.append(
            f"Equivalence: TOST (two one-sided t-tests, same pairing) of |Δ| < {margin:g}, the smallest "
            'difference of interest, in the same family. "equivalent (±δ)" when it holds; "equivalent (±δ), and '
            'different (...)" when the difference test holds too (a real difference, smaller than δ).'
        )
    notes.append(_verdicts_note(margin))
    notes.append(
        f"MDE (80%, α/m): design information for the next sweep: the true |Δ| this test, at this n and this "
        f"seed spread, would detect with 80% power at alpha/m = {alpha:g}/{max(m, 1)}. It is not a bound on "
        "the true effect of an inconclusive row (that reading is the post-hoc power fallacy); only the "
        "equivalence test bounds it."
    )
    if bool(frame["diverged"].sum()):
        notes.append(
            "Diverged seeds are kept as an outcome: a row where some seed diverged (its own or the baseline's) "
            "is tested by the worst-rank test, every seed ranked with a diverged run worst (Lachin 1999), exact "
            "permutation p, in the same family; its Δ and CI are the surviving seeds' (descriptive) and it "
            "gets no equivalence test. The rate is shown with its Clopper-Pearson 95% interval (summary.csv: "
            "Boschloo's p_diverged, descriptive). With 3 seeds a side no rank test can reach p < 0.1."
        )
    if bool(frame["stalled"].sum()):
        notes.append(
            f"stalled k/n: completed seeds whose final {STALL_METRIC_TEXT} is within {STALL_TOLERANCE:.0%} of "
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
            "tuned LR: each arm's learning rate, chosen on the selection seed (tune=lr); an edge means the best "
            "rate was the lowest or highest tried, so the optimum may lie outside the grid and that arm may be "
            "handicapped; tune=lr extends the grid past an edge before stage 2 (hydra.sweeper.extend_edges)."
        )
    sequential = frame[frame["test"] == "group-sequential"]
    if len(sequential):
        notes.append(
            "group-sequential: the row's verdict is the sweep's stopping rule (below), at the look it stopped at, "
            "on the seeds that ran by that look; Δ 95% CI is that look's repeated confidence interval, adj. the "
            "bias-adjusted estimate (the raw Δ at an early stop is too large on average); p: that look's p-value, "
            "judged against the look's boundary, not 0.05, and outside the table's family."
        )
        liberal = _liberal_sequential(sequential)
        if liberal:
            notes.append(liberal)
    few = [sweep.label(key) for key, n in zip(sweep.variants(), frame[f"{frame.attrs['basis_column']} n"]) if n < 2]
    if few:
        notes.append(
            f"No CI or test for {'; '.join(few)}: fewer than 2 completed seeds (a t interval and a t-test "
            "need the seed spread, which one value does not give); run more seeds (seed=1,2,3)."
        )
    return "\n".join(notes) + "\n"


def _family_note(frame: pd.DataFrame, m: int) -> str:
    """What Δ, the seeds and the Holm family of the table are."""
    metric, alpha, slices = frame.attrs["metric"], frame.attrs["alpha"], frame.attrs.get("family_frames", 1)
    way = "higher" if higher_is_better(metric) else "lower"
    family = (
        f"the {m} comparisons of this table"
        if slices == 1
        else f"the {m} comparisons of all {slices} tables of this call"
    )
    return (
        f"Δ = variant - baseline of the {frame.attrs['basis_text']}; over completed seeds ({way} is better). "
        "seeds / n: the seeds the mean and its 95% CI (Student t) rest on; Δ on: the seeds Δ, its CI and p rest on "
        "(paired t-test on the seeds both share when they share >= 2, else Welch's t-test on all of them; "
        "crossed: seeds and text both random, below; worst-rank: a seed diverged, below). "
        f"p (Holm): one family, {family}: the difference and the equivalence tests together, Holm's step-down "
        "counting rows, not tests (Shaffer 1986: a row's two nulls, Δ = 0 and |Δ| >= δ, cannot both be true), so "
        f"the chance of any false better, worse or equivalent in the family is at most alpha = {alpha:g}."
    )


def _crossed_note(cross: pd.DataFrame) -> str:
    """The crossed seed x text analysis of the ``cross`` rows, with how much pairing the text narrowed them."""
    shrink = (cross["diff_ci_high"] - cross["diff"]) / cross["half_width_unpaired"]
    return (
        "crossed: a 95% interval for the mean difference over seeds and held-out text, both random effects "
        "(Clark 1973), not a prediction for one new run: two-way ANOVA of the per-seed, per-held-out-block "
        "differences from each run's per-window test losses (test_units.npz), Var = (MS_seed + MS_text - "
        "MS_error) / (n_seeds n_blocks), Satterthwaite df (src/ablate/analysis/crossed.py). seed SE: the part another set of seeds adds "
        "(what a paired t-test over seeds uses); text SE: the part another passage adds. Pairing the "
        f"windows (both variants scored on the same text) gives intervals {shrink.min():.2f}-{shrink.max():.2f} "
        "times as wide as two independent texts would (below 1: the passages' difficulty, shared by both, "
        "cancels; text SE unpaired in summary.csv)."
    )


LIBERAL_STEP = 0.0125  # Holm's first threshold at or below which docs/analysis.md measures the crossed test liberal


def _liberal_first_steps(cross: pd.DataFrame, first_step: float) -> str | None:
    """A warning where the family's first Holm steps are small and the crossed test can run liberal
    there: 4 or fewer held-out blocks, 5 or more seeds and a text SE above the seed SE (Satterthwaite's
    df run high when the 3 block df carry the variance; docs/analysis.md, "the crossed test at small α":
    1.3-1.8x at 1% with 10 seeds; with 5 seeds only where the text dominates). A screen, not a measurement."""
    risky = cross[(cross["text_blocks"] <= 4) & (cross["pairs"] >= 5) & (cross["text_se"] > cross["seed_se"])]
    if first_step > LIBERAL_STEP or risky.empty:
        return None
    return (
        f"Caution: in {len(risky)} crossed row(s) the text SE exceeds the seed SE on {int(risky['text_blocks'].max())} "
        f"held-out blocks; there the crossed test can be liberal at the family's first thresholds (alpha/m = "
        f"{first_step:.2g}; simulated with 10 seeds: 1.3-1.8 times its level at 1%, docs/analysis.md), so the "
        "family's error may exceed alpha. Hold out 8 blocks (data.splits=blocks data.heldout_blocks=8) for such "
        "a family."
    )


SEQUENTIAL_TEXT_RATIO = 2.0  # text SE / seed SE above which docs/analysis.md measures the 4-block rule over alpha


def _liberal_sequential(rows: pd.DataFrame) -> str | None:
    """A warning where the group-sequential rule can exceed its alpha: 4 or fewer held-out blocks
    and a text SE over twice the seed SE (docs/analysis.md, "Seeds to a decision": with a margin too
    small for equivalence stops, 5.2-5.4% false better/worse at text/seed SD 1.5-3 on 4 blocks, where
    the text SE is 2.3-4.6 seed SEs; 4.7% at SD 1, 1.5 seed SEs; 4.5-5.0% on 8 blocks at text/seed SD
    0.3-6). A screen, not a measurement."""
    if not {"text_se", "seed_se", "text_blocks"} <= set(rows.columns):
        return None
    risky = rows[(rows["text_blocks"] <= 4) & (rows["text_se"] > SEQUENTIAL_TEXT_RATIO * rows["seed_se"])]
    if risky.empty:
        return None
    return (
        f"Caution: in {len(risky)} group-sequential row(s) the text SE is more than twice the seed SE on "
        f"{int(risky['text_blocks'].max())} held-out blocks; there the crossed test is liberal and the stopping "
        "rule's false better/worse rate can exceed alpha (simulated: 5.2-5.4% at alpha 5%, docs/analysis.md). "
        "Hold out 8 blocks (data.splits=blocks data.heldout_blocks=8) for such a sweep."
    )


def _verdicts_note(margin: float | None) -> str:
    """What each verdict means, with or without an equivalence margin."""
    return (
        "better / worse: p (Holm) < alpha; "
        + (
            f"equivalent (±{margin:g}): p equiv (Holm) < alpha; equivalence not shown: neither (the data are "
            f"compatible with the whole Δ 95% CI, differences beyond ±{margin:g} included)"
            if margin is not None
            else "inconclusive: neither (no equivalence margin given: --margin δ, or analysis.margin in the "
            "experiment config, adds the equivalence test)"
        )
        + '. Neither is "no difference", and nothing is "rejected".'
    )


STALL_METRIC_TEXT = "val/loss"


def legend(frame: pd.DataFrame, sweep: Sweep) -> str:
    metric, paper = frame.attrs["metric"], frame.attrs["paper"]
    best = "maximum" if metric.endswith(("bleu", "acc", "accuracy")) else "minimum"
    notes = [
        f"Sweep: {sweep.source} ({len(sweep.jobs)} jobs; axes: {', '.join(sweep.axes) or 'none'}).",
        f"Metrics: mean ± sample std (n-1) over the seeds that completed; final = last validation, best = its {best}. "
        "Diverged and crashed seeds are counted, not averaged. Wall time: mean per job; tokens/s: median over training.",
        *(
            [
                f"stalled: completed seeds whose final val/loss is within {STALL_TOLERANCE:.0%} of their first "
                "validation's (never left the starting plateau); they are in the means."
            ]
            if frame["stalled"].sum()
            else []
        ),
        f"Δ {LATE_METRIC} per last {LATE_FRACTION:.0%}: the slope of {LATE_METRIC} between the last two validations, per "
        f"{LATE_FRACTION:.0%} of the run's steps (mean ± std over completed seeds; negative: still falling; a secant, so "
        "steeper than the very end of a flattening curve). A gap between rows much smaller than it may close or "
        "reverse with more steps.",
    ]
    if paper is not None:
        notes.append(f"Paper: {paper.metric} from {paper.source or 'the paper file'}.")
    failed = [job for job in sweep.jobs if job.status in ("crashed", "incomplete")]
    for job in failed:
        why = (job.record.get("error") or "no status.json: still running, or killed").strip().splitlines()[0]
        notes.append(f"{job.status}: {job.name}: {why}")
    return "\n".join(notes) + "\n"


def write_summary(frame: pd.DataFrame, markdown: str, out_dir: str | Path, name: str = "summary") -> tuple[Path, Path]:
    """``<name>.csv`` (numbers) and ``<name>.md`` (the table as printed) in ``out_dir``: the
    summary, or another table of the sweep (``interaction``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    csv_path, md_path = out / f"{name}.csv", out / f"{name}.md"
    frame.to_csv(csv_path, index=False)
    md_path.write_text(markdown)
    return csv_path, md_path


# ----------------------------------------------------------------------------- the cost table


def cost_table(frame: pd.DataFrame, sweep: Sweep) -> str:
    """The cost of each variant and its metric at matched steps, FLOPs and training time as a
    Markdown table, the matched budgets in its header, with notes."""
    metric, matched, names = frame.attrs["metric"], frame.attrs["matched"], sweep.short_names()
    header = [names[a] for a in sweep.axes] + ["params", "FLOPs/token", "tokens seen", "train time (s)"]
    header += [f"{metric} @ {budget.format_budget(matched[b].budget, b)}" for b in matched]
    align = [" --- " if i < len(sweep.axes) else " ---: " for i in range(len(header))]
    lines = [
        "At equal cost (matched budget = the largest that every completed job reached):"
        if matched
        else "Cost of each variant:",
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
