"""Figures of per-layer metrics against depth: gradient norms and residual-stream RMS at the first
and last logged step, and the gradient norm of every layer over training as a heat map."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.colors import LogNorm
from matplotlib.figure import Figure

from ablate.analysis.figures.common import STEP_LABEL, Variant, add_legend, variants, wants_log
from ablate.analysis.job import Job
from ablate.analysis.runs import Sweep

LAYER_METRIC = re.compile(
    r"^(?P<prefix>grad_norm|resid_rms)/(?P<stack>enc_|dec_)?layer_(?P<layer>\d+)(?:/(?P<part>.+))?$"
)
STACK_NAMES = {"": "decoder-only stack", "enc_": "encoder", "dec_": "decoder"}  # in drawing order


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
    """A layer's whole gradient norm from its sub-layers' (disjoint parameters); NaN where none."""
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
            add_legend(ax)
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
    """Evenly spaced steps over the logged range, the gap that covers most of the run apart."""
    steps = np.unique(np.asarray(steps, dtype=int))
    if len(steps) < 2:
        return steps
    gaps, counts = np.unique(np.diff(steps), return_counts=True)
    cover = gaps * counts
    gap = int(gaps[cover == cover.max()].max())  # a tie: the larger gap, the run's steady interval
    return np.arange(steps[0], steps[-1] + 1, gap)


def resample_steps(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` on :func:`uniform_steps`, each row the value logged there or last before it."""
    grid = uniform_steps(table.index.to_numpy())
    return table.sort_index().reindex(grid, method="ffill")


def grad_norm_heatmap(sweep: Sweep) -> Figure | None:
    """Layer gradient norm over evenly spaced steps x layers, a panel per variant and stack."""
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
    # columns at optimiser steps done (metrics.csv step + 1), as the curves and the console count them
    edges = {key: _edges(table.index.to_numpy() + 1) for key, table in maps.items()}
    left, right = min(e[0] for e in edges.values()), max(e[-1] for e in edges.values())
    for ax, (variant, stack) in zip(axes, [(v, s) for v in group for s in stacks]):
        table = maps.get((variant.label, stack))
        title = variant.label + (f" ({STACK_NAMES[stack]})" if stack else "")
        ax.set_title(title, fontsize="medium")
        if table is None:
            ax.set_axis_off()
            continue
        mesh = _heatmap_panel(ax, table, edges[variant.label, stack], norm, left, right)
    for ax in axes[cols:]:
        ax.set_axis_off()
    if mesh is not None:
        fig.colorbar(mesh, ax=axes[:cols].tolist(), label="gradient L2 norm of the layer (log scale)")
    fig.suptitle("Gradient norm per layer over training (mean over seeds)")
    return fig


def _heatmap_panel(ax: Any, table: pd.DataFrame, x_edges: np.ndarray, norm: LogNorm, left: float, right: float) -> Any:
    """One variant's steps x layers map on ``ax`` (common step range, an early stop noted); returns the mesh."""
    steps, layers = table.index.to_numpy(), table.columns.to_numpy()
    mesh = ax.pcolormesh(x_edges, _edges(layers), table.to_numpy().T, norm=norm, cmap="viridis")
    ax.set_xlim(left, right)  # one step range for all panels: a run that stopped early shows where
    ax.set_facecolor("#e6e6e6")
    end = x_edges[-1]
    if (right - end) > 0.15 * (right - left):
        note = f"no steps\nafter {int(steps[-1]) + 1}"
        ax.text((end + right) / 2, layers.mean(), note, ha="center", va="center", fontsize="small", color="dimgrey")
    gap = int(steps[1] - steps[0]) if len(steps) > 1 else 1
    ax.set_xlabel(STEP_LABEL + (f" (a column every {gap} steps)" if gap > 1 else ""))
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_ylabel("layer")
    ax.yaxis.get_major_locator().set_params(integer=True)
    return mesh


def _edges(centres: np.ndarray) -> np.ndarray:
    """Cell edges around sorted centres, halfway between neighbours (evenly spaced centres: equal cells)."""
    centres = centres.astype(float)
    if len(centres) == 1:
        return np.array([centres[0] - 0.5, centres[0] + 0.5])
    mid = (centres[:-1] + centres[1:]) / 2
    return np.concatenate([[centres[0] - (mid[0] - centres[0])], mid, [centres[-1] + (centres[-1] - mid[-1])]])
