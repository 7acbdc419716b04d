"""Re-simulate the verdict machinery: coverage, sequential error rates and power, E[seeds], the
bias at stopping, divergence, and the family-wise error (the tables of docs/analysis.md).

    python scripts/simulate_verdicts.py                  # every table
    python scripts/simulate_verdicts.py --scale 0.05     # a quick check at 1/20 of the sweeps

Options and methods: ``src/ablate/analysis/commands/simulate.py`` and ``src/ablate/analysis/calibration.py``.
"""

from ablate.analysis.commands.simulate import main

if __name__ == "__main__":
    main()
