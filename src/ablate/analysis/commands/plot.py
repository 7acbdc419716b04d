"""Figures of a sweep: validation curves, learning rate and loss through warmup, gradient norms
and residual RMS against depth, gradient-norm heat maps, perplexity against evaluation length,
the final metric against each numeric axis, the learning-rate tuning curve, and ours against a
paper's numbers (PNG).

    python scripts/plot.py logs/multirun/<sweep>                  # writes <sweep>/figures/*.png
    python scripts/plot.py logs/multirun/<sweep> --out figs/ --metric test/loss
    python scripts/plot.py logs/multirun/<sweep> --x tokens       # curves against training tokens
    python scripts/plot.py logs/multirun/<sweep> --paper experiments/<name>/paper.yaml   # + paper_vs_ours.png

A figure that cannot be drawn is reported on stderr (its file name and why) and the others are
still written; the exit status is non-zero only when no figure was written. What each figure
shows: docs/analysis.md, "Analysing a sweep".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

import matplotlib

matplotlib.use("Agg")  # files only, never a window (also on machines without a display)

from ablate.analysis.figures.comparisons import paper_figure
from ablate.analysis.figures.writing import Plot, plot_sweep
from ablate.analysis.paper import load_paper
from ablate.analysis.runs import Sweep, at_tuned_rates, load_sweep
from ablate.analysis.series import X_AXES, paper_rank_correlation
from ablate.analysis.tables import available_metrics, pick_metric
from ablate.config.locations import folder_problem


def paper_plot(sweep: Sweep, paper_file: str, metric: str | None, kind: str) -> Plot:
    """``paper_vs_ours.png``; prints Spearman's rho when it is drawn."""

    def build():
        paper = load_paper(paper_file)
        logged = paper.metric in available_metrics(sweep)
        chosen = pick_metric(sweep, metric or (paper.metric if logged else None))
        fig = paper_figure(sweep, paper, chosen, kind)
        rho = paper_rank_correlation(fig.table)
        print(f"paper_vs_ours.png: Spearman rank correlation {rho:.2f} ({chosen} vs the paper)", file=sys.stderr)
        return fig

    return Plot("paper_vs_ours.png", build)


def report(filename: str, reason: str) -> None:
    print(f"plot.py: {filename} not written: {reason}", file=sys.stderr)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of ``scripts/plot.py``."""
    parser = argparse.ArgumentParser(prog="plot.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sweep_dir",
        help="a sweep's directory (logs/multirun/<sweep>: its sweep_name, or what the sweep's table printed)",
    )
    parser.add_argument("--out", metavar="DIR", help="where the PNG files go (default: <sweep_dir>/figures)")
    parser.add_argument(
        "--metric",
        help="the metric of metric_vs_<axis>.png and paper_vs_ours.png (default: the "
        "paper's metric where logged, else val/ppl for LM, val/bleu for translation)",
    )
    parser.add_argument("--paper", metavar="FILE", help="paper.yaml/.csv: also write paper_vs_ours.png")
    parser.add_argument("--best", action="store_true", help="paper_vs_ours.png: our best value, not the final one")
    parser.add_argument(
        "--x",
        choices=X_AXES,
        default="steps",
        help="the x axis of the curves (val_curves, lr_loss_warmup, train_loss_by_<axis>): optimiser "
        "steps (default), training tokens ((step + 1) x data.batch_size x data.seq_len for an LM, "
        "else the logged train/tokens_seen) or training time in seconds (the logged train/time_s, "
        "else summed from train/tokens_per_sec, else status.json's wall time spread evenly)",
    )
    parser.add_argument(
        "--all-lrs",
        action="store_true",
        help="a tune=lr sweep: every rate of the grid in every figure (default: each variant at its "
        "tuned rate, except loss_vs_lr.png, the tuning curve, which shows the whole grid)",
    )
    return parser.parse_args(argv)


def _refuse(message: str) -> NoReturn:
    """A user's error (the sweep, --metric, --out): said on stderr, exit 2, before any figure."""
    print(f"plot.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out or Path(args.sweep_dir) / "figures")
    try:
        grid = load_sweep(args.sweep_dir)
        sweep, note = (grid, None) if args.all_lrs else at_tuned_rates(grid, args.sweep_dir)
    except (OSError, ValueError) as err:  # a sweep directory that is not one, a bad --metric: the user's
        _refuse(str(err))
    for skipped in grid.notes:  # damaged jobs left out, duplicates counted once
        print(f"plot.py: note: {skipped}", file=sys.stderr)
    if args.metric:
        try:
            pick_metric(sweep, args.metric)  # a metric no job logged: the user's error, before any figure
        except ValueError as err:
            _refuse(str(err))
    if note:
        print(note.replace("--all-lrs shows them", "loss_vs_lr.png and --all-lrs show them"))
    problem = folder_problem(out)  # a read-only sweep folder: named with the option, not an OSError traceback
    if problem:
        _refuse(f"the figures go to {out}, but {problem}: write them elsewhere with --out DIR")
    extra = [paper_plot(sweep, args.paper, args.metric, "best" if args.best else "final")] if args.paper else []
    written = plot_sweep(sweep, out, args.metric, args.x, extra=extra, report=report, grid=grid if note else None)
    for path in written.paths:
        print(path)
    failed = ", ".join(name for name, _ in written.failures)
    if not written.paths:
        if written.failures:
            sys.exit(f"plot.py: no figure written; failed: {failed} (reasons above)")
        sys.exit(f"plot.py: nothing to plot: no job of {args.sweep_dir} logged metrics (csv/metrics.csv)")
    if written.failures:
        print(
            f"plot.py: wrote {sum(p.suffix == '.png' for p in written.paths)} figures; "
            f"{len(written.failures)} failed: {failed}",
            file=sys.stderr,
        )
