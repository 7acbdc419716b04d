"""Measure LM corpus preparation against the tokenizer library's own speed on the same file.

    python scripts/benchmark_data.py                      # 0.2, 1 and 4 GB of synthetic text (~1 h on 2 cores)
    python scripts/benchmark_data.py --sizes 0.2 --vocab-size 8192

What it measures and reports: :mod:`benchmarks.data_prep`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ sits beside src/: not installed

from benchmarks.data_prep import main

if __name__ == "__main__":
    main()
