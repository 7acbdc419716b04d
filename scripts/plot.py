"""Figures of a sweep (PNG): validation curves, learning rate and loss through warmup, gradient
norms and residual RMS against depth, heat maps, perplexity against length, the final metric
against each numeric axis, the learning-rate tuning curve, ours against a paper's numbers.

    python scripts/plot.py logs/multirun/<sweep>                  # writes <sweep>/figures/*.png
    python scripts/plot.py logs/multirun/<sweep> --x tokens       # curves against training tokens

Options: ``src/ablate/analysis/commands/plot.py``; figures: ``src/ablate/analysis/figures/``.
"""

from ablate.analysis.commands.plot import main

if __name__ == "__main__":
    main()
