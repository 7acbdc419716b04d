"""Which figures a sweep gets, and writing each on its own: one that fails is reported, the others
still written."""

from __future__ import annotations

import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from matplotlib.figure import Figure

from ablate.analysis.figures.common import LR_AXIS, TableFigure, axis_name, save_png
from ablate.analysis.figures.comparisons import loss_vs_lr_figure, lr_axis, metric_vs_axis_figure, ppl_vs_length_figure
from ablate.analysis.figures.curves import train_loss_by_axis_figure, validation_figure, warmup_figure
from ablate.analysis.figures.depth import grad_norm_depth_figure, grad_norm_heatmap, resid_rms_depth_figure
from ablate.analysis.runs import Sweep
from ablate.analysis.series import X_AXES, numeric_axes
from ablate.analysis.tables import pick_metric


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
    """Every figure of a sweep, not yet drawn (``grid``: a ``tune=lr`` sweep's every job)."""
    if x not in X_AXES:
        raise ValueError(f"x={x!r}: use one of {', '.join(X_AXES)}")
    by = "" if x == "steps" else f"_by_{x}"  # curves against tokens or time get files of their own
    plots = [
        Plot(f"val_curves{by}.png", lambda: validation_figure(sweep, x)),
        Plot(f"lr_loss_warmup{by}.png", lambda: warmup_figure(sweep, x)),
        Plot("grad_norm_depth.png", lambda: grad_norm_depth_figure(sweep)),
        Plot("grad_norm_heatmap.png", lambda: grad_norm_heatmap(sweep)),
        Plot("resid_rms_depth.png", lambda: resid_rms_depth_figure(sweep)),
        Plot("ppl_vs_length.png", lambda: ppl_vs_length_figure(sweep)),
    ]
    for axis in numeric_axes(sweep):
        name = axis_name(axis)
        if grid is not None and name == LR_AXIS:
            continue
        plots.append(Plot(f"metric_vs_{name}.png", partial(_metric_vs_axis, sweep, axis, metric)))
        plots.append(Plot(f"train_loss_by_{name}{by}.png", partial(train_loss_by_axis_figure, sweep, axis, x)))
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
    """Draw and write each plot on its own (a failure recorded and reported); tables as ``<name>.csv``."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    written = Written()
    for plot in plots:
        try:
            fig = plot.build()
            if fig is None:
                continue
            path = out / plot.filename
            written.paths.append(save_png(fig, path))
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
    """Write every figure the sweep's metrics allow, and ``extra`` plots, each independently."""
    return write_plots([*(extra or []), *sweep_plots(sweep, metric, x, grid)], out, report)
