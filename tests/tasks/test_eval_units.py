"""Per-window test losses (issue 34 item 1, ablate.eval_units): each window's summed NLL under
its number, so that two runs' windows pair exactly; their sum is the logged test loss."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ablate.data.tokenizers import CharTokenizer
from ablate.eval_units import Units, block_of, read_units, write_units
from ablate.tasks.lm import LanguageModelTask
from ablate.tasks.lm_eval import TextFileData, evaluate_lengths
from helpers.checkpoints import quiet_trainer
from helpers.tiny_models import tiny_spec

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 12


def test_each_window_is_recorded_under_its_number(tmp_path):
    torch.manual_seed(0)
    tokenizer = CharTokenizer.from_text(TEXT)
    task = LanguageModelTask(tiny_spec(vocab_size=tokenizer.vocab_size, pos="rope").as_dict(), {"name": "adamw"})
    task.tokenizer = tokenizer
    task.eval()
    (tmp_path / "t.txt").write_text(TEXT)
    dm = TextFileData(tmp_path / "t.txt", tokenizer, tmp_path, seq_len=16, eval_batch_size=3)
    tr = quiet_trainer()
    metrics, _ = evaluate_lengths(tr, task, dm, [16, 32])
    ids = torch.tensor(tokenizer.encode(TEXT))
    for length in (16, 32):
        units = task.test_units[f"@{length}"]
        n = (len(ids) - 1) // length
        assert units["index"] == list(range(n))  # every window once, in order
        x, y = ids[: n * length].view(n, length), ids[1 : n * length + 1].view(n, length)
        with torch.no_grad():
            direct = F.cross_entropy(task.model(x).flatten(0, 1), y.flatten(), reduction="none").view(n, length)
        np.testing.assert_allclose(units["nats"], direct.sum(1).numpy(), rtol=1e-5)
        assert units["tokens"] == [length] * n and units["bytes"] == [length] * n  # ASCII: a byte per character
        assert sum(units["nats"]) / sum(units["tokens"]) == pytest.approx(metrics[f"test/loss@{length}"], rel=1e-5)
        assert units["text"].endswith(f":L{length}")
    path = task.write_test_units(tr, dm, tmp_path / "units.npz")
    read, meta = read_units(path)
    assert meta["task"] == "lm" and set(read) == {"@16", "@32"}
    u = read["@16"]
    assert u.nats.dtype == np.float32 and u.tokens.dtype == np.int32 and len(u) == (len(ids) - 1) // 16
    assert u.text != read["@32"].text  # other windows: they never pair
    bpb = u.nats.astype(float).sum() / u.denominator("test/bpb@16").sum()
    assert bpb == pytest.approx(metrics["test/loss@16"] / np.log(2), rel=1e-5)


def test_blocks_from_token_boundaries():
    assert block_of([0, 9, 10, 25, 40], [0, 10, 20, 30, 50]).tolist() == [0, 0, 1, 2, 3]
    assert block_of([0, 100], None).tolist() == [0, 0]


def test_a_damaged_units_file_is_named(tmp_path):
    bad = tmp_path / "test_units.npz"
    bad.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="test_units.npz: not a readable units file"):
        read_units(bad)
    good = write_units(
        tmp_path / "ok.npz",
        {"": {"index": [1, 0], "nats": [2.0, 1.0], "tokens": [4, 4], "bytes": [4, 4], "text": "k"}},
        {"task": "lm"},
    )
    units, _ = read_units(good)
    assert isinstance(units[""], Units) and units[""].index.tolist() == [0, 1] and units[""].nats.tolist() == [1.0, 2.0]
