"""scripts/benchmark_decoding.py reports decoding throughput in sentences/s for each beam size
(issue 39 item 5). No timing assertions: the numbers are what the benchmark reports."""

from __future__ import annotations

import os

import pytest

from benchmarks.decoding import main

pytestmark = pytest.mark.integration  # builds a corpus (a BPE, a token cache)

SMALL = ["data.vocab_size=500", "data.max_train_pairs=3000", "model.d_model=32", "model.d_ff=64", "model.n_heads=2"]


def test_sentences_per_second_for_each_beam(data_dir, tmp_path, monkeypatch, one_thread) -> None:
    monkeypatch.setenv("ABLATE_DATA_DIR", str(data_dir))
    monkeypatch.setenv("ABLATE_CACHE_DIR", str(tmp_path / "cache"))
    assert os.environ["HF_HUB_OFFLINE"] == "1"
    results = main(["--beams", "1,3", "--sentences", "24", "--device", "cpu", "--json", *SMALL])
    assert [r["beam"] for r in results] == [1, 3]
    for r in results:
        assert r["sentences"] == 24 and r["device"] == "cpu"
        assert r["seconds"] > 0 and r["sentences_per_sec"] == pytest.approx(24 / r["seconds"])
        assert r["generated_tokens_per_sec"] > 0
