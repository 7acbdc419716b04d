"""Figures of a sweep: validation curves, learning rate and loss through warmup, gradient norms
and residual RMS against depth, gradient-norm heat maps, perplexity against evaluation length,
the final metric against each numeric axis, and ours against a paper's numbers (PNG).

    python scripts/plot.py logs/multirun/<sweep>                  # writes <sweep>/figures/*.png
    python scripts/plot.py logs/multirun/<sweep> --out figs/ --metric test/loss
    python scripts/plot.py logs/multirun/<sweep> --paper experiments/<name>/paper.yaml   # + paper_vs_ours.png

What each figure shows: ``src/ablate/analysis/figures.py``; README section "Analysing a sweep".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window (also on machines without a display)

from ablate.analysis.figures import paper_figure, plot_sweep  # noqa: E402
from ablate.analysis.paper import load_paper  # noqa: E402
from ablate.analysis.runs import load_sweep  # noqa: E402
from ablate.analysis.series import paper_rank_correlation, paper_series  # noqa: E402
from ablate.analysis.tables import available_metrics, pick_metric  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", help="a multirun directory (logs/multirun/<timestamp>)")
    parser.add_argument("--out", metavar="DIR", help="where the PNG files go (default: <sweep_dir>/figures)")
    parser.add_argument("--metric", help="the metric of metric_vs_<axis>.png and paper_vs_ours.png (default: the "
                                         "paper's metric where logged, else val/ppl for LM, val/bleu for translation)")
    parser.add_argument("--paper", metavar="FILE", help="paper.yaml/.csv: also write paper_vs_ours.png")
    parser.add_argument("--best", action="store_true", help="paper_vs_ours.png: our best value, not the final one")
    args = parser.parse_args(argv)
    out = Path(args.out or Path(args.sweep_dir) / "figures")
    try:
        sweep = load_sweep(args.sweep_dir)
        paper = load_paper(args.paper) if args.paper else None
        out.mkdir(parents=True, exist_ok=True)
        paths = []
        if paper is not None:  # first: a paper file that matches nothing fails before the slow figures
            logged = paper.metric in available_metrics(sweep)
            metric = pick_metric(sweep, args.metric or (paper.metric if logged else None))
            paths += paper_figure(sweep, out, paper, metric, "best" if args.best else "final")
            rho = paper_rank_correlation(paper_series(sweep, paper, metric, "best" if args.best else "final"))
            print(f"paper_vs_ours.png: Spearman rank correlation {rho:.2f} ({metric} vs the paper)", file=sys.stderr)
        paths = plot_sweep(sweep, out, pick_metric(sweep, args.metric)) + paths
    except (OSError, ValueError) as err:
        sys.exit(f"plot.py: {err}")
    if not paths:
        sys.exit(f"plot.py: nothing to plot: no job of {args.sweep_dir} logged metrics (csv/metrics.csv)")
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
