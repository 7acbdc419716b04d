"""The start-up benchmark (benchmarks.startup) measures what it says: the time until a line
appears (the process is then stopped) or until the exit, and ratios to the baseline of the same
rounds. The speed itself is the benchmark's to report, never a test's to assert."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from benchmarks.startup import commands, report_lines, timed_until


@pytest.mark.integration
def test_timing_stops_at_the_marker_or_the_exit(tmp_path: Path) -> None:
    script = "import sys, time; print('first'); print('run     experiment=x', flush=True); time.sleep(600)"
    seconds, code = timed_until([sys.executable, "-c", script], dict(os.environ), tmp_path, "run     experiment=")
    assert code is None and seconds < 600  # stopped at the header, not after the sleep
    seconds, code = timed_until([sys.executable, "-c", "raise SystemExit(2)"], dict(os.environ), tmp_path, None)
    assert code == 2


def test_the_refusal_timed_is_the_gpu_one_where_there_is_no_gpu(tmp_path: Path) -> None:
    assert commands(tmp_path, [], no_gpu=True)["refusal"][0][-1] == "trainer=gpu"
    assert commands(tmp_path, [], no_gpu=False)["refusal"][0][-1] == "model.n_layers=abc"
    assert commands(tmp_path, [], no_gpu=True)["value_refusal"][0][-1] == "model.n_layers=0"
    run, marker, _ = commands(tmp_path, ["model=tiny"], no_gpu=True)["run_header"]
    assert run[-1] == "model=tiny" and marker == "run     experiment="


def test_the_report_gives_medians_and_ratios() -> None:
    result = {
        "rounds": 2,
        "refusal": "trainer=gpu",
        "run": "train.py",
        "seconds": {"import_lightning": [4.0, 6.0], "refusal": [0.5, 0.7], "run_header": [8.0, 9.0]},
        "median_s": {"import_lightning": 5.0, "refusal": 0.6, "run_header": 8.5},
        "ratio_to_import_lightning": {"refusal": 0.12, "run_header": 1.7},
    }
    lines = report_lines(result)
    assert any("run_header" in line and "8.50 s" in line and "x1.70" in line for line in lines), lines
