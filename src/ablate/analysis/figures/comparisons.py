"""Figures that compare final results: perplexity against evaluation length, a final metric
against a numeric axis, the learning-rate tuning curve, ours against a paper's numbers, and
loss against compute with the compute multiplier. Each carries the numbers it draws."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter

from ablate.analysis.figures.common import (
    LR_AXIS,
    TableFigure,
    add_legend,
    axis_name,
    save_png,
    seeds_text,
    variants,
    wants_log,
)
from ablate.analysis.paper import PaperResults
from ablate.analysis.power_law import PowerLaw
from ablate.analysis.runs import Sweep
from ablate.analysis.scaling import Curve, Multiplier
from ablate.analysis.series import (
    STUCK_METRIC,
    STUCK_TOLERANCE,
    axis_series,
    length_series,
    numeric_axes,
    paper_rank_correlation,
    paper_series,
    training_length,
)
from ablate.metrics import axis_label

CROSS = {"marker": "x", "linestyle": "none", "markersize": 10, "markeredgewidth": 2}  # a point with no value


def _band(ax, x, rows: pd.DataFrame, color: str) -> None:
    """The seed range (min..max) behind a mean line, where some point has several seeds."""
    if (rows["n"] > 1).any():
        ax.fill_between(x, rows["min"], rows["max"], color=color, alpha=0.2, linewidth=0)


def ppl_vs_length_figure(sweep: Sweep) -> TableFigure | None:
    """Test perplexity against the evaluation length, one line per variant (Press et al. 2022, Fig. 1)."""
    table = length_series(sweep)
    if table.empty:
        return None
    colors = {v.label: v.color for v in variants(sweep)}
    fig = TableFigure(figsize=(6.4, 4.4), layout="constrained", table=table)
    ax = fig.subplots()
    for label, rows in table.groupby("variant", sort=False):
        ax.plot(rows["length"], rows["mean"], marker="o", color=colors[label], label=f"{label} ({seeds_text(rows)})")
        _band(ax, rows["length"], rows, colors[label])
    train_len = training_length(sweep)
    if train_len:
        ax.axvline(train_len, color="grey", linestyle=":", label=f"training length L = {train_len}")
    lengths = sorted(table["length"].unique())
    ax.set_xscale("log", base=2)
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.minorticks_off()
    ax.set_yscale("log")  # one blown-up curve must not flatten the others
    for axis in (ax.yaxis.set_major_formatter, ax.yaxis.set_minor_formatter):
        axis(LogFormatter(labelOnlyBase=False))  # plain numbers (8, 20), not 2 x 10^1, on a range under a decade
    ax.set_xlabel("evaluation length (tokens; non-overlapping windows of the test split)")
    ax.set_ylabel("test perplexity (log scale)")
    ax.set_title("Perplexity against evaluation length (line: mean over seeds; band: seed range)", fontsize="medium")
    ax.grid(alpha=0.3, which="both")
    add_legend(ax)
    return fig


def _set_numeric_xaxis(ax, values: list[float], max_ticks: int = 8) -> None:
    """Log scale for values spanning 10x or more (base 2 for integers), ticks at the values."""
    values = sorted({v for v in values if math.isfinite(v)})
    if not values:
        return
    integers = all(v == int(v) for v in values)
    if values[0] > 0 and values[-1] / values[0] >= 10:
        ax.set_xscale("log", base=2 if integers else 10)
        ax.minorticks_off()
    if integers:
        ax.set_xticks(values, [str(int(v)) for v in values])
    elif len(values) <= max_ticks:
        ax.set_xticks(values, [f"{v:g}" for v in values])


def _mark_failed(ax, rows: pd.DataFrame, color: str, marked: set[str], line: int = 0) -> None:
    """Crosses along the top edge at the points with a failed seed, each line's a little lower."""
    failed = rows[rows["failed"] > 0]
    if len(failed):
        label = None if "failed" in marked else "diverged / crashed (no final value)"
        y = [0.96 - 0.045 * (line % 6)] * len(failed)
        ax.plot(failed["x"], y, color=color, transform=ax.get_xaxis_transform(), label=label, clip_on=False, **CROSS)
        marked.add("failed")


def _axis_lines(table: pd.DataFrame, figsize: tuple[float, float], yerr, mark) -> tuple[TableFigure, Any]:
    """One error-bar line per ``line`` of an :func:`axis_series` table, ``mark`` adding its markers."""
    fig = TableFigure(figsize=figsize, layout="constrained", table=table)
    ax = fig.subplots()
    marked: set[str] = set()
    for i, (line, rows) in enumerate(table.groupby("line", sort=False)):
        color, ok = f"C{i % 10}", rows[rows["n"] > 0]
        label = f"{line} ({seeds_text(rows)})"
        ax.errorbar(ok["x"], ok["mean"], yerr=yerr(ok), marker="o", color=color, capsize=3, label=label)
        mark(ax, ok, color, marked)
        _mark_failed(ax, rows, color, marked, i)
    if wants_log(table["mean"].to_numpy(dtype=float)):
        ax.set_yscale("log")
    _set_numeric_xaxis(ax, table["x"].tolist())
    return fig, ax


def metric_vs_axis_figure(sweep: Sweep, axis: str, metric: str) -> TableFigure | None:
    """The final ``metric`` against the numeric ``axis``, stuck jobs circled, failed ones crossed."""
    table = axis_series(sweep, axis, metric)
    if table["x"].nunique() < 2:
        return None

    def stuck(ax, ok: pd.DataFrame, color: str, marked: set[str]) -> None:
        rows = ok[ok["stuck"] > 0]
        if len(rows):
            label = None if "stuck" in marked else f"stuck ({STUCK_METRIC} fell < {STUCK_TOLERANCE:.0%} over training)"
            style = {"markersize": 13, "markerfacecolor": "none", "markeredgecolor": "black"}
            ax.plot(rows["x"], rows["mean"], "o", label=label, **style)
            marked.add("stuck")

    def seed_range(ok: pd.DataFrame) -> list:
        return [(ok["mean"] - ok["min"]).fillna(0), (ok["max"] - ok["mean"]).fillna(0)]

    fig, ax = _axis_lines(table, (6.4, 4.4), seed_range, stuck)
    ax.set_xlabel(axis)
    ax.set_ylabel(f"final {axis_label(metric)}")
    ax.set_title(f"Final {metric} against {axis_name(axis)} (mean over seeds; bar: seed range)", fontsize="medium")
    ax.grid(alpha=0.3)
    add_legend(ax)
    return fig


def lr_axis(sweep: Sweep) -> str | None:
    """The numeric axis that is the learning rate (``optim.lr``), if the sweep varies it."""
    return next((axis for axis in numeric_axes(sweep) if axis_name(axis) == LR_AXIS), None)


def loss_vs_lr_figure(sweep: Sweep, axis: str | None = None, metric: str = "val/loss") -> TableFigure | None:
    """The learning-rate tuning curve: final ``metric`` against the rate, each line's best starred."""
    axis = axis or lr_axis(sweep)
    if axis is None or not any(
        metric in job.metrics or metric in (job.record.get("metrics") or {}) for job in sweep.jobs
    ):
        return None
    table = axis_series(sweep, axis, metric)
    if table["x"].nunique() < 2:
        return None

    def best(ax, ok: pd.DataFrame, color: str, marked: set[str]) -> None:
        if len(ok) > 1:  # a line with one completed rate has no "best"
            row = ok.loc[ok["mean"].idxmin()]
            label = None if "best" in marked else "best rate of each line"
            ax.plot([row["x"]], [row["mean"]], "*", markersize=15, color=color, markeredgecolor="black", label=label)
            marked.add("best")

    fig, ax = _axis_lines(table, (6.8, 4.6), lambda ok: ok["std"].fillna(0), best)
    ax.set_xlabel(f"peak learning rate ({axis}" + (", log scale)" if ax.get_xscale() == "log" else ")"))
    ax.set_ylabel(f"final {axis_label(metric)}")
    ax.set_title(f"Learning-rate tuning: final {metric} (mean ± 1 std over seeds)", fontsize="medium")
    ax.grid(alpha=0.3)
    add_legend(ax)
    return fig


def paper_figure(sweep: Sweep, paper: PaperResults, metric: str, kind: str = "final") -> TableFigure:
    """Ours (left) and the paper's numbers (right) per variant, best paper value first; Spearman's rho."""
    table = paper_series(sweep, paper, metric, kind)
    rho = paper_rank_correlation(table)
    x = np.arange(len(table))
    names = [label.replace(", ", "\n") for label in table["variant"]]
    fig = TableFigure(figsize=(min(16.0, max(8.0, 1.6 * len(table))), 4.4), layout="constrained", table=table)
    ours, theirs = fig.subplots(1, 2)
    seed_range = [(table["mean"] - table["min"]).fillna(0), (table["max"] - table["mean"]).fillna(0)]
    ours.errorbar(x, table["mean"], yerr=seed_range, fmt="o", color="C0", capsize=4, label="mean (bar: seed range)")
    for i, seeds in enumerate(table["seeds"]):
        ours.plot([i] * len(seeds), seeds, ".", color="black", markersize=4, label="seeds" if i == 0 else None)
    missing = x[table["n"].to_numpy() == 0]
    if len(missing):  # diverged or crashed everywhere: no value, but the paper's row is not silently dropped
        label = "no completed seed (diverged / crashed)"
        ours.plot(
            missing, [0.96] * len(missing), color="C3", transform=ours.get_xaxis_transform(), label=label, **CROSS
        )
    ours.set_title(f"ours: {kind} {metric}")
    ours.set_ylabel(axis_label(metric))
    theirs.plot(x, table["paper"], "s", color="C1")
    theirs.set_title(f"paper: {paper.metric}")
    theirs.set_ylabel(paper.metric)
    for ax in (ours, theirs):
        ax.set_xticks(x, names, rotation=45 if len(table) > 4 else 0, fontsize="small")
        ax.set_xlabel("variant, in the paper's order (best first)")
        ax.grid(alpha=0.3)
    add_legend(ours)
    rho_text = "n/a" if math.isnan(rho) else f"{rho:.2f}"
    fig.suptitle(
        f"{paper.source or 'paper'} vs ours: Spearman rank correlation ρ = {rho_text} "
        f"({int(table['mean'].notna().sum())} variants)",
        fontsize="medium",
    )
    return fig


def compute_multiplier_figure(
    curves: list[Curve],
    fits: dict[str, PowerLaw],
    results: list[Multiplier],
    metric: str,
    compute_note: str,
    path: Path,
) -> Path:
    """Final ``metric`` against training compute: seeds as dots, each fit with its asymptote, and each
    multiplier as an arrow to the compute the baseline needs for the variant's loss."""
    fig = Figure(figsize=(7.2, 4.8), layout="constrained")
    ax = fig.subplots()
    colors = {c.label: f"C{i % 10}" for i, c in enumerate(curves)}
    reach = [r.compute * r.value for r in results if math.isfinite(r.value)]
    span = np.array([x for c in curves for x in c.compute] + reach, dtype=float)
    grid = np.geomspace(span.min() / 1.5, span.max() * 1.5, 200)
    for curve in curves:
        color, fit = colors[curve.label], fits.get(curve.label)
        ax.plot(curve.compute, curve.loss, ".", color=color, alpha=0.6)
        if fit is None:
            continue
        inside = (grid >= min(curve.compute)) & (grid <= max(curve.compute))
        label = f"{curve.label}: E={fit.E:.3g}, A={fit.A:.3g}, α={fit.alpha:.3g}"
        ax.plot(grid[inside], fit.loss(grid[inside]), color=color, label=label)
        ax.plot(grid, fit.loss(grid), color=color, linestyle="--", linewidth=0.8)
        ax.axhline(fit.E, color=color, linestyle=":", linewidth=0.8)
    for r in results:
        end = r.compute * r.value if math.isfinite(r.value) else grid[-1]
        text = f"×{r.value:.3g}" if math.isfinite(r.value) else "×∞ (below the baseline's E)"
        color = colors.get(r.variant, "black")
        ax.annotate("", xy=(end, r.loss), xytext=(r.compute, r.loss), arrowprops={"arrowstyle": "->", "color": color})
        ax.text(max(end, r.compute), r.loss, f" {r.variant}: {text}", fontsize="small", va="center", color=color)
    ax.set_xscale("log")
    ax.set_xlabel(f"training compute (FLOPs: {compute_note})")
    ax.set_ylabel(f"final {axis_label(metric)}")
    ax.set_title(
        "Loss against compute: L = E + A C^-α per variant (dots: seeds; dotted: E; "
        "arrow: compute multiplier at the largest measured compute)",
        fontsize="small",
    )
    ax.grid(alpha=0.3)
    add_legend(ax)
    return save_png(fig, path)
