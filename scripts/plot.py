"""Figures of a sweep: validation curves, learning rate and loss through warmup, gradient norms
and residual RMS against depth, gradient-norm heat maps (PNG).

    python scripts/plot.py logs/multirun/<sweep>                  # writes <sweep>/figures/*.png
    python scripts/plot.py logs/multirun/<sweep> --out figs/

What each figure shows: ``src/ablate/analysis/figures.py``; README section "Analysing a sweep".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window (also on machines without a display)

from ablate.analysis.figures import plot_sweep  # noqa: E402
from ablate.analysis.runs import load_sweep  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", help="a multirun directory (logs/multirun/<timestamp>)")
    parser.add_argument("--out", metavar="DIR", help="where the PNG files go (default: <sweep_dir>/figures)")
    args = parser.parse_args(argv)
    try:
        sweep = load_sweep(args.sweep_dir)
    except (OSError, ValueError) as err:
        sys.exit(f"plot.py: {err}")
    paths = plot_sweep(sweep, args.out or Path(args.sweep_dir) / "figures")
    if not paths:
        sys.exit(f"plot.py: nothing to plot: no job of {args.sweep_dir} logged metrics (csv/metrics.csv)")
    for path in paths:
        print(path)


if __name__ == "__main__":
    main()
