"""Translation data at WMT14 size (issue 20): a parallel corpus is prepared in bounded memory.

scripts/benchmark_translation_data.py writes a synthetic corpus and prepares it in a fresh process,
whose peak RSS growth (``ru_maxrss`` after ``prepare_data()`` + ``setup()`` minus before) is what
preparing costs. The list-of-lists code this replaced (every line, every sentence's id list and
every ``Encoding`` of a side at once) grew by ~1,200 MB on this corpus; the streamed one grows by
~110 MB (the BPE's word counts, one batch of encodings, the length arrays).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.runs import HANG_TIMEOUT, REPO

pytestmark = pytest.mark.integration  # a subprocess: the memory of a fresh process is measured

PAIRS = 200_000
GROWTH_BOUND_MB = 400


def test_200k_pairs_are_prepared_in_bounded_memory(tmp_path: Path) -> None:
    cmd = [sys.executable, str(REPO / "scripts" / "benchmark_translation_data.py"), "--pairs", str(PAIRS)]
    cmd += ["--words", "8", "--types", "50000", "--vocab-size", "1000", "--dir", str(tmp_path), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=HANG_TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-5000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["pairs"] == PAIRS and result["batches"] > 0
    growth = result["peak_rss_mb"] - result["peak_rss_before_mb"]
    assert growth < GROWTH_BOUND_MB, f"preparing {PAIRS:,} pairs grew the peak RSS by {growth:,.0f} MB: {result}"
