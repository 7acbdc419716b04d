"""Figures of a sweep (PNG, matplotlib's Agg canvas; no display needed).

Every figure draws one colour per variant (named by its axes, ``norm=post, lr=0.001``), the same
colour in every figure, and aggregates seeds: a line for the mean and, with several seeds, a
band of ± 1 standard deviation. What each figure shows:

* ``val_curves.png``: validation metrics against the optimiser step (or training tokens or
  time: ``x``, :func:`~ablate.analysis.series.job_x`);
* ``lr_loss_warmup.png``: learning rate and training loss against the step, the warmup shaded
  (Post-LN needs the warmup, Xiong et al. 2020, Sec. 3). The learning rate is drawn at every
  step, recomputed from each job's ``optim`` config (:func:`~ablate.analysis.series.lr_schedule`),
  with the logged ``train/lr`` (every ``trainer.log_every_n_steps``) as dots on the line;
* ``grad_norm_depth.png``: per-layer gradient norm (all the layer's parameters, before clipping)
  against depth, at the first logged step (initialisation) and at the last one; Xiong et al.
  2020, Fig. 3, show it growing towards the output for Post-LN and flat for Pre-LN;
* ``grad_norm_heatmap.png``: the same per layer over training, one panel per variant, one colour
  scale for all panels; columns evenly spaced (:func:`uniform_steps`: the logging interval that
  covers most of the run, so the every-step logging of the warmup is thinned to it);
* ``resid_rms_depth.png``: the residual stream's RMS against depth (when ``resid_rms/...`` was
  logged);
* ``ppl_vs_length.png``: test perplexity against the evaluation length, the training length
  marked (when ``eval.seq_lens`` logged ``test/ppl@<len>``; Press et al. 2022, Fig. 1);
* ``metric_vs_<axis>.png`` and ``train_loss_by_<axis>.png``, for each numeric axis
  (``model.n_layers``, ``optim.lr``): the final metric against the axis, one line per value of
  the other axes, diverged and stuck jobs marked (log x when the values span 10x or more); and the
  training loss, one panel per axis value;
* ``loss_vs_lr.png`` (when ``optim.lr`` is a numeric axis): the learning-rate tuning curve, final
  ``val/loss`` against the learning rate (log x), one line per value of the other axes, mean ± 1
  std over seeds, diverged points marked and each line's best rate starred;
* ``paper_vs_ours.png`` (with a paper file): our metric per variant beside the paper's, in the
  paper's order, with Spearman's rank correlation;
* ``compute_multiplier.png`` (``scripts/compute_multiplier.py``): final loss against training
  compute per variant with its power-law fit and asymptote, and each variant's effective compute
  multiplier over the baseline drawn as the horizontal step to the baseline's curve.

``ppl_vs_length``, ``metric_vs_<axis>``, ``loss_vs_lr`` and ``paper_vs_ours`` also write the
numbers they draw (:mod:`~ablate.analysis.series`) beside the PNG as ``<name>.csv``.

Each ``*_figure`` function returns the :class:`~matplotlib.figure.Figure` (None when the sweep
logged nothing it could draw); :func:`plot_sweep` lists them with their file names
(:func:`sweep_plots`) and writes each one independently (:func:`write_plots`): a figure that
fails is reported with its reason and the others are still written.

Translation runs log ``grad_norm/enc_layer_XX/...`` and ``grad_norm/dec_layer_XX/...``: each
stack gets its own row of panels.
"""

from __future__ import annotations

import io
import math
import re
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter
from PIL import Image

from ablate.analysis.paper import PaperResults
from ablate.analysis.runs import Job, Sweep, shared_number
from ablate.analysis.scaling import Curve, Multiplier, PowerLaw
from ablate.analysis.series import (
    LR_METRIC,
    STUCK_METRIC,
    STUCK_TOLERANCE,
    X_AXES,
    axis_series,
    is_stuck,
    job_x,
    length_series,
    lr_matches_log,
    lr_schedule,
    numeric_axes,
    paper_rank_correlation,
    paper_series,
    trained_steps,
    training_length,
)
from ablate.analysis.tables import pick_metric

LAYER_METRIC = re.compile(
    r"^(?P<prefix>grad_norm|resid_rms)/(?P<stack>enc_|dec_)?layer_(?P<layer>\d+)(?:/(?P<part>.+))?$"
)
STACK_NAMES = {"": "decoder-only stack", "enc_": "encoder", "dec_": "decoder"}  # in drawing order
AXIS_LABELS = {
    "val/ppl": "perplexity (exp of mean NLL per token)",
    "val/loss": "cross-entropy (nats per token)",
    "val/bleu": "BLEU (sacreBLEU)",
    "test/ppl": "test perplexity",
    "test/loss": "test cross-entropy (nats per token)",
    "train/loss": "training loss (nats per token)",
    "train/lr": "learning rate",
}
METRIC_NAMES = {"ppl": "perplexity", "loss": "loss", "bleu": "BLEU"}
STEP_LABEL = "optimiser step"
X_LABELS = {"steps": STEP_LABEL, "tokens": "training tokens", "time": "training time (s, validation left out)"}
LR_AXIS = "lr"  # a numeric axis whose last component is this (optim.lr) gets loss_vs_lr.png
DPI = 100  # small files: some figures are kept in the repository's experiment folders


@dataclass
class Variant:
    """The jobs of one configuration, with the name and colour they have in every figure."""

    label: str
    jobs: list[Job]
    color: str

    @property
    def seeds_note(self) -> str:
        return f"{len(self.jobs)} seeds" if len(self.jobs) > 1 else "1 seed"


def variants(sweep: Sweep) -> list[Variant]:
    palette = [f"C{i}" for i in range(10)]
    return [Variant(sweep.label(k), jobs, palette[i % 10]) for i, (k, jobs) in enumerate(sweep.variants().items())]


def seed_mean(jobs: list[Job], metric: str) -> pd.DataFrame:
    """``mean``, ``std`` and ``n`` of ``metric`` over the jobs at every step any of them logged
    (non-finite values, e.g. after a divergence, left out)."""
    series = [j.series(metric).replace([np.inf, -np.inf], np.nan).dropna() for j in jobs]
    series = [s for s in series if len(s)]
    if not series:
        return pd.DataFrame(columns=["mean", "std", "n"])
    table = pd.concat(series, axis=1).sort_index()  # the union of the seeds' steps, in order (concat keeps first-seen)
    return pd.DataFrame({"mean": table.mean(axis=1), "std": table.std(axis=1, ddof=1), "n": table.count(axis=1)})


def wants_log(values: np.ndarray, ratio: float = 30.0) -> bool:
    """Log scale when positive values span more than ``ratio`` (e.g. perplexity from 60 to 1.5)."""
    values = values[np.isfinite(values)]
    return len(values) > 0 and values.min() > 0 and values.max() / values.min() > ratio


def _legend(ax, **kwargs) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", **kwargs)


class TableFigure(Figure):
    """A figure carrying the numbers it draws (``table``), written beside its PNG as ``<name>.csv``."""

    def __init__(self, *args, table: pd.DataFrame, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.table = table


def _save(fig: Figure, path: Path) -> Path:
    """PNG with a 256-colour palette: a third of the size of matplotlib's RGBA file and, for line
    plots and viridis heat maps (256 colours themselves), indistinguishable from it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    image = Image.open(buffer).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)
    return path


def variant_x(jobs: list[Job], steps, x: str) -> tuple[np.ndarray, set[str]]:
    """``steps`` as the x of a variant's curve: :func:`~ablate.analysis.series.job_x` averaged
    over its seeds (identical for steps and tokens; the seeds' times differ), and its sources."""
    pairs = [job_x(job, steps, x) for job in jobs]
    return np.nanmean(np.stack([values for values, _ in pairs]), axis=0), {source for _, source in pairs}


def x_label(x: str, sources: set[str]) -> str:
    if x == "steps":
        return STEP_LABEL
    return f"{X_LABELS[x]} ({'; '.join(sorted(sources))})" if sources else X_LABELS[x]


def plot_curves(ax, group: list[Variant], metric: str, x: str = "steps") -> set[str]:
    """Mean over seeds against the step (or ``x``: tokens, time), with a ± 1 std band where
    there are several seeds. Returns where the x values come from (for the axis label)."""
    everything, sources = [], set()
    for variant in group:
        stats = seed_mean(variant.jobs, metric)
        if stats.empty:
            continue
        xs, found = variant_x(variant.jobs, stats.index.to_numpy(), x)
        sources |= found
        ax.plot(
            xs,
            stats["mean"],
            color=variant.color,
            marker="o" if len(xs) < 30 else None,
            markersize=3,
            label=f"{variant.label} ({variant.seeds_note})",
        )
        if (stats["n"] > 1).any():
            ax.fill_between(
                xs,
                stats["mean"] - stats["std"].fillna(0),
                stats["mean"] + stats["std"].fillna(0),
                color=variant.color,
                alpha=0.2,
                linewidth=0,
            )
        everything.append(stats["mean"].to_numpy())
    if everything and wants_log(np.concatenate(everything)):
        ax.set_yscale("log")
    ax.set_xlabel(x_label(x, sources))
    ax.set_ylabel(AXIS_LABELS.get(metric, metric))
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
        ax.set_title("Validation " + METRIC_NAMES.get(metric.split("/", 1)[1], metric))
        _legend(ax)
    fig.suptitle("Validation curves (line: mean over seeds; band: ± 1 std)")
    return fig


def warmup_steps(jobs: list[Job]) -> int | None:
    steps = shared_number(jobs, "optim.warmup_steps")
    return None if steps is None else int(steps)


@dataclass
class LRCurve:
    """One variant's learning rate for the LR panel: the schedule its config gives (``x``, ``lr``;
    empty when it cannot be recomputed, with ``note`` saying why) and the logged points."""

    variant: Variant
    logged: list[tuple[np.ndarray, np.ndarray]]  # (x, train/lr) of each seed that logged it
    x: np.ndarray = field(default_factory=lambda: np.array([]))
    lr: np.ndarray = field(default_factory=lambda: np.array([]))
    note: str | None = None


def lr_curves(group: list[Variant], x: str = "steps") -> tuple[list[LRCurve], set[str]]:
    """Per variant: the learning rate at every step (:func:`~ablate.analysis.series.lr_schedule`
    of its longest-running seed; the seeds share the schedule) and the logged ``train/lr``
    points, both against ``x``. A variant whose config cannot be recomputed, or whose recomputed
    rate disagrees with what it logged, gets its logged points only, with the reason. Also
    returns where the x values come from."""
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
            ax.plot(
                xs,
                values,
                "o",
                color=variant.color,
                markersize=3.5,
                markeredgecolor="black",
                markeredgewidth=0.4,
                label=label,
            )
            label = None
            peaks.append(values.max())
    ax.plot([], [], "o", color="white", markeredgecolor="black", markersize=3.5, label=f"dots: logged {LR_METRIC}")
    top = np.array(peaks, dtype=float)
    if len(top) and top.min() > 0 and top.max() / top.min() >= 10:  # an LR sweep: rates of several decades
        ax.set_yscale("log")
    else:
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
    if notes:
        ax.text(
            0.01,
            0.01,
            "logged points only:\n" + "\n".join(notes),
            transform=ax.transAxes,
            fontsize="x-small",
            va="bottom",
            color="dimgrey",
        )
    ax.set_xlabel(x_label(x, sources))
    ax.set_ylabel(AXIS_LABELS[LR_METRIC])
    ax.grid(alpha=0.3)


def warmup_figure(sweep: Sweep, x: str = "steps") -> Figure | None:
    """Learning rate (every step, recomputed from the config, the logged points on it) and
    training loss against ``x``, the warmup shaded."""
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
        ax.set_title(
            {LR_METRIC: "Learning rate schedule (line: every step, from the config)", "train/loss": "Training loss"}[
                metric
            ],
            fontsize="medium",
        )
        _legend(ax)
    fig.suptitle("Learning rate and training loss through warmup")
    return fig


# ----------------------------------------------------------------------------- depth profiles


def layer_columns(columns: list[str], prefix: str) -> dict[tuple[str, str | None], dict[int, list[str]]]:
    """``{(stack, part): {layer: [columns]}}`` for the metrics ``<prefix>/<stack>layer_XX[/part]``."""
    found: dict[tuple[str, str | None], dict[int, list[str]]] = {}
    for col in columns:
        match = LAYER_METRIC.match(col)
        if match and match["prefix"] == prefix:
            part = None if prefix == "grad_norm" else match["part"]  # grad norms: all sub-layers of a layer together
            found.setdefault((match["stack"] or "", part), {}).setdefault(int(match["layer"]), []).append(col)
    return found


def root_sum_square(frame: pd.DataFrame) -> pd.Series:
    """The norm of a layer's whole gradient from its sub-layers' norms (disjoint parameter sets),
    NaN where none was logged."""
    return np.sqrt((frame**2).sum(axis=1, min_count=1))


def layer_table(job: Job, layers: dict[int, list[str]], combine: Callable[[pd.DataFrame], pd.Series]) -> pd.DataFrame:
    """Steps x layers (only the steps where every layer was logged)."""
    present = {layer: [c for c in cols if c in job.metrics] for layer, cols in layers.items()}
    table = pd.DataFrame({layer: combine(job.metrics[cols]) for layer, cols in sorted(present.items()) if cols})
    return table.replace([np.inf, -np.inf], np.nan).dropna(how="any")


def depth_profiles(jobs: list[Job], layers: dict[int, list[str]], combine) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Per-layer values at each job's first and last logged step, one row per job."""
    tables = [t for t in (layer_table(j, layers, combine) for j in jobs) if len(t)]
    first = pd.DataFrame([t.iloc[0] for t in tables])
    last = pd.DataFrame([t.iloc[-1] for t in tables])
    return first, last


def _profile(ax, variant: Variant, rows: pd.DataFrame) -> None:
    if rows.empty:
        return
    mean = rows.mean(axis=0)
    ax.plot(
        mean.index, mean.to_numpy(), marker="o", color=variant.color, label=f"{variant.label} ({variant.seeds_note})"
    )
    if len(rows) > 1:
        ax.fill_between(mean.index, rows.min(axis=0), rows.max(axis=0), color=variant.color, alpha=0.2, linewidth=0)


def depth_figure(
    sweep: Sweep, prefix: str, ylabel: str, title: str, combine: Callable[[pd.DataFrame], pd.Series]
) -> Figure | None:
    columns = sorted({c for j in sweep.jobs for c in j.metrics.columns})
    groups = layer_columns(columns, prefix)
    if not groups:
        return None
    group = variants(sweep)
    fig = Figure(figsize=(12, 4.2 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), 2, squeeze=False)
    ordered = sorted(groups.items(), key=lambda g: (list(STACK_NAMES).index(g[0][0]), g[0][1] or ""))
    for row, ((stack, part), layers) in zip(axes, ordered):
        where = STACK_NAMES[stack] + (f", {part}" if part else "")
        profiles = {v.label: depth_profiles(v.jobs, layers, combine) for v in group}
        panels = ((row[0], 0, "first logged step (initialisation)"), (row[1], 1, "last logged step (end of training)"))
        for ax, index, when in panels:
            for variant in group:
                _profile(ax, variant, profiles[variant.label][index])
            values = np.concatenate([p[index].to_numpy().ravel() for p in profiles.values()] or [np.array([])])
            if wants_log(values, ratio=10.0):
                ax.set_yscale("log")
            ax.set_title(f"{where}: {when}")
            ax.set_xlabel("layer (0 = nearest the input)")
            ax.set_ylabel(ylabel)
            ax.xaxis.get_major_locator().set_params(integer=True)
            ax.grid(alpha=0.3)
            _legend(ax)
    fig.suptitle(title + " (line: mean over seeds; band: seed range)")
    return fig


def grad_norm_depth_figure(sweep: Sweep) -> Figure | None:
    return depth_figure(
        sweep, "grad_norm", "gradient L2 norm of the layer (before clipping)", "Gradient norm by layer", root_sum_square
    )


def resid_rms_depth_figure(sweep: Sweep) -> Figure | None:
    return depth_figure(
        sweep,
        "resid_rms",
        "RMS of the residual stream",
        "Residual stream RMS by layer",
        lambda frame: frame.mean(axis=1, skipna=True),
    )


def uniform_steps(steps: np.ndarray) -> np.ndarray:
    """Evenly spaced steps from the first logged one to the last, ``g`` apart, ``g`` the gap
    between consecutive logged steps that covers most of the run (``grad_norm`` is logged at
    every step of the warmup, then every ``log.grad_norm_every_n_steps``: ``g`` is the latter
    once the run is longer than the warmup)."""
    steps = np.unique(np.asarray(steps, dtype=int))
    if len(steps) < 2:
        return steps
    gaps, counts = np.unique(np.diff(steps), return_counts=True)
    cover = gaps * counts
    gap = int(gaps[cover == cover.max()].max())  # a tie: the larger gap, the run's steady interval
    return np.arange(steps[0], steps[-1] + 1, gap)


def resample_steps(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (steps x layers) on :func:`uniform_steps`: each row is the value logged at that
    step, or the last one logged before it (with every-N logging the grid steps are logged steps)."""
    grid = uniform_steps(table.index.to_numpy())
    return table.sort_index().reindex(grid, method="ffill")


def grad_norm_heatmap(sweep: Sweep) -> Figure | None:
    """Layer gradient norm over steps x layers, one panel per variant and stack (mean over
    seeds), on evenly spaced steps (:func:`resample_steps`): every column is as wide as the
    others and shows a measured value."""
    columns = sorted({c for j in sweep.jobs for c in j.metrics.columns})
    groups = layer_columns(columns, "grad_norm")
    if not groups:
        return None
    group = variants(sweep)
    maps = {}
    for variant in group:
        for (stack, _), layers in groups.items():
            tables = [t for t in (layer_table(j, layers, root_sum_square) for j in variant.jobs) if len(t)]
            if tables:
                maps[variant.label, stack] = resample_steps(pd.concat(tables).groupby(level=0).mean())
    values = np.concatenate([m.to_numpy().ravel() for m in maps.values()] or [np.array([])])
    values = values[np.isfinite(values) & (values > 0)]
    if not len(values):
        return None
    norm = LogNorm(vmin=values.min(), vmax=values.max())
    stacks = [stack for stack in STACK_NAMES if any(stack == s for s, _ in groups)]
    cols = len(group) * len(stacks)
    n_cols = min(cols, 4)
    n_rows = math.ceil(cols / n_cols)
    fig = Figure(figsize=(4.5 * n_cols, 3.6 * n_rows), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, squeeze=False).ravel()
    mesh = None
    edges = {key: _edges(table.index.to_numpy()) for key, table in maps.items()}
    left, right = min(e[0] for e in edges.values()), max(e[-1] for e in edges.values())
    for ax, (variant, stack) in zip(axes, [(v, s) for v in group for s in stacks]):
        table = maps.get((variant.label, stack))
        title = variant.label + (f" ({STACK_NAMES[stack]})" if stack else "")
        ax.set_title(title, fontsize="medium")
        if table is None:
            ax.set_axis_off()
            continue
        steps, layers = table.index.to_numpy(), table.columns.to_numpy()
        mesh = ax.pcolormesh(edges[variant.label, stack], _edges(layers), table.to_numpy().T, norm=norm, cmap="viridis")
        ax.set_xlim(left, right)  # one step range for all panels: a run that stopped early shows where
        ax.set_facecolor("#e6e6e6")
        end = edges[variant.label, stack][-1]
        if (right - end) > 0.15 * (right - left):
            ax.text(
                (end + right) / 2,
                layers.mean(),
                f"no steps\nafter {int(steps[-1])}",
                ha="center",
                va="center",
                fontsize="small",
                color="dimgrey",
            )
        gap = int(steps[1] - steps[0]) if len(steps) > 1 else 1
        ax.set_xlabel(STEP_LABEL + (f" (a column every {gap} steps)" if gap > 1 else ""))
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("layer")
        ax.yaxis.get_major_locator().set_params(integer=True)
    for ax in axes[cols:]:
        ax.set_axis_off()
    if mesh is not None:
        fig.colorbar(mesh, ax=axes[:cols].tolist(), label="gradient L2 norm of the layer (log scale)")
    fig.suptitle("Gradient norm per layer over training (mean over seeds)")
    return fig


def _edges(centres: np.ndarray) -> np.ndarray:
    """Cell edges around sorted centres, halfway between neighbours (evenly spaced centres: equal cells)."""
    centres = centres.astype(float)
    if len(centres) == 1:
        return np.array([centres[0] - 0.5, centres[0] + 0.5])
    mid = (centres[:-1] + centres[1:]) / 2
    return np.concatenate([[centres[0] - (mid[0] - centres[0])], mid, [centres[-1] + (centres[-1] - mid[-1])]])


# ----------------------------------------------------------------------------- comparisons


def _band(ax, x, rows: pd.DataFrame, color: str) -> None:
    """The seed range (min..max) behind a mean line, where some point has several seeds."""
    if (rows["n"] > 1).any():
        ax.fill_between(x, rows["min"], rows["max"], color=color, alpha=0.2, linewidth=0)


def _seeds(rows: pd.DataFrame) -> str:
    n = int(rows["n"].max()) if len(rows) else 0
    return f"{n} seeds" if n != 1 else "1 seed"


def ppl_vs_length_figure(sweep: Sweep) -> TableFigure | None:
    """Test perplexity against the evaluation length, one line per variant (Press et al. 2022, Fig. 1)."""
    table = length_series(sweep)
    if table.empty:
        return None
    colors = {v.label: v.color for v in variants(sweep)}
    fig = TableFigure(figsize=(6.4, 4.4), layout="constrained", table=table)
    ax = fig.subplots()
    for label, rows in table.groupby("variant", sort=False):
        ax.plot(rows["length"], rows["mean"], marker="o", color=colors[label], label=f"{label} ({_seeds(rows)})")
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
    _legend(ax)
    return fig


def _axis_name(axis: str) -> str:
    return axis.rsplit(".", 1)[-1]


def _set_numeric_xaxis(ax, values: list[float], max_ticks: int = 8) -> None:
    """Log scale for values spanning 10x or more (base 2 for integers: layers, heads; base 10
    otherwise: learning rates), ticks at the values (``1e-4``, ``3e-4``, not only the decades)."""
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
    """Crosses along the top edge at the x of the points with a diverged or crashed seed (the
    ``line``-th line's a little lower, so that lines failing at the same x are all seen)."""
    failed = rows[rows["failed"] > 0]
    if len(failed):
        label = None if "failed" in marked else "diverged / crashed (no final value)"
        ax.plot(
            failed["x"],
            [0.96 - 0.045 * (line % 6)] * len(failed),
            "x",
            markersize=10,
            markeredgewidth=2,
            color=color,
            transform=ax.get_xaxis_transform(),
            label=label,
            clip_on=False,
        )
        marked.add("failed")


def metric_vs_axis_figure(sweep: Sweep, axis: str, metric: str) -> TableFigure | None:
    """The final ``metric`` against the numeric ``axis``, one line per value of the other axes.
    Stuck jobs (:func:`~ablate.analysis.series.is_stuck`) are circled at their value; diverged or
    crashed ones have no final value and are drawn as crosses along the top edge."""
    table = axis_series(sweep, axis, metric)
    if table["x"].nunique() < 2:
        return None
    fig = TableFigure(figsize=(6.4, 4.4), layout="constrained", table=table)
    ax = fig.subplots()
    marked: set[str] = set()
    for i, (line, rows) in enumerate(table.groupby("line", sort=False)):
        color, ok = f"C{i % 10}", rows[rows["n"] > 0]
        low, high = (ok["mean"] - ok["min"]).fillna(0), (ok["max"] - ok["mean"]).fillna(0)
        ax.errorbar(
            ok["x"], ok["mean"], yerr=[low, high], marker="o", color=color, capsize=3, label=f"{line} ({_seeds(rows)})"
        )  # a bar, not a band: a line may be a single point
        stuck = ok[ok["stuck"] > 0]
        if len(stuck):
            label = None if "stuck" in marked else f"stuck ({STUCK_METRIC} fell < {STUCK_TOLERANCE:.0%} over training)"
            ax.plot(
                stuck["x"],
                stuck["mean"],
                "o",
                markersize=13,
                markerfacecolor="none",
                markeredgecolor="black",
                label=label,
            )
            marked.add("stuck")
        _mark_failed(ax, rows, color, marked, i)
    if wants_log(table["mean"].to_numpy(dtype=float)):
        ax.set_yscale("log")
    _set_numeric_xaxis(ax, table["x"].tolist())
    ax.set_xlabel(axis)
    ax.set_ylabel(f"final {AXIS_LABELS.get(metric, metric)}")
    ax.set_title(f"Final {metric} against {_axis_name(axis)} (mean over seeds; bar: seed range)", fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax)
    return fig


def lr_axis(sweep: Sweep) -> str | None:
    """The numeric axis that is the learning rate (``optim.lr``), if the sweep varies it."""
    return next((axis for axis in numeric_axes(sweep) if _axis_name(axis) == LR_AXIS), None)


def loss_vs_lr_figure(sweep: Sweep, axis: str | None = None, metric: str = "val/loss") -> TableFigure | None:
    """The learning-rate tuning curve: final ``metric`` (``val/loss``) against the learning rate
    ``axis`` (default: :func:`lr_axis`), log x, one line per value of the other axes (variants
    of the architecture), mean ± 1 std over the completed seeds, diverged points as crosses along
    the top, each line's best rate starred."""
    axis = axis or lr_axis(sweep)
    if axis is None or not any(
        metric in job.metrics or metric in (job.record.get("metrics") or {}) for job in sweep.jobs
    ):
        return None
    table = axis_series(sweep, axis, metric)
    if table["x"].nunique() < 2:
        return None
    fig = TableFigure(figsize=(6.8, 4.6), layout="constrained", table=table)
    ax = fig.subplots()
    marked: set[str] = set()
    for i, (line, rows) in enumerate(table.groupby("line", sort=False)):
        color, ok = f"C{i % 10}", rows[rows["n"] > 0]
        ax.errorbar(
            ok["x"],
            ok["mean"],
            yerr=ok["std"].fillna(0),
            marker="o",
            color=color,
            capsize=3,
            label=f"{line} ({_seeds(rows)})",
        )
        if len(ok) > 1:  # a line with one completed rate has no "best"
            best = ok.loc[ok["mean"].idxmin()]
            ax.plot(
                [best["x"]],
                [best["mean"]],
                "*",
                markersize=15,
                color=color,
                markeredgecolor="black",
                label=None if "best" in marked else "best rate of each line",
            )
            marked.add("best")
        _mark_failed(ax, rows, color, marked, i)
    if wants_log(table["mean"].to_numpy(dtype=float)):
        ax.set_yscale("log")
    _set_numeric_xaxis(ax, table["x"].tolist())
    ax.set_xlabel(f"peak learning rate ({axis}" + (", log scale)" if ax.get_xscale() == "log" else ")"))
    ax.set_ylabel(f"final {AXIS_LABELS.get(metric, metric)}")
    ax.set_title(f"Learning-rate tuning: final {metric} (mean ± 1 std over seeds)", fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax)
    return fig


def train_loss_by_axis_figure(sweep: Sweep, axis: str, x: str = "steps") -> Figure | None:
    """Training loss against the step, one panel per value of ``axis``, one line per value of the
    other axes (the colours of ``metric_vs_<axis>.png``), stuck and diverged jobs named."""
    if not any("train/loss" in job.metrics for job in sweep.jobs):
        return None
    others, names = [a for a in sweep.axes if a != axis], sweep.short_names()
    panels: dict[float, list[Variant]] = {}
    colors: dict[str, str] = {}
    for key, jobs in sweep.variants().items():
        values = dict(zip(sweep.axes, key))
        line = ", ".join(f"{names[a]}={values[a]}" for a in others) or "all jobs"
        colors.setdefault(line, f"C{len(colors) % 10}")
        notes = [
            s
            for s, hit in (
                ("stuck", any(is_stuck(j) for j in jobs)),
                ("diverged", any(j.status == "diverged" for j in jobs)),
            )
            if hit
        ]
        label = line + (f": {', '.join(notes)}" if notes else "")
        # a numeric axis: every job has a value
        panels.setdefault(float(str(values[axis])), []).append(Variant(label, jobs, colors[line]))
    if len(panels) < 2:
        return None
    fig = Figure(figsize=(4.2 * len(panels), 3.8), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (value, group) in zip(axes, sorted(panels.items())):
        plot_curves(ax, group, "train/loss", x)
        ax.set_title(f"{_axis_name(axis)} = {value:g}")
        ax.label_outer()
        _legend(ax)
    fig.suptitle(f"Training loss by {axis} (line: mean over seeds; band: ± 1 std)")
    return fig


def paper_figure(sweep: Sweep, paper: PaperResults, metric: str, kind: str = "final") -> TableFigure:
    """Ours (left) and the paper's numbers (right) per variant, best paper value first, so the
    same order on both sides means the ranking is reproduced; Spearman's rho in the title."""
    table = paper_series(sweep, paper, metric, kind)
    rho = paper_rank_correlation(table)
    x = np.arange(len(table))
    names = [label.replace(", ", "\n") for label in table["variant"]]
    fig = TableFigure(figsize=(min(16.0, max(8.0, 1.6 * len(table))), 4.4), layout="constrained", table=table)
    ours, theirs = fig.subplots(1, 2)
    low, high = table["mean"] - table["min"], table["max"] - table["mean"]
    ours.errorbar(
        x,
        table["mean"],
        yerr=[low.fillna(0), high.fillna(0)],
        fmt="o",
        color="C0",
        capsize=4,
        label="mean (bar: seed range)",
    )
    for i, seeds in enumerate(table["seeds"]):
        ours.plot([i] * len(seeds), seeds, ".", color="black", markersize=4, label="seeds" if i == 0 else None)
    missing = x[table["n"].to_numpy() == 0]
    if len(missing):  # diverged or crashed everywhere: no value, but the paper's row is not silently dropped
        ours.plot(
            missing,
            [0.96] * len(missing),
            "x",
            color="C3",
            markersize=10,
            markeredgewidth=2,
            transform=ours.get_xaxis_transform(),
            label="no completed seed (diverged / crashed)",
        )
    ours.set_title(f"ours: {kind} {metric}")
    ours.set_ylabel(AXIS_LABELS.get(metric, metric))
    theirs.plot(x, table["paper"], "s", color="C1")
    theirs.set_title(f"paper: {paper.metric}")
    theirs.set_ylabel(paper.metric)
    for ax in (ours, theirs):
        ax.set_xticks(x, names, rotation=45 if len(table) > 4 else 0, fontsize="small")
        ax.set_xlabel("variant, in the paper's order (best first)")
        ax.grid(alpha=0.3)
    _legend(ours)
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
    """Final ``metric`` against training compute (log x): each seed as a dot, the fit of each
    curve as a line (dashed beyond the measured range) with its asymptote E dotted, and for each
    :class:`~ablate.analysis.scaling.Multiplier` a horizontal arrow from the variant's fitted loss
    at its largest compute to the compute the baseline needs for it."""
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
        ax.plot(
            grid[inside],
            fit.loss(grid[inside]),
            color=color,
            label=f"{curve.label}: E={fit.E:.3g}, A={fit.A:.3g}, α={fit.alpha:.3g}",
        )
        ax.plot(grid, fit.loss(grid), color=color, linestyle="--", linewidth=0.8)
        ax.axhline(fit.E, color=color, linestyle=":", linewidth=0.8)
    for r in results:
        end = r.compute * r.value if math.isfinite(r.value) else grid[-1]
        text = f"×{r.value:.3g}" if math.isfinite(r.value) else "×∞ (below the baseline's E)"
        ax.annotate(
            "",
            xy=(end, r.loss),
            xytext=(r.compute, r.loss),
            arrowprops={"arrowstyle": "->", "color": colors.get(r.variant, "black")},
        )
        ax.text(
            max(end, r.compute),
            r.loss,
            f" {r.variant}: {text}",
            fontsize="small",
            va="center",
            color=colors.get(r.variant, "black"),
        )
    ax.set_xscale("log")
    ax.set_xlabel(f"training compute (FLOPs: {compute_note})")
    ax.set_ylabel(f"final {AXIS_LABELS.get(metric, metric)}")
    ax.set_title(
        "Loss against compute: L = E + A C^-α per variant (dots: seeds; dotted: E; "
        "arrow: compute multiplier at the largest measured compute)",
        fontsize="small",
    )
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


# ----------------------------------------------------------------------------- writing


@dataclass(frozen=True)
class Plot:
    """One figure to write: its file name and how to draw it (None: nothing to draw)."""

    filename: str
    build: Callable[[], Figure | None]


@dataclass
class Written:
    """What :func:`write_plots` did: the files written, and the figures that failed with why."""

    paths: list[Path] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)  # (file name, reason)


def sweep_plots(sweep: Sweep, metric: str | None = None, x: str = "steps", grid: Sweep | None = None) -> list[Plot]:
    """Every figure of a sweep, not yet drawn. ``metric``: the one ``metric_vs_<axis>.png`` shows
    (default: ``val/ppl`` for LMs, ``val/bleu`` for translation); ``x``: the x of the curves
    (``steps``, ``tokens``, ``time``; :func:`~ablate.analysis.series.job_x`). ``grid``: a
    ``tune=lr`` sweep's every job, when ``sweep`` holds each variant at its tuned rate only: the
    tuning curve is drawn from it, and the tuned rate is not an axis of its own."""
    if x not in X_AXES:
        raise ValueError(f"x={x!r}: use one of {', '.join(X_AXES)}")
    plots = [
        Plot("val_curves.png", lambda: validation_figure(sweep, x)),
        Plot("lr_loss_warmup.png", lambda: warmup_figure(sweep, x)),
        Plot("grad_norm_depth.png", lambda: grad_norm_depth_figure(sweep)),
        Plot("grad_norm_heatmap.png", lambda: grad_norm_heatmap(sweep)),
        Plot("resid_rms_depth.png", lambda: resid_rms_depth_figure(sweep)),
        Plot("ppl_vs_length.png", lambda: ppl_vs_length_figure(sweep)),
    ]
    for axis in numeric_axes(sweep):
        name = _axis_name(axis)
        if grid is not None and name == LR_AXIS:
            continue
        plots.append(Plot(f"metric_vs_{name}.png", partial(_metric_vs_axis, sweep, axis, metric)))
        plots.append(Plot(f"train_loss_by_{name}.png", partial(train_loss_by_axis_figure, sweep, axis, x)))
    tuning = grid or sweep
    if (lr_key := lr_axis(tuning)) is not None:
        plots.append(Plot("loss_vs_lr.png", partial(loss_vs_lr_figure, tuning, lr_key)))
    return plots


def _metric_vs_axis(sweep: Sweep, axis: str, metric: str | None) -> Figure | None:
    # the metric is picked when the figure is drawn, so that a sweep without it fails this figure only
    return metric_vs_axis_figure(sweep, axis, pick_metric(sweep, metric))


def _reason(err: Exception) -> str:
    """``ValueError: <message>``; for an unexpected kind of error also where it was raised."""
    reason = f"{type(err).__name__}: {err}"
    if not isinstance(err, (ValueError, OSError)) and err.__traceback__ is not None:
        frame = traceback.extract_tb(err.__traceback__)[-1]
        reason += f" (at {Path(frame.filename).name}:{frame.lineno})"
    return reason


def write_plots(plots: list[Plot], out: str | Path, report: Callable[[str, str], None] | None = None) -> Written:
    """Draw and write each plot on its own: one that raises is recorded (and passed to
    ``report(filename, reason)``) and the next one is still drawn. A :class:`TableFigure` also
    writes its numbers as ``<name>.csv``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = Written()
    for plot in plots:
        try:
            fig = plot.build()
            if fig is None:
                continue
            path = out / plot.filename
            written.paths.append(_save(fig, path))
            if isinstance(fig, TableFigure):
                fig.table.to_csv(path.with_suffix(".csv"), index=False)
                written.paths.append(path.with_suffix(".csv"))
        except Exception as err:
            written.failures.append((plot.filename, _reason(err)))
            if report is not None:
                report(plot.filename, _reason(err))
    return written


def plot_sweep(
    sweep: Sweep,
    out: str | Path,
    metric: str | None = None,
    x: str = "steps",
    extra: list[Plot] | None = None,
    report: Callable[[str, str], None] | None = None,
    grid: Sweep | None = None,
) -> Written:
    """Write every figure that the sweep's logged metrics allow (and ``extra`` plots, e.g. the
    paper comparison), each independently (:func:`write_plots`); returns the files written (PNGs
    and the CSVs of the comparison figures) and the figures that failed. ``grid``: see
    :func:`sweep_plots`."""
    return write_plots([*(extra or []), *sweep_plots(sweep, metric, x, grid)], out, report)
