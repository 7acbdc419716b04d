"""Would successive halving have chosen the same learning rates? Replayed on a finished full-grid ``tune=lr`` sweep.

    python scripts/halving_replay.py logs/multirun/<sweep>                        # rungs at 1/4 and 1/2
    python scripts/halving_replay.py logs/multirun/<sweep> --rungs 0.333333 0.5 --metric val/loss

Options: ``benchmarks/lr_selection/halving_replay.py``; method: ``src/ablate/sweepers/halving.py``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ sits beside src/: not installed

from benchmarks.lr_selection.halving_replay import main

if __name__ == "__main__":
    main()
