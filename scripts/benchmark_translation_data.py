"""Translation data preparation at WMT14 size: speed and peak memory on a synthetic parallel corpus.

    python scripts/benchmark_translation_data.py                    # 4.5 M pairs (~1.3 GB), as WMT14 En-De
    python scripts/benchmark_translation_data.py --pairs 1000000 --dir /tmp/synthetic   # files kept there
    python scripts/benchmark_translation_data.py --pairs 200000 --words 8 --json   # one JSON line (tests)

What it measures and reports: :mod:`benchmarks.translation_prep`.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/ sits beside src/: not installed

from benchmarks.translation_prep import main

if __name__ == "__main__":
    main()
