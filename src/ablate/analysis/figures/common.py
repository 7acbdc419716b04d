"""What every figure of a sweep shares: the variants and their colours (the same in every figure),
the mean over seeds, axis labels and scales, the legend, and the PNG writer."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from PIL import Image

from ablate.analysis.job import Job
from ablate.analysis.runs import Sweep
from ablate.analysis.series import job_x

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
    """``mean``, ``std`` and ``n`` of ``metric`` over the jobs at every logged step (non-finite left out)."""
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


def add_legend(ax, **kwargs) -> None:
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small", **kwargs)


class TableFigure(Figure):
    """A figure carrying the numbers it draws (``table``), written beside its PNG as ``<name>.csv``."""

    def __init__(self, *args, table: pd.DataFrame, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.table = table


def save_png(fig: Figure, path: Path) -> Path:
    """PNG with a 256-colour palette: a third of the size, indistinguishable for these plots."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight")
    image = Image.open(buffer).convert("RGB")
    image.quantize(colors=256, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE).save(path, optimize=True)
    return path


def variant_x(jobs: list[Job], steps, x: str) -> tuple[np.ndarray, set[str]]:
    """``steps`` as a variant's x: :func:`~ablate.analysis.series.job_x` averaged over its seeds."""
    pairs = [job_x(job, steps, x) for job in jobs]
    return np.nanmean(np.stack([values for values, _ in pairs]), axis=0), {source for _, source in pairs}


def x_label(x: str, sources: set[str]) -> str:
    if x == "steps":
        return STEP_LABEL
    return f"{X_LABELS[x]} ({'; '.join(sorted(sources))})" if sources else X_LABELS[x]


def seeds_text(rows: pd.DataFrame) -> str:
    n = int(rows["n"].max()) if len(rows) else 0
    return f"{n} seeds" if n != 1 else "1 seed"


def axis_name(axis: str) -> str:
    return axis.rsplit(".", 1)[-1]
