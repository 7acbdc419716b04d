"""Figures of a sweep (PNG, matplotlib's Agg canvas; no display needed).

Every figure draws one colour per variant (named by its axes, ``norm=post, lr=0.001``), the same
colour in every figure, and aggregates seeds: a line for the mean and, with several seeds, a
band of ± 1 standard deviation. What each figure shows:

* ``val_curves.png``: validation metrics against the optimiser step;
* ``lr_loss_warmup.png``: learning rate and training loss against the step, the warmup shaded
  (Post-LN needs the warmup, Xiong et al. 2020, Sec. 3);
* ``grad_norm_depth.png``: per-layer gradient norm (all the layer's parameters, before clipping)
  against depth, at the first logged step (initialisation) and at the last one; Xiong et al.
  2020, Fig. 3, show it growing towards the output for Post-LN and flat for Pre-LN;
* ``grad_norm_heatmap.png``: the same per layer over all logged steps, one panel per variant,
  one colour scale for all panels;
* ``resid_rms_depth.png``: the residual stream's RMS against depth (when ``resid_rms/...`` was
  logged);
* ``ppl_vs_length.png``: test perplexity against the evaluation length, the training length
  marked (when ``eval.seq_lens`` logged ``test/ppl@<len>``; Press et al. 2022, Fig. 1);
* ``metric_vs_<axis>.png`` and ``train_loss_by_<axis>.png``, for each numeric axis
  (``model.n_layers``, ``optim.lr``): the final metric against the axis, one line per value of
  the other axes, diverged and stuck jobs marked; and the training loss, one panel per axis value;
* ``paper_vs_ours.png`` (with a paper file): our metric per variant beside the paper's, in the
  paper's order, with Spearman's rank correlation;
* ``compute_multiplier.png`` (``scripts/compute_multiplier.py``): final loss against training
  compute per variant with its power-law fit and asymptote, and each variant's effective compute
  multiplier over the baseline drawn as the horizontal step to the baseline's curve.

``ppl_vs_length``, ``metric_vs_<axis>`` and ``paper_vs_ours`` also write the numbers they draw
(:mod:`~ablate.analysis.series`) beside the PNG as ``<name>.csv``.

Translation runs log ``grad_norm/enc_layer_XX/...`` and ``grad_norm/dec_layer_XX/...``: each
stack gets its own row of panels.
"""

from __future__ import annotations

import io
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure
from matplotlib.ticker import LogFormatter
from PIL import Image

from ablate.analysis.paper import PaperResults
from ablate.analysis.runs import Job, Sweep
from ablate.analysis.scaling import Curve, Multiplier, PowerLaw
from ablate.analysis.series import (STUCK_METRIC, STUCK_TOLERANCE, axis_series, is_stuck, length_series, numeric_axes,
                                    paper_rank_correlation, paper_series, training_length)
from ablate.analysis.tables import pick_metric

LAYER_METRIC = re.compile(r"^(?P<prefix>grad_norm|resid_rms)/(?P<stack>enc_|dec_)?layer_(?P<layer>\d+)(?:/(?P<part>.+))?$")
STACK_NAMES = {"": "decoder-only stack", "enc_": "encoder", "dec_": "decoder"}  # in drawing order
AXIS_LABELS = {
    "val/ppl": "perplexity (exp of mean NLL per token)", "val/loss": "cross-entropy (nats per token)",
    "val/bleu": "BLEU (sacreBLEU)", "test/ppl": "test perplexity", "test/loss": "test cross-entropy (nats per token)",
    "train/loss": "training loss (nats per token)", "train/lr": "learning rate",
}
METRIC_NAMES = {"ppl": "perplexity", "loss": "loss", "bleu": "BLEU"}
STEP_LABEL = "optimiser step"
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
    table = pd.concat(series, axis=1)
    return pd.DataFrame({"mean": table.mean(axis=1), "std": table.std(axis=1, ddof=1), "n": table.count(axis=1)})


def wants_log(values: np.ndarray, ratio: float = 30.0) -> bool:
    """Log scale when positive values span more than ``ratio`` (e.g. perplexity from 60 to 1.5)."""
    values = values[np.isfinite(values)]
    return len(values) > 0 and values.min() > 0 and values.max() / values.min() > ratio


def _legend(ax, **kwargs) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", **kwargs)


def _save(fig: Figure, path: Path) -> Path:
    """PNG with a 256-colour palette: a third of the size of matplotlib's RGBA file and, for line
    plots and viridis heat maps (256 colours themselves), indistinguishable from it."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    image = Image.open(buffer).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)
    return path


def plot_curves(ax, group: list[Variant], metric: str) -> None:
    """Mean over seeds against the step, with a ± 1 std band where there are several seeds."""
    everything = []
    for variant in group:
        stats = seed_mean(variant.jobs, metric)
        if stats.empty:
            continue
        steps = stats.index.to_numpy()
        ax.plot(steps, stats["mean"], color=variant.color, marker="o" if len(steps) < 30 else None, markersize=3,
                label=f"{variant.label} ({variant.seeds_note})")
        if (stats["n"] > 1).any():
            ax.fill_between(steps, stats["mean"] - stats["std"].fillna(0), stats["mean"] + stats["std"].fillna(0),
                            color=variant.color, alpha=0.2, linewidth=0)
        everything.append(stats["mean"].to_numpy())
    if everything and wants_log(np.concatenate(everything)):
        ax.set_yscale("log")
    ax.set_xlabel(STEP_LABEL)
    ax.set_ylabel(AXIS_LABELS.get(metric, metric))
    ax.grid(alpha=0.3)


def validation_figure(sweep: Sweep, out: Path) -> Path | None:
    group = variants(sweep)
    metrics = [m for m in ("val/bleu", "val/ppl", "val/loss") if any(m in j.metrics for j in sweep.jobs)]
    if not metrics:
        return None
    fig = Figure(figsize=(6 * len(metrics), 4.5), layout="constrained")
    for ax, metric in zip(fig.subplots(1, len(metrics), squeeze=False)[0], metrics):
        plot_curves(ax, group, metric)
        ax.set_title("Validation " + METRIC_NAMES.get(metric.split("/", 1)[1], metric))
        _legend(ax)
    fig.suptitle("Validation curves (line: mean over seeds; band: ± 1 std)")
    return _save(fig, out / "val_curves.png")


def warmup_steps(jobs: list[Job]) -> int | None:
    values = {j.value("optim.warmup_steps") for j in jobs} - {None, "null"}
    return int(float(values.pop())) if len(values) == 1 else None


def warmup_figure(sweep: Sweep, out: Path) -> Path | None:
    group = variants(sweep)
    metrics = [m for m in ("train/lr", "train/loss") if any(m in j.metrics for j in sweep.jobs)]
    if not metrics:
        return None
    fig = Figure(figsize=(6 * len(metrics), 4.5), layout="constrained")
    warmup = warmup_steps(sweep.jobs)
    for ax, metric in zip(fig.subplots(1, len(metrics), squeeze=False)[0], metrics):
        plot_curves(ax, group, metric)
        last_step = max((int(j.metrics.index.max()) for j in sweep.jobs if len(j.metrics)), default=0)
        if warmup:  # shaded up to where training went, so a short run's axis is not stretched to the warmup's end
            ax.axvspan(0, min(warmup, last_step), color="grey", alpha=0.12, label=f"warmup ({warmup} steps)")
        if metric == "train/lr" and ax.get_yscale() == "linear":
            ax.ticklabel_format(axis="y", style="sci", scilimits=(-2, 3))
        ax.set_title({"train/lr": "Learning rate schedule", "train/loss": "Training loss"}[metric])
        _legend(ax)
    fig.suptitle("Learning rate and training loss through warmup")
    return _save(fig, out / "lr_loss_warmup.png")


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
    ax.plot(mean.index, mean.to_numpy(), marker="o", color=variant.color, label=f"{variant.label} ({variant.seeds_note})")
    if len(rows) > 1:
        ax.fill_between(mean.index, rows.min(axis=0), rows.max(axis=0), color=variant.color, alpha=0.2, linewidth=0)


def depth_figure(sweep: Sweep, out: Path, prefix: str, filename: str, ylabel: str, title: str,
                 combine: Callable[[pd.DataFrame], pd.Series]) -> Path | None:
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
    return _save(fig, out / filename)


def grad_norm_depth_figure(sweep: Sweep, out: Path) -> Path | None:
    return depth_figure(sweep, out, "grad_norm", "grad_norm_depth.png", "gradient L2 norm of the layer (before clipping)",
                        "Gradient norm by layer", root_sum_square)


def resid_rms_depth_figure(sweep: Sweep, out: Path) -> Path | None:
    return depth_figure(sweep, out, "resid_rms", "resid_rms_depth.png", "RMS of the residual stream",
                        "Residual stream RMS by layer", lambda frame: frame.mean(axis=1, skipna=True))


def grad_norm_heatmap(sweep: Sweep, out: Path) -> Path | None:
    """Layer gradient norm over steps x layers, one panel per variant and stack (mean over seeds)."""
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
                maps[variant.label, stack] = pd.concat(tables).groupby(level=0).mean()
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
    for ax, (variant, stack) in zip(axes, [(v, s) for v in group for s in stacks]):
        table = maps.get((variant.label, stack))
        title = variant.label + (f" ({STACK_NAMES[stack]})" if stack else "")
        ax.set_title(title, fontsize="medium")
        if table is None:
            ax.set_axis_off()
            continue
        steps, layers = table.index.to_numpy(), table.columns.to_numpy()
        mesh = ax.pcolormesh(_edges(steps), _edges(layers), table.to_numpy().T, norm=norm, cmap="viridis")
        ax.set_xlabel(STEP_LABEL)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("layer")
        ax.yaxis.get_major_locator().set_params(integer=True)
    for ax in axes[cols:]:
        ax.set_axis_off()
    if mesh is not None:
        fig.colorbar(mesh, ax=axes[:cols].tolist(), label="gradient L2 norm of the layer (log scale)")
    fig.suptitle("Gradient norm per layer over training (mean over seeds)")
    return _save(fig, out / "grad_norm_heatmap.png")


def _edges(centres: np.ndarray) -> np.ndarray:
    """Cell edges around sorted centres (unevenly spaced steps: dense during warmup, then sparse)."""
    centres = centres.astype(float)
    if len(centres) == 1:
        return np.array([centres[0] - 0.5, centres[0] + 0.5])
    mid = (centres[:-1] + centres[1:]) / 2
    return np.concatenate([[centres[0] - (mid[0] - centres[0])], mid, [centres[-1] + (centres[-1] - mid[-1])]])


# ----------------------------------------------------------------------------- comparisons


def _save_with_table(fig: Figure, table: pd.DataFrame, path: Path) -> list[Path]:
    """The figure and, beside it, the numbers it draws (``<name>.csv``)."""
    table.to_csv(path.with_suffix(".csv"), index=False)
    return [_save(fig, path), path.with_suffix(".csv")]


def _band(ax, x, rows: pd.DataFrame, color: str) -> None:
    """The seed range (min..max) behind a mean line, where some point has several seeds."""
    if (rows["n"] > 1).any():
        ax.fill_between(x, rows["min"], rows["max"], color=color, alpha=0.2, linewidth=0)


def _seeds(rows: pd.DataFrame) -> str:
    n = int(rows["n"].max()) if len(rows) else 0
    return f"{n} seeds" if n != 1 else "1 seed"


def ppl_vs_length_figure(sweep: Sweep, out: Path) -> list[Path] | None:
    """Test perplexity against the evaluation length, one line per variant (Press et al. 2022, Fig. 1)."""
    table = length_series(sweep)
    if table.empty:
        return None
    colors = {v.label: v.color for v in variants(sweep)}
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
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
    return _save_with_table(fig, table, out / "ppl_vs_length.png")


def _axis_name(axis: str) -> str:
    return axis.rsplit(".", 1)[-1]


def _set_numeric_xaxis(ax, values: list[float]) -> None:
    """Log scale for values spanning 10x or more (base 2 for integers: layers, heads), ticks at the values."""
    values = sorted(set(values))
    if values[0] > 0 and values[-1] / values[0] >= 10:
        ax.set_xscale("log", base=2 if all(v == int(v) for v in values) else 10)
        ax.minorticks_off()
    if all(v == int(v) for v in values):
        ax.set_xticks(values, [str(int(v)) for v in values])


def metric_vs_axis_figure(sweep: Sweep, out: Path, axis: str, metric: str) -> list[Path] | None:
    """The final ``metric`` against the numeric ``axis``, one line per value of the other axes.
    Stuck jobs (:func:`~ablate.analysis.series.is_stuck`) are circled at their value; diverged or
    crashed ones have no final value and are drawn as crosses along the top edge."""
    table = axis_series(sweep, axis, metric)
    if table["x"].nunique() < 2:
        return None
    fig = Figure(figsize=(6.4, 4.4), layout="constrained")
    ax = fig.subplots()
    top = ax.get_xaxis_transform()  # x in data, y in axes fraction: the top edge whatever the y scale
    marked = set()
    for i, (line, rows) in enumerate(table.groupby("line", sort=False)):
        color, ok = f"C{i % 10}", rows[rows["n"] > 0]
        low, high = (ok["mean"] - ok["min"]).fillna(0), (ok["max"] - ok["mean"]).fillna(0)
        ax.errorbar(ok["x"], ok["mean"], yerr=[low, high], marker="o", color=color, capsize=3,
                    label=f"{line} ({_seeds(rows)})")  # a bar, not a band: a line may be a single point
        stuck = ok[ok["stuck"] > 0]
        if len(stuck):
            label = None if "stuck" in marked else f"stuck ({STUCK_METRIC} fell < {STUCK_TOLERANCE:.0%} over training)"
            ax.plot(stuck["x"], stuck["mean"], "o", markersize=13, markerfacecolor="none", markeredgecolor="black",
                    label=label)
            marked.add("stuck")
        failed = rows[rows["failed"] > 0]
        if len(failed):
            label = None if "failed" in marked else "diverged / crashed (no final value)"
            ax.plot(failed["x"], [0.96] * len(failed), "x", markersize=10, markeredgewidth=2, color=color,
                    transform=top, label=label, clip_on=False)
            marked.add("failed")
    if wants_log(table["mean"].to_numpy(dtype=float)):
        ax.set_yscale("log")
    _set_numeric_xaxis(ax, table["x"].tolist())
    ax.set_xlabel(axis)
    ax.set_ylabel(f"final {AXIS_LABELS.get(metric, metric)}")
    ax.set_title(f"Final {metric} against {_axis_name(axis)} (mean over seeds; bar: seed range)",
                 fontsize="medium")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save_with_table(fig, table, out / f"metric_vs_{_axis_name(axis)}.png")


def train_loss_by_axis_figure(sweep: Sweep, out: Path, axis: str) -> Path | None:
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
        notes = [s for s, hit in (("stuck", any(is_stuck(j) for j in jobs)),
                                  ("diverged", any(j.status == "diverged" for j in jobs))) if hit]
        label = line + (f": {', '.join(notes)}" if notes else "")
        panels.setdefault(float(values[axis]), []).append(Variant(label, jobs, colors[line]))
    if len(panels) < 2:
        return None
    fig = Figure(figsize=(4.2 * len(panels), 3.8), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (value, group) in zip(axes, sorted(panels.items())):
        plot_curves(ax, group, "train/loss")
        ax.set_title(f"{_axis_name(axis)} = {value:g}")
        ax.label_outer()
        _legend(ax)
    fig.suptitle(f"Training loss by {axis} (line: mean over seeds; band: ± 1 std)")
    return _save(fig, out / f"train_loss_by_{_axis_name(axis)}.png")


def paper_figure(sweep: Sweep, out: Path, paper: PaperResults, metric: str, kind: str = "final") -> list[Path]:
    """Ours (left) and the paper's numbers (right) per variant, best paper value first, so the
    same order on both sides means the ranking is reproduced; Spearman's rho in the title."""
    table = paper_series(sweep, paper, metric, kind)
    rho = paper_rank_correlation(table)
    x = np.arange(len(table))
    names = [label.replace(", ", "\n") for label in table["variant"]]
    fig = Figure(figsize=(min(16.0, max(8.0, 1.6 * len(table))), 4.4), layout="constrained")
    ours, theirs = fig.subplots(1, 2)
    low, high = table["mean"] - table["min"], table["max"] - table["mean"]
    ours.errorbar(x, table["mean"], yerr=[low.fillna(0), high.fillna(0)], fmt="o", color="C0", capsize=4,
                  label="mean (bar: seed range)")
    for i, seeds in enumerate(table["seeds"]):
        ours.plot([i] * len(seeds), seeds, ".", color="black", markersize=4, label="seeds" if i == 0 else None)
    missing = x[table["n"].to_numpy() == 0]
    if len(missing):  # diverged or crashed everywhere: no value, but the paper's row is not silently dropped
        ours.plot(missing, [0.96] * len(missing), "x", color="C3", markersize=10, markeredgewidth=2,
                  transform=ours.get_xaxis_transform(), label="no completed seed (diverged / crashed)")
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
    fig.suptitle(f"{paper.source or 'paper'} vs ours: Spearman rank correlation ρ = {rho_text} "
                 f"({int(table['mean'].notna().sum())} variants)", fontsize="medium")
    return _save_with_table(fig, table, out / "paper_vs_ours.png")


def compute_multiplier_figure(curves: list[Curve], fits: dict[str, PowerLaw], results: list[Multiplier],
                              metric: str, compute_note: str, path: Path) -> Path:
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
        ax.plot(grid[inside], fit.loss(grid[inside]), color=color,
                label=f"{curve.label}: E={fit.E:.3g}, A={fit.A:.3g}, α={fit.alpha:.3g}")
        ax.plot(grid, fit.loss(grid), color=color, linestyle="--", linewidth=0.8)
        ax.axhline(fit.E, color=color, linestyle=":", linewidth=0.8)
    for r in results:
        end = r.compute * r.value if math.isfinite(r.value) else grid[-1]
        text = f"×{r.value:.3g}" if math.isfinite(r.value) else "×∞ (below the baseline's E)"
        ax.annotate("", xy=(end, r.loss), xytext=(r.compute, r.loss),
                    arrowprops={"arrowstyle": "->", "color": colors.get(r.variant, "black")})
        ax.text(max(end, r.compute), r.loss, f" {r.variant}: {text}", fontsize="small", va="center",
                color=colors.get(r.variant, "black"))
    ax.set_xscale("log")
    ax.set_xlabel(f"training compute (FLOPs: {compute_note})")
    ax.set_ylabel(f"final {AXIS_LABELS.get(metric, metric)}")
    ax.set_title("Loss against compute: L = E + A C^-α per variant (dots: seeds; dotted: E; "
                 "arrow: compute multiplier at the largest measured compute)", fontsize="small")
    ax.grid(alpha=0.3)
    _legend(ax)
    return _save(fig, path)


FIGURES = (validation_figure, warmup_figure, grad_norm_depth_figure, grad_norm_heatmap, resid_rms_depth_figure)


def plot_sweep(sweep: Sweep, out: str | Path, metric: str | None = None) -> list[Path]:
    """Write every figure that the sweep's logged metrics allow; returns the files written (PNGs
    and the CSVs of the comparison figures). ``metric``: the one ``metric_vs_<axis>.png`` shows
    (default: ``val/ppl`` for LMs, ``val/bleu`` for translation)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    paths = [path for figure in FIGURES if (path := figure(sweep, out)) is not None]
    paths += ppl_vs_length_figure(sweep, out) or []
    for axis in numeric_axes(sweep):
        paths += metric_vs_axis_figure(sweep, out, axis, pick_metric(sweep, metric)) or []
        if (curves := train_loss_by_axis_figure(sweep, out, axis)) is not None:
            paths.append(curves)
    return paths
