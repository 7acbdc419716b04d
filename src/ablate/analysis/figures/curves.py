"""Figures of metrics against training progress: validation curves, learning rate and training
loss through the warmup, and the training loss with one panel per value of a numeric axis."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from matplotlib.figure import Figure

from ablate.analysis.figures.common import (
    Variant,
    add_legend,
    axis_name,
    seed_mean,
    variant_x,
    variants,
    wants_log,
    x_label,
)
from ablate.analysis.job import Job
from ablate.analysis.runs import Sweep, shared_number
from ablate.analysis.series import LR_METRIC, is_stuck, lr_matches_log, lr_schedule, trained_steps
from ablate.metrics import axis_label, find


def plot_curves(ax, group: list[Variant], metric: str, x: str = "steps") -> set[str]:
    """Mean over seeds against ``x`` with a ± 1 std band; returns where the x values come from."""
    everything, sources = [], set()
    for variant in group:
        stats = seed_mean(variant.jobs, metric)
        if stats.empty:
            continue
        xs, found = variant_x(variant.jobs, stats.index.to_numpy(), x)
        sources |= found
        marker = "o" if len(xs) < 30 else None
        label = f"{variant.label} ({variant.seeds_note})"
        ax.plot(xs, stats["mean"], color=variant.color, marker=marker, markersize=3, label=label)
        if (stats["n"] > 1).any():
            low, high = stats["mean"] - stats["std"].fillna(0), stats["mean"] + stats["std"].fillna(0)
            ax.fill_between(xs, low, high, color=variant.color, alpha=0.2, linewidth=0)
        everything.append(stats["mean"].to_numpy())
    if everything and wants_log(np.concatenate(everything)):
        ax.set_yscale("log")
    ax.set_xlabel(x_label(x, sources))
    ax.set_ylabel(axis_label(metric))
    ax.grid(alpha=0.3)
    return sources


def validation_figure(sweep: Sweep, x: str = "steps") -> Figure | None:
    group = variants(sweep)
    metrics = [m for m in ("val/bleu", "val/ppl", "val/loss") if any(m in j.metrics for j in sweep.jobs)]
    if not metrics:
        return None
    fig = Figure(figsize=(6 * len(metrics), 4.5), layout="constrained")
    for ax, metric in zip(fig.subplots(1, len(metrics), squeeze=False)[0], metrics):
        plot_curves(ax, group, metric, x)
        ax.set_title("Validation " + (found.label if (found := find(metric)) else metric))
        add_legend(ax)
    fig.suptitle("Validation curves (line: mean over seeds; band: ± 1 std)")
    return fig


def warmup_steps(jobs: list[Job]) -> int | None:
    steps = shared_number(jobs, "optim.warmup_steps")
    return None if steps is None else int(steps)


@dataclass
class LRCurve:
    """One variant's learning rate: the schedule its config gives (or why not) and the logged points."""

    variant: Variant
    logged: list[tuple[np.ndarray, np.ndarray]]  # (x, train/lr) of each seed that logged it
    x: np.ndarray = field(default_factory=lambda: np.array([]))
    lr: np.ndarray = field(default_factory=lambda: np.array([]))
    note: str | None = None


def lr_curves(group: list[Variant], x: str = "steps") -> tuple[list[LRCurve], set[str]]:
    """Per variant: the learning rate at every step (its longest seed's schedule) and the logged points
    (only those, with why, where the config disagrees with the log); and where x comes from."""
    curves, sources = [], set()
    for variant in group:
        logged = [j for j in variant.jobs if len(j.series(LR_METRIC))]
        # at the variant's x of each step (the seeds' mean time), so that the points sit on the line
        points = [
            (variant_x(variant.jobs, j.series(LR_METRIC).index, x), j.series(LR_METRIC).to_numpy()) for j in logged
        ]
        sources |= {source for (_, found), _ in points for source in found}
        curve = LRCurve(variant, [(xs, values) for (xs, _), values in points])
        try:
            longest = max(variant.jobs, key=trained_steps)
            schedule = lr_schedule(longest)
            if not all(lr_matches_log(j, lr_schedule(j)) for j in logged):
                raise ValueError(f"its config's schedule does not match the logged {LR_METRIC}")
            curve.x, found = variant_x(variant.jobs, schedule.index, x)
            curve.lr = schedule.to_numpy()
            sources |= found
        except ValueError as err:
            curve.note = str(err)
        if len(curve.lr) or curve.logged:
            curves.append(curve)
    return curves, sources


def _plot_lr(ax, group: list[Variant], x: str) -> None:
    dot = {"markersize": 3.5, "markeredgecolor": "black", "markeredgewidth": 0.4}
    notes = []
    peaks: list[float] = []
    curves, sources = lr_curves(group, x)
    for curve in curves:
        variant = curve.variant
        label: str | None = f"{variant.label} ({variant.seeds_note})"
        if len(curve.lr):
            ax.plot(curve.x, curve.lr, color=variant.color, label=label, linewidth=1.5)
            peaks.append(curve.lr.max())
            label = None
        else:
            notes.append(f"{variant.label}: {curve.note}")
        for xs, values in curve.logged:  # the logged values on the recomputed line
            ax.plot(xs, values, "o", color=variant.color, label=label, **dot)
            label = None
            peaks.append(values.max())
    ax.plot([], [], "o", color="white", markeredgecolor="black", markersize=3.5, label=f"dots: logged {LR_METRIC}")
    top = np.array(peaks, dtype=float)
    if len(top) and top.min() > 0 and top.max() / top.min() >= 10:  # an LR sweep: rates of several decades
        ax.set_yscale("log")
    else:
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    if notes:
        text = "logged points only:\n" + "\n".join(notes)
        ax.text(0.01, 0.01, text, transform=ax.transAxes, fontsize="x-small", va="bottom", color="dimgrey")
    ax.set_xlabel(x_label(x, sources))
    ax.set_ylabel(axis_label(LR_METRIC))
    ax.grid(alpha=0.3)


def warmup_figure(sweep: Sweep, x: str = "steps") -> Figure | None:
    """Learning rate (recomputed, the logged points on it) and training loss, the warmup shaded."""
    group = variants(sweep)
    metrics = [m for m in (LR_METRIC, "train/loss") if any(m in j.metrics for j in sweep.jobs)]
    if not metrics:
        return None
    fig = Figure(figsize=(6 * len(metrics), 4.5), layout="constrained")
    warmup = warmup_steps(sweep.jobs)
    last_step = max((int(j.metrics.index.max()) for j in sweep.jobs if len(j.metrics)), default=0)
    for ax, metric in zip(fig.subplots(1, len(metrics), squeeze=False)[0], metrics):
        if metric == LR_METRIC:
            _plot_lr(ax, group, x)
        else:
            plot_curves(ax, group, metric, x)
        if warmup:  # shaded up to where training went, so a short run's axis is not stretched to the warmup's end
            end = min(warmup, last_step + 1)
            left, right = (0.0, float(end)) if x == "steps" else (0.0, float(variant_x(sweep.jobs, [end - 1], x)[0][0]))
            ax.axvspan(left, right, color="grey", alpha=0.12, label=f"warmup ({warmup} steps)")
        titles = {
            LR_METRIC: "Learning rate schedule (line: every step, from the config)",
            "train/loss": "Training loss",
        }
        ax.set_title(titles[metric], fontsize="medium")
        add_legend(ax)
    fig.suptitle("Learning rate and training loss through warmup")
    return fig


def train_loss_by_axis_figure(sweep: Sweep, axis: str, x: str = "steps") -> Figure | None:
    """Training loss, one panel per value of ``axis``, a line per value of the other axes."""
    if not any("train/loss" in job.metrics for job in sweep.jobs):
        return None
    others, names = [a for a in sweep.axes if a != axis], sweep.short_names()
    panels: dict[float, list[Variant]] = {}
    colors: dict[str, str] = {}
    for key, jobs in sweep.variants().items():
        values = dict(zip(sweep.axes, key))
        line = ", ".join(f"{names[a]}={values[a]}" for a in others) or "all jobs"
        colors.setdefault(line, f"C{len(colors) % 10}")
        notes = ["stuck"] * any(is_stuck(j) for j in jobs) + ["diverged"] * any(j.status == "diverged" for j in jobs)
        label = line + (f": {', '.join(notes)}" if notes else "")
        # a numeric axis: every job has a value
        panels.setdefault(float(str(values[axis])), []).append(Variant(label, jobs, colors[line]))
    if len(panels) < 2:
        return None
    fig = Figure(figsize=(4.2 * len(panels), 3.8), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (value, group) in zip(axes, sorted(panels.items())):
        plot_curves(ax, group, "train/loss", x)
        ax.set_title(f"{axis_name(axis)} = {value:g}")
        ax.label_outer()
        add_legend(ax)
    fig.suptitle(f"Training loss by {axis} (line: mean over seeds; band: ± 1 std)")
    return fig
