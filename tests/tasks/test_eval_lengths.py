"""Length extrapolation: eval.seq_len / eval.seq_lens for the LM (Press et al. 2022's setting:
train at L, evaluate the test split at L, 2L, 4L in non-overlapping windows)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from ablate.data.lm_data import TinyShakespeare
from ablate.tasks.lm import LanguageModelTask
from helpers.runs import TINY

apply_eval_seq_len = LanguageModelTask.check_config  # task=lm's own config check

LENGTHS = (16, 32, 64)


def test_eval_seq_len_is_the_data_eval_length():
    cfg = OmegaConf.create({"eval": {"seq_len": 64, "seq_lens": None}, "data": {"seq_len": 16, "eval_seq_len": None}})
    apply_eval_seq_len(cfg)
    assert cfg.data.eval_seq_len == 64
    cfg = OmegaConf.create({"eval": {"seq_len": None}, "data": {"seq_len": 16, "eval_seq_len": 32}})
    apply_eval_seq_len(cfg)  # data.eval_seq_len alone keeps working
    assert cfg.data.eval_seq_len == 32
    cfg.eval.seq_len = 64
    with pytest.raises(ValueError, match="set only one"):
        apply_eval_seq_len(cfg)
    with pytest.raises(ValueError, match="list of positive lengths"):
        apply_eval_seq_len(OmegaConf.create({"eval": {"seq_lens": 64}, "data": {"seq_len": 16, "eval_seq_len": None}}))
    with pytest.raises(ValueError, match="need an LM data config"):  # translation data has no eval_seq_len
        apply_eval_seq_len(OmegaConf.create({"eval": {"seq_lens": [64]}, "data": {"seq_len": 16}}))


def test_every_length_covers_the_same_split(data_dir: Path, tmp_path: Path):
    """Non-overlapping windows of each length over the one test split; tokens per batch kept."""
    dm = TinyShakespeare(data_dir=data_dir, cache_dir=tmp_path / "cache", seq_len=16, batch_size=4, eval_batch_size=8)
    dm.setup("test")
    n = dm.datasets["test"].num_tokens
    for length in LENGTHS:
        dm.use_eval_length(length)
        dm.setup("test")
        windows = dm.datasets["test"]
        assert windows.seq_len == length and dm.eval_batch_size == max(1, 8 * 16 // length)
        x, y = windows[1]
        assert np.array_equal(x.numpy(), np.asarray(windows.tokens[length : 2 * length]))  # no overlap, no gap
        assert 0 <= n - len(windows) * length <= length  # the whole split but a last partial window


@pytest.mark.slow
def test_lm_logs_ppl_at_each_length(run_train, tmp_path: Path, data_dir: Path):
    args = [o for o in TINY if not o.startswith("+trainer.limit_test_batches")]  # the whole test split
    run_train(
        "-m",
        "pos=alibi,rope,learned",
        *args,
        "logger=csv",
        "data.eval_batch_size=64",
        f"eval.seq_lens=[{','.join(map(str, LENGTHS))}]",
    )
    sweep = next((tmp_path / "logs" / "multirun").iterdir())
    found = {}
    for job in sweep.iterdir():
        if (job / "status.json").exists():
            status = json.loads((job / "status.json").read_text())
            found[status["axes"]["pos"]] = (job, status)
    assert set(found) == {"alibi", "rope", "learned"}
    dm = TinyShakespeare(data_dir=data_dir, cache_dir=tmp_path / "cache")
    dm.setup("test")
    test_tokens = dm.datasets["test"].num_tokens
    for pos in ("alibi", "rope"):
        job, status = found[pos]
        assert status["status"] == "completed" and status["steps"] == 6
        with open(job / "csv" / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
        for length in LENGTHS:
            logged = [float(r[f"test/ppl@{length}"]) for r in rows if r.get(f"test/ppl@{length}")]
            assert len(logged) == 1 and math.isfinite(logged[0]) and logged[0] > 1, (pos, length, logged)
            assert status["metrics"][f"test/ppl@{length}"] == pytest.approx(logged[0])
            loss = status["metrics"][f"test/loss@{length}"]
            assert status["metrics"][f"test/ppl@{length}"] == pytest.approx(math.exp(loss))
        # test/*@16 is the regular test (same length, same split, same weights), whatever the batch size
        assert status["metrics"]["test/loss@16"] == pytest.approx(status["metrics"]["test/loss"], rel=1e-5)
        tokens = {int(k): v["tokens"] for k, v in status["eval_lengths"].items()}
        for length in LENGTHS:  # the same split at every length: all of it but the last partial window
            assert 0 < test_tokens - tokens[length] <= length, (length, tokens, test_tokens)
    # pos=learned: a 16-row table (model.max_len defaults to the training length) cannot run
    # at 32 or 64; those lengths are skipped with a note, 16 is evaluated
    job, status = found["learned"]
    assert status["status"] == "completed"
    assert math.isfinite(status["metrics"]["test/ppl@16"])
    assert "test/ppl@32" not in status["metrics"] and "test/ppl@64" not in status["metrics"]
    assert "pos=learned has 16 positions" in status["eval_lengths"]["64"]["skipped"]
