"""What a run prints, through train.py: ``debug=fdr`` (its preset sets ``print_config: true``) prints
the resolved config once, before training, and the console holds one format and none of the known
noise (Lightning's device and fast_dev_run lines, the anomaly-detection warning, raw warnings with
their source lines, Hydra's timestamped lines)."""

from __future__ import annotations

import re

import pytest

from helpers.runs import TINY

FDR = [o for o in TINY if not o.startswith(("print_config", "trainer.max_steps", "trainer.val_check_interval"))]


@pytest.mark.integration
def test_debug_fdr_prints_the_config_once_before_training_in_one_quiet_format(run_train) -> None:
    """print_config=true and the debug presets printed nothing: print_config_tree was never called."""
    proc = run_train("debug=fdr", *FDR, "logger=csv")
    out = proc.stdout + proc.stderr
    lines = out.splitlines()
    tree = [i for i, line in enumerate(lines) if line.strip() == "config"]
    header = next(i for i, line in enumerate(lines) if line.startswith("run     experiment="))
    assert len(tree) == 1 and tree[0] < header, out[-3000:]
    assert any("fast_dev_run: true" in line for line in lines[tree[0] : header]), "the resolved trainer group"
    assert "run completed" in out
    for noise in ("GPU available: False", "Running in `fast_dev_run` mode", "Anomaly Detection", "UserWarning"):
        assert noise not in out, noise
    assert not re.search(r"^\[\d{4}-\d\d-\d\d [\d:,]+\]\[", out, re.M), "a timestamped log line on the console"
    assert not re.search(r"\.py:\d+: \w*Warning", out), "a raw warning with its source"


@pytest.mark.integration
def test_print_config_false_prints_no_tree(run_train) -> None:
    proc = run_train(*TINY, "logger=csv", "trainer.max_steps=1", "trainer.val_check_interval=1")
    assert not any(line.strip() == "config" for line in proc.stdout.splitlines())
