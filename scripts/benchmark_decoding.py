"""Decoding throughput of a translation model in sentences/s, greedy and beam search.

    python scripts/benchmark_decoding.py                          # experiment=multi30k_small's model, random weights
    python scripts/benchmark_decoding.py --ckpt logs/runs/<run>/checkpoints/best.ckpt --beams 5

What it measures and reports: :mod:`benchmarks.decoding`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ sits beside src/: not installed

from benchmarks.decoding import main

if __name__ == "__main__":
    main()
