"""The 2 x 2 interaction of two axes of a sweep: does the effect of one depend on the other?

``scripts/summarize.py SWEEP --interaction norm=post,pre --interaction optim.warmup_steps=0,30``
names factor A (levels a1, a2) and factor B (b1, b2). The sweep is cut into *slices* (each
``--where``, and within it each combination of the other axes' values), so that the four cells of
a contrast differ in A and B only. Per slice and metric, on the seeds run in all four cells: the
cell means, the simple effects of B within a1 and a2 (descriptive), and the interaction contrast
Δ_int = (y[a1,b1] - y[a1,b2]) - (y[a2,b1] - y[a2,b2]) per seed (a seed's own offset, shared by its
four cells, cancels) with its t interval, one-sample t-test, TOST (Schuirmann 1987) and verdict,
Holm-adjusted over the family. A seed without all four final values is left out of that contrast,
and the ``left out`` column says why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from ablate.analysis import stats
from ablate.analysis.comparison import margin_for
from ablate.analysis.job import Job, canonical, higher_is_better
from ablate.analysis.markdown import fmt, format_ci, format_p
from ablate.analysis.runs import Sweep
from ablate.analysis.specs import parse_baseline, where
from ablate.analysis.tables import pick_metric

FAMILIES = ("call", "table")
NO_INTERACTION = "no interaction within"


class DesignError(ValueError):
    """An ``--interaction`` the sweep cannot answer: a usage error naming the axis and its values."""


@dataclass(frozen=True)
class Factor:
    """One axis of the 2 x 2 design and its two levels (canonical values, in the order given)."""

    axis: str  # the config key, e.g. optim.warmup_steps
    name: str  # as labels show it, e.g. warmup_steps
    levels: tuple[str, str]


@dataclass(frozen=True)
class Interaction:
    """A 2 x 2 design on the seeds run in all four cells: the cell means, the simple effects of B
    within a1 and a2 (paired :func:`~ablate.analysis.stats.compare`, unadjusted), and the per-seed
    contrast's mean ``delta``, t interval (df = n - 1), two-sided p and, with a margin, TOST p."""

    seeds: tuple[int, ...]  # the seeds the contrast rests on: a finite value in every cell
    left_out: tuple[int, ...]  # seeds given with a non-finite value in some cell (e.g. diverged)
    means: tuple[float, ...]  # the four cell means over ``seeds``: a1b1, a1b2, a2b1, a2b2
    within_a1: stats.Comparison
    within_a2: stats.Comparison
    delta: float
    low: float
    high: float
    p: float
    se: float
    df: float
    margin: float = math.nan  # δ of the TOST (NaN: none)
    p_tost: float = math.nan

    @property
    def n(self) -> int:
        return len(self.seeds)

    @property
    def tested(self) -> bool:
        return math.isfinite(self.p)


@dataclass(frozen=True)
class Contrast:
    """The interaction of one slice for one metric, and which seeds it left out, and why."""

    metric: str
    slice: str
    result: Interaction
    left_out: str


# ----------------------------------------------------------------------------- the design


def axis_values(sweep: Sweep) -> dict[str, list[str]]:
    """Each axis of ``sweep`` and its values, in the order the jobs ran."""
    values: dict[str, list[str]] = {axis: [] for axis in sweep.axes}
    for job in sweep.jobs:
        for axis, found in values.items():
            value = job.value(axis)
            if value is not None and value not in found:
                found.append(value)
    return values


def _axes_text(sweep: Sweep) -> str:
    names = sweep.short_names()
    listed = "; ".join(f"{names[a]}: {', '.join(v)}" for a, v in axis_values(sweep).items())
    return f"the axes of {sweep.source} and their values: {listed or 'none (nothing varies)'}"


def parse_factor(sweep: Sweep, spec: str) -> Factor:
    """``"norm=post,pre"`` -> the axis and its two levels, or a :class:`DesignError`."""
    key, sep, text = (part.strip() for part in spec.partition("="))
    names = sweep.short_names()
    axis = sweep.full_name(key)
    if not sep or axis not in sweep.axes:
        raise DesignError(f"--interaction {spec}: {key or spec!r} is not an axis of the sweep; {_axes_text(sweep)}")
    valid = axis_values(sweep)[axis]
    levels = [canonical(v) for v in text.split(",") if v.strip()]
    if len(levels) != 2 or levels[0] == levels[1]:
        raise DesignError(
            f"--interaction {spec}: a 2 x 2 contrast needs exactly two levels of {names[axis]}, "
            f"got {len(set(levels))}; its values: {', '.join(valid)}"
        )
    unknown = [level for level in levels if level not in valid]
    if unknown:
        raise DesignError(
            f"--interaction {spec}: no job of {sweep.source} has {names[axis]}={', '.join(unknown)}; "
            f"its values: {', '.join(valid)}"
        )
    return Factor(axis, names[axis], (levels[0], levels[1]))


def parse_design(sweep: Sweep, specs: Sequence[str], wheres: Sequence[str | None] = (None,)) -> tuple[Factor, Factor]:
    """The two factors of ``--interaction A --interaction B``, checked against the sweep."""
    if len(specs) != 2:
        raise DesignError(f"--interaction: give exactly two axes (got {len(specs)}); {_axes_text(sweep)}")
    a, b = (parse_factor(sweep, spec) for spec in specs)
    if a.axis == b.axis:
        raise DesignError(f"--interaction: {a.name} is named twice; the second must be another axis")
    for spec in wheres:
        fixed = {sweep.full_name(k) for k in parse_baseline(spec)} if spec else set()
        if fixed & {a.axis, b.axis}:
            raise DesignError(f"--where {spec} fixes an --interaction axis: the contrast needs both of its levels")
    return a, b


def set_per_cell(jobs: Sequence[Job], factors: tuple[Factor, Factor], axis: str) -> bool:
    """Whether ``axis`` varies but every cell of A x B has one value of it (a ``tune=lr`` sweep's rate):
    slicing on it would leave every slice with one cell."""
    a, b = factors
    per_cell: dict[tuple[str | None, str | None], set[str | None]] = {}
    for job in jobs:
        per_cell.setdefault((job.value(a.axis), job.value(b.axis)), set()).add(job.value(axis))
    values = set().union(*per_cell.values()) if per_cell else set()
    return len(values) > 1 and all(len(v) == 1 for v in per_cell.values())


def slices(sweep: Sweep, factors: tuple[Factor, Factor], wheres: Sequence[str | None]) -> list[tuple[str, list[Job]]]:
    """``(label, jobs)`` per slice: each ``--where`` split by the other axes' values."""
    out = []
    names = sweep.short_names()
    for spec in wheres:
        part = where(sweep, spec) if spec else sweep
        rest = [axis for axis in part.axes if axis not in {f.axis for f in factors}]
        per_cell = [axis for axis in rest if set_per_cell(part.jobs, factors, axis)]
        others = [axis for axis in rest if axis not in per_cell]
        groups: dict[tuple, list[Job]] = {}
        for job in part.jobs:  # in run order
            groups.setdefault(tuple(job.value(axis) for axis in others), []).append(job)
        for key, jobs in groups.items():
            words = ([spec] if spec else []) + [f"{names.get(a, a)}={v}" for a, v in zip(others, key)]
            words += [f"{names.get(a, a)} set per cell" for a in per_cell]
            out.append((", ".join(words) or "all jobs", jobs))
    return out


# ----------------------------------------------------------------------------- the contrasts


def interaction_contrasts(a1b1: np.ndarray, a1b2: np.ndarray, a2b1: np.ndarray, a2b2: np.ndarray) -> np.ndarray:
    """Per seed (elementwise): (a1b1 - a1b2) - (a2b1 - a2b2)."""
    return (a1b1 - a1b2) - (a2b1 - a2b2)


def contrast_test(contrasts: np.ndarray, margin: float | None = None) -> tuple[Any, np.ndarray | float]:
    """``ttest_1samp`` of per-seed contrasts against 0 and, with a ``margin``, the TOST p of |mean| < δ."""
    result = scipy_stats.ttest_1samp(contrasts, 0.0, axis=-1)
    if margin is None:
        return result, math.nan
    lower = scipy_stats.ttest_1samp(contrasts, -margin, axis=-1, alternative="greater").pvalue
    upper = scipy_stats.ttest_1samp(contrasts, margin, axis=-1, alternative="less").pvalue
    p_tost = np.maximum(lower, upper)
    return result, float(p_tost) if np.ndim(p_tost) == 0 else p_tost


def interaction(
    a1b1: Sequence[float],
    a1b2: Sequence[float],
    a2b1: Sequence[float],
    a2b2: Sequence[float],
    seeds: Sequence[int],
    margin: float | None = None,
) -> Interaction:
    """The contrast of four cells given per seed (a seed non-finite in any cell left out)."""
    if margin is not None and not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin {margin!r}: the smallest difference of interest must be a positive number")
    if any(len(cell) != len(seeds) for cell in (a1b1, a1b2, a2b1, a2b2)):
        raise ValueError(f"each cell needs one value per seed ({len(seeds)} seeds)")
    values = np.array([a1b1, a1b2, a2b1, a2b2], dtype=float).reshape(4, len(seeds))  # (4, 0) without seeds
    kept = np.isfinite(values).all(axis=0)
    used = tuple(int(s) for s, k in zip(seeds, kept) if k)
    values = values[:, kept]
    contrasts = interaction_contrasts(*values)
    se = float(contrasts.std(ddof=1) / math.sqrt(len(contrasts))) if len(contrasts) >= 2 else math.nan
    low = high = p = df = p_tost = math.nan
    if len(contrasts) >= 2 and not se > 1e-12 * np.abs(values).max():  # identical contrasts up to rounding
        se = 0.0  # t is undefined: untested, as compare() does
    elif len(contrasts) >= 2:
        result, equivalence = contrast_test(contrasts, margin)
        ci = result.confidence_interval(stats.CONFIDENCE)
        low, high, p_tost = float(ci.low), float(ci.high), float(equivalence)
        p, df = float(result.pvalue), float(result.df)
    left_out = tuple(int(s) for s, k in zip(seeds, kept) if not k)
    means = tuple(float(c.mean()) if len(c) else math.nan for c in values)
    within_a1 = stats.compare(list(values[0]), list(values[1]), used, used)
    within_a2 = stats.compare(list(values[2]), list(values[3]), used, used)
    delta = float(contrasts.mean()) if len(contrasts) else math.nan
    delta_margin = math.nan if margin is None else float(margin)
    return Interaction(used, left_out, means, within_a1, within_a2, delta, low, high, p, se, df, delta_margin, p_tost)


def interaction_verdict(
    result: Interaction, p_adjusted: float, p_tost_adjusted: float = math.nan, alpha: float = stats.ALPHA
) -> str:
    """The verdict on a contrast from its family-adjusted p-values, as :func:`~ablate.analysis.stats.verdict`."""
    given = result.n + len(result.left_out)
    note = f"left out {len(result.left_out)}/{given}" if result.left_out else ""
    if not result.tested:
        why = "no seed spread" if result.se == 0 else f"n = {result.n} < 2"
        return f"not tested ({why}" + (f"; {note})" if note else ")")
    if p_tost_adjusted < alpha:
        word = f"{NO_INTERACTION} ±{result.margin:g}"
    elif p_adjusted < alpha:
        word = "interaction"
    else:
        word = stats.INCONCLUSIVE
    return word + (f" ({note})" if note else "")


def cells(factors: tuple[Factor, Factor]) -> list[tuple[str, str]]:
    """The four cells in the order of :func:`interaction`: a1b1, a1b2, a2b1, a2b2."""
    a, b = factors
    return [(x, y) for x in a.levels for y in b.levels]


def cell_label(factors: tuple[Factor, Factor], cell: tuple[str, str]) -> str:
    return f"{factors[0].name}={cell[0]}, {factors[1].name}={cell[1]}"


def final_value(job: Job, metric: str) -> float:
    """The job's final ``metric`` if it completed, else NaN (a diverged job's predates the divergence)."""
    return job.final(metric) if job.status == "completed" else math.nan


def contrast(
    jobs: list[Job], factors: tuple[Factor, Factor], metric: str, label: str, margin: float | None
) -> Contrast:
    """One slice's contrast on the seeds run in all four cells, with why each other seed is left out."""
    a, b = factors
    by_cell: dict[tuple[str, str], dict[int, Job]] = {cell: {} for cell in cells(factors)}
    for job in jobs:  # in run order: a later job of the same cell and seed replaces an earlier one
        for cell, runs_of_cell in by_cell.items():
            if (job.value(a.axis), job.value(b.axis)) == cell and job.seed is not None:
                runs_of_cell[job.seed] = job
    runs = list(by_cell.values())
    seeds = sorted(set.intersection(*(set(r) for r in runs)))
    a1b1, a1b2, a2b1, a2b2 = ([final_value(r[s], metric) for s in seeds] for r in runs)
    result = interaction(a1b1, a1b2, a2b1, a2b2, seeds, margin)
    reasons: dict[str, list[int]] = {}  # why -> the seeds left out for that reason
    for seed in result.left_out:
        bad = [(cell, r[seed]) for cell, r in by_cell.items() if not math.isfinite(final_value(r[seed], metric))]
        reasons.setdefault("; ".join(f"{cell_label(factors, c)}: {_why(job)}" for c, job in bad), []).append(seed)
    for seed in sorted(set().union(*runs) - set(seeds)):
        why = "; ".join(f"no job at {cell_label(factors, c)}" for c, r in by_cell.items() if seed not in r)
        reasons.setdefault(why, []).append(seed)
    left_out = ", ".join(f"{', '.join(map(str, group))} ({why})" for why, group in reasons.items())
    return Contrast(metric, label, result, left_out)


def _why(job: Job) -> str:
    return job.status if job.status != "completed" else "no finite value"


def family_adjusted(contrasts: list[Contrast], family: str = "call") -> tuple[np.ndarray, np.ndarray]:
    """Holm-adjusted p of the tests and of the TOSTs (each its own family), per call or per metric."""
    if family not in FAMILIES:
        raise ValueError(f"family {family!r}: use one of {', '.join(FAMILIES)}")
    p = np.array([c.result.p for c in contrasts], dtype=float)
    p_tost = np.array([c.result.p_tost for c in contrasts], dtype=float)
    groups = [c.metric if family == "table" else "" for c in contrasts]
    p_holm, p_tost_holm = np.full(len(p), np.nan), np.full(len(p), np.nan)
    for group in dict.fromkeys(groups):
        members = np.array([g == group for g in groups])
        p_holm[members], p_tost_holm[members] = stats.holm(p[members]), stats.holm(p_tost[members])
    return p_holm, p_tost_holm


def interaction_table(
    sweep: Sweep,
    specs: Sequence[str],
    metrics: Sequence[str | None] = (None,),
    wheres: Sequence[str | None] = (None,),
    margin: float | None = None,
    family: str = "call",
    alpha: float = stats.ALPHA,
) -> pd.DataFrame:
    """One row per (metric, slice) as numbers (``interaction.csv``); ``margin``: δ of the TOST."""
    factors = parse_design(sweep, specs, wheres)
    picked = [pick_metric(sweep, metric) for metric in metrics]
    margins = {metric: margin_for(sweep, metric, margin) for metric in picked}
    parts = slices(sweep, factors, wheres)
    contrasts = [contrast(jobs, factors, m, label, margins[m]) for m in picked for label, jobs in parts]
    p_holm, p_tost_holm = family_adjusted(contrasts, family)
    rows = [_row(c, factors, p, q, alpha) for c, p, q in zip(contrasts, p_holm, p_tost_holm)]
    frame = pd.DataFrame(rows)
    tested = int(np.isfinite(frame["p"].to_numpy(dtype=float)).sum())
    frame.attrs.update(factors=factors, alpha=alpha, family=family, source=sweep.source, tested=tested)
    return frame


def effect_name(factors: tuple[Factor, Factor], level: str) -> str:
    """``warmup_steps 0-30 | norm=post``: the simple effect of B within one level of A."""
    a, b = factors
    return f"{b.name} {b.levels[0]}-{b.levels[1]} | {a.name}={level}"


def _row(c: Contrast, factors: tuple[Factor, Factor], p_holm: float, p_tost_holm: float, alpha: float) -> dict:
    r = c.result
    row: dict[str, object] = {
        "metric": c.metric,
        "split": c.metric.split("/", 1)[0] if "/" in c.metric else "",
        "slice": c.slice,
        "seeds": ",".join(str(s) for s in r.seeds),
        "n": r.n,
        "left_out": c.left_out,
    }
    row.update({f"mean {cell_label(factors, cell)}": m for cell, m in zip(cells(factors), r.means)})
    for level, effect in zip(factors[0].levels, (r.within_a1, r.within_a2)):
        name = effect_name(factors, level)
        row.update({name: effect.diff, f"{name} ci_low": effect.low, f"{name} ci_high": effect.high})
        row[f"{name} p"] = effect.p
    row.update(interaction=r.delta, interaction_ci_low=r.low, interaction_ci_high=r.high, se=r.se, df=r.df)
    row.update(p=r.p, p_holm=p_holm, margin=r.margin, p_tost=r.p_tost, p_tost_holm=p_tost_holm)
    row["verdict"] = interaction_verdict(r, p_holm, p_tost_holm, alpha)
    return row


# ----------------------------------------------------------------------------- Markdown


def interaction_markdown(frame: pd.DataFrame) -> str:
    """One Markdown table per metric (a row per slice), each followed by its notes."""
    tables = [_metric_table(frame[frame["metric"] == m], frame.attrs) for m in dict.fromkeys(frame["metric"])]
    return "\n".join(tables)


def _metric_table(rows: pd.DataFrame, attrs: dict) -> str:
    factors = attrs["factors"]
    margin = rows["margin"].iloc[0]
    has_margin, left_out = bool(np.isfinite(margin)), bool(rows["left_out"].astype(bool).any())
    a, b = factors
    effect = f"Δ {b.name} {b.levels[0]}−{b.levels[1]}"
    header = ["metric", "split", "slice", "seeds", "n", *(["left out"] if left_out else [])]
    header += [cell_label(factors, cell) for cell in cells(factors)]
    for level in a.levels:
        header += [f"{effect} in {a.name}={level} [95% CI]", "p"]
    header += ["Δ_int [95% CI]", "p", "p (Holm)"]
    header += [f"p no interaction ±{margin:g} (Holm)"] if has_margin else []
    header += ["verdict"]
    left = {"metric", "split", "slice", "seeds", "left out", "verdict"}
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " if h in left else " ---: " for h in header) + "|"]
    for _, row in rows.iterrows():
        texts = [row["metric"], row["split"], row["slice"], row["seeds"] or "—", str(int(row["n"]))]
        texts += [row["left_out"] or "—"] if left_out else []
        texts += [fmt(row[f"mean {cell_label(factors, cell)}"]) for cell in cells(factors)]
        for level in a.levels:
            name = effect_name(factors, level)
            texts += [_with_ci(row, name, f"{name} ci_low", f"{name} ci_high"), format_p(row[f"{name} p"])]
        texts += [_with_ci(row, "interaction", "interaction_ci_low", "interaction_ci_high"), format_p(row["p"])]
        texts += [format_p(row["p_holm"])]
        texts += [format_p(row["p_tost_holm"])] if has_margin else []
        texts.append(row["verdict"])
        lines.append("| " + " | ".join(texts) + " |")
    return "\n".join(lines) + "\n\n" + _legend(rows, attrs)


def _with_ci(row: pd.Series, value: str, low: str, high: str) -> str:
    """``-0.46 [-1.02, 0.099]``; ``—`` without a value, the value alone without an interval."""
    if pd.isna(row[value]):
        return "—"
    return fmt(row[value]) + ("" if pd.isna(row[low]) else f" {format_ci(row[low], row[high])}")


def _legend(rows: pd.DataFrame, attrs: dict) -> str:
    a, b = attrs["factors"]
    metric, margin, alpha = rows["metric"].iloc[0], rows["margin"].iloc[0], attrs["alpha"]
    cell = [cell_label(attrs["factors"], c) for c in cells(attrs["factors"])]
    if attrs["family"] == "table":
        family = f"the {int(np.isfinite(rows['p'].to_numpy(dtype=float)).sum())} contrasts of this table"
    else:
        family = f"the {attrs['tested']} interaction contrasts of this call"
    notes = [
        f"Sweep: {attrs['source']}. Cells: the final {metric}{_direction(metric)} of each job that completed, mean "
        "over the seeds of the contrast (seeds: a finite value in all four cells; n of them).",
        f"Δ {b.name} {b.levels[0]}−{b.levels[1]} in {a.name}=…: the simple effect y[{b.name}={b.levels[0]}] − "
        f"y[{b.name}={b.levels[1]}] within that level, paired t-test on the same seeds (95% CI, p unadjusted: "
        "it describes the contrast, it is not tested in the family).",
        f"Δ_int = ({cell[0]} − {cell[1]}) − ({cell[2]} − {cell[3]}) per seed: the difference of the two simple "
        f"effects (equally, of the {a.name} effects within each {b.name}); its mean, 95% t interval (df = n − 1) and "
        f"the two-sided p of the one-sample t-test of the per-seed contrasts. p (Holm): over {family} (Holm 1979); "
        f"verdicts at alpha = {alpha:g}.",
    ]
    if np.isfinite(margin):
        notes.append(
            f"p no interaction ±{margin:g}: TOST (two one-sided t-tests) of |Δ_int| < {margin:g}, the smallest "
            "difference of interest, Holm over the same family."
        )
    notes.append(
        "interaction: p (Holm) < alpha (the interval excludes 0); "
        + (f"no interaction within ±{margin:g}: p no interaction (Holm) < alpha; " if np.isfinite(margin) else "")
        + "inconclusive: neither"
        + ("" if np.isfinite(margin) else " (--margin δ, or analysis.margin in the experiment config, adds the TOST)")
        + '. Inconclusive is not "no interaction": the data are compatible with the whole Δ_int 95% CI.'
    )
    if rows["left_out"].astype(bool).any():
        notes.append(
            "left out: seeds run in some cell with no final value there (diverged, crashed, still running) or not run "
            "in every cell; a contrast needs all four values, so n counts the others."
        )
    return "\n".join(notes) + "\n"


def _direction(metric: str) -> str:
    """`` (lower is better)``; nothing for a metric no task declared (the contrast needs no direction)."""
    try:
        return f" ({'higher' if higher_is_better(metric) else 'lower'} is better)"
    except ValueError:  # metrics.UndeclaredMetricError
        return ""
