"""What the jobs' records say under every summary table: a variant whose scale probe warned at
initialisation, and a test metric that was read on the validation text (issue 50)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ablate.analysis.commands import summarize
from helpers.sweeps import write_sweep


def _annotate(root: Path, act: str, **entries: object) -> None:
    for status in root.glob("*/status.json"):
        record = json.loads(status.read_text())
        if f"act={act}" in (status.parent / ".hydra" / "overrides.yaml").read_text():
            status.write_text(json.dumps({**record, **entries}))


def test_a_warned_scale_and_a_test_on_the_validation_text_are_noted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = write_sweep(tmp_path / "sweep", {"gelu": [2.0, 2.1], "swiglu": [1.9, 2.0]}, metric="test/loss")
    _annotate(root, "swiglu", scale_at_init={"warnings": ["position/token signal 36x (outside [0.33, 3])"]})
    _annotate(root, "gelu", scale_at_init={"warnings": []})
    for act in ("gelu", "swiglu"):
        _annotate(root, act, test_is_validation="data.splits=nanogpt: the test split is the validation text")
    summarize.main([str(root), "--metric", "test/loss"])
    out = capsys.readouterr().out
    assert "Scale at init, act=swiglu: position/token signal 36x" in out
    assert "act=gelu:" not in out.split("Scale at init")[-1].split("\n")[0]
    assert "test/* here is the validation text" in out
    on_val = write_sweep(tmp_path / "val", {"gelu": [2.0, 2.1], "swiglu": [1.9, 2.0]}, metric="val/loss")
    _annotate(on_val, "gelu", test_is_validation="data.splits=nanogpt")
    summarize.main([str(on_val), "--metric", "val/loss"])
    assert "test/* here is the validation text" not in capsys.readouterr().out
