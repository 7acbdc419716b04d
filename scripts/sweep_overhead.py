"""What a sweep costs beyond training: per-job start-up and evaluation, and sequential vs parallel.

    python scripts/sweep_overhead.py                                   # probes + the 4 x 3 sweep, both modes (~6 min)
    python scripts/sweep_overhead.py --steps 300 --modes sequential,parallel,joblib
    python scripts/sweep_overhead.py --variants learned,rope --seeds 1 --steps 3 --probe-runs 1 \\
        --extra data.seq_len=16 data.batch_size=4                      # the test's setting

What it measures and how: :mod:`benchmarks.sweep_overhead`. Prints tables and writes
``<out>/sweep_overhead.json``.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ sits beside src/: not installed

from benchmarks.sweep_overhead import main

if __name__ == "__main__":
    main()
