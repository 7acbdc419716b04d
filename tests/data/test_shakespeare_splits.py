"""Tiny Shakespeare's ``data.splits`` (issue 18): ``nanogpt`` (default) is the split every recorded
number was made on, bit for bit and in the same cache folder; ``disjoint`` holds out a test text
that a selection on validation never saw, with the training text unchanged."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from ablate.config.identity import run_identity
from ablate.data.cache import read_meta
from ablate.data.lm_data import TinyShakespeare
from ablate.data.text_stream import SplitText
from ablate.errors import ConfigError
from ablate.run.plan import check_config
from ablate.sweepers.lr_selection import validation_as_test_warning
from helpers.runs import REPO, SHARED_DATA

SHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"
FIXED_MTIME_NS = 1_700_000_000_000_000_000


def composed(*overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))


def joined(texts: dict[str, SplitText]) -> dict[str, str]:
    return {split: "".join(text.open()) for split, text in texts.items()}


@pytest.fixture
def fixed_corpus(tmp_path: Path) -> Path:
    """A data dir whose ``input.txt`` has fixed content (and mtime): its cache folder name is
    fixed too (the fingerprint is file name, size and content hash), wherever the test runs."""
    path = tmp_path / "data" / "tinyshakespeare" / "input.txt"
    path.parent.mkdir(parents=True)
    path.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40)
    os.utime(path, ns=(FIXED_MTIME_NS, FIXED_MTIME_NS))
    return tmp_path / "data"


@pytest.fixture
def numbered_corpus(tmp_path: Path) -> Path:
    """A data dir whose ``input.txt`` never repeats itself: a slice taken at the wrong offset
    cannot equal the right one by accident (as it can in a text of one repeated line)."""
    path = tmp_path / "numbered" / "tinyshakespeare" / "input.txt"
    path.parent.mkdir(parents=True)
    path.write_text("".join(f"line {i}: {'abcdefghij'[i % 10] * (i % 7)}\n" for i in range(400)))
    return tmp_path / "numbered"


@pytest.fixture(scope="module")
def shakespeare_text() -> str:
    if not SHAKESPEARE.exists():
        pytest.skip(f"real data not available: {SHAKESPEARE} is missing")
    return SHAKESPEARE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory, shakespeare_text: str) -> dict[str, TinyShakespeare]:
    """The char-level corpus prepared with each split scheme, in one cache folder."""
    cache = tmp_path_factory.mktemp("cache")
    modules = {}
    for splits in ("nanogpt", "disjoint"):
        dm = TinyShakespeare(data_dir=SHARED_DATA, cache_dir=cache, splits=splits, seq_len=64, batch_size=8)
        dm.setup(None)
        modules[splits] = dm
    return modules


# --- nanogpt: today's split and cache, unchanged ---------------------------------------------


def test_nanogpt_keeps_the_cache_folder_names_of_before_the_option(fixed_corpus: Path) -> None:
    # Hard-coded from the code that keyed caches by content (issue 32 item 5: the key was name, size and
    # mtime before, so a same-size, same-mtime replacement reused the old tokens; every cache was rebuilt
    # once then), run on this fixed file: the default must keep the folder name, so that every existing
    # cache (and number) stays valid. CACHE_FORMAT_VERSION or the source key changing them on purpose is
    # the one reason to update these.
    before = {
        (): "tinyshakespeare-char-54f75d218c",
        (("tokenizer", "bpe"), ("vocab_size", 300)): "tinyshakespeare-bpe-300-54f75d218c",
        (("tokenizer", "bpe"), ("vocab_size", 300), ("bpe_train_mb", 0.5)): "tinyshakespeare-bpe-300-ec04b3b736",
    }
    for settings, name in before.items():
        for splits in ({}, {"splits": "nanogpt"}):  # the default, and said explicitly
            dm = TinyShakespeare(data_dir=fixed_corpus, cache_dir=fixed_corpus / "c", **dict(settings), **splits)
            assert dm.cache_path().name == name
    disjoint = TinyShakespeare(data_dir=fixed_corpus, cache_dir=fixed_corpus / "c", splits="disjoint")
    assert disjoint.cache_path().name != before[()] and disjoint.cache_path().name.startswith("tinyshakespeare-char-")


def test_nanogpt_test_is_validation(numbered_corpus: Path) -> None:
    dm = TinyShakespeare(data_dir=numbered_corpus, cache_dir=numbered_corpus / "c")
    texts = dm.split_texts()
    assert texts["test"] is texts["val"]
    text = (numbered_corpus / "tinyshakespeare" / "input.txt").read_text()
    n_train = int(len(text) * 0.9)
    assert joined(texts) == {"train": text[:n_train], "val": text[n_train:], "test": text[n_train:]}


# --- disjoint: three texts, in order, training unchanged --------------------------------------


def test_disjoint_splits_cover_the_text_in_order_without_overlap(numbered_corpus: Path) -> None:
    text = (numbered_corpus / "tinyshakespeare" / "input.txt").read_text()
    dm = TinyShakespeare(data_dir=numbered_corpus, cache_dir=numbered_corpus / "c", splits="disjoint")
    parts = joined(dm.split_texts())
    n_train, n_val = int(len(text) * 0.9), int(len(text) * 0.95)
    offsets, start = {}, 0
    for split in ("train", "val", "test"):  # in the text's order, each starting where the last ended
        offsets[split] = range(start, start + len(parts[split]))
        assert text[offsets[split].start : offsets[split].stop] == parts[split]
        start = offsets[split].stop
    assert start == len(text)  # every character is in a split ...
    assert sum(len(r) for r in offsets.values()) == len(text)  # ... and in one only
    assert not set(offsets["val"]) & set(offsets["test"])
    assert parts["train"] == text[:n_train]
    assert parts["val"] + parts["test"] == text[n_train:]  # validation + test: the last 10%
    assert parts["test"] == text[n_val:] and len(parts["test"]) == len(text) - int(len(text) * 0.95)


def test_disjoint_on_the_real_corpus(both: dict[str, TinyShakespeare], shakespeare_text: str) -> None:
    nano, disjoint = both["nanogpt"], both["disjoint"]
    assert disjoint.cache_path() != nano.cache_path()
    assert read_meta(disjoint.cache_path())["sources"]["splits"] == "disjoint"  # the cache says what it holds
    n = len(shakespeare_text)
    n_train, n_val = int(n * 0.9), int(n * 0.95)
    sizes = {split: disjoint.datasets[split].num_tokens for split in ("train", "val", "test")}
    assert sizes == {"train": n_train, "val": n_val - n_train, "test": n - n_val}  # one token per character
    tok = disjoint.tokenizer
    assert tok.decode(disjoint.datasets["val"].tokens) == shakespeare_text[n_train:n_val]
    assert tok.decode(disjoint.datasets["test"].tokens) == shakespeare_text[n_val:]
    # training is identical: the same vocabulary and the same training tokens as nanoGPT's split
    assert tok.chars == nano.tokenizer.chars
    assert np.array_equal(disjoint.datasets["train"].tokens, nano.datasets["train"].tokens)
    assert np.array_equal(nano.datasets["test"].tokens, nano.datasets["val"].tokens)
    assert not np.array_equal(disjoint.datasets["test"].tokens[:1000], disjoint.datasets["val"].tokens[:1000])


# --- the key: its values, its corpus, its record -----------------------------------------------


def test_a_bad_value_is_refused_by_name_before_any_data_is_read(tmp_path: Path, monkeypatch) -> None:
    def no_data(*args: object, **kwargs: object) -> None:
        raise AssertionError("data was read although the config is invalid")

    monkeypatch.setattr(TinyShakespeare, "input_file", no_data)
    monkeypatch.setattr(TinyShakespeare, "split_texts", no_data)
    with pytest.raises(ConfigError) as err:
        check_config(composed("data.splits=heldout"))  # train.py's first check
    assert "data.splits='heldout' is invalid: one of nanogpt, disjoint" in str(err.value)
    with pytest.raises(ValueError, match=r"splits='heldout' is invalid: one of nanogpt, disjoint"):
        TinyShakespeare(data_dir=tmp_path, cache_dir=tmp_path, splits="heldout")  # the Python API too


@pytest.mark.integration
def test_a_bad_value_stops_train_py_before_any_data_is_read(run_train) -> None:
    proc = run_train("data.splits=heldout", check=False)
    assert proc.returncode == 2
    assert "data.splits='heldout' is invalid: one of nanogpt, disjoint" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert "tinyshakespeare" not in proc.stdout + proc.stderr  # no data was read or tokenised


def test_the_key_belongs_to_tiny_shakespeare_only() -> None:
    for splits in ("nanogpt", "disjoint"):
        cfg = composed(f"data.splits={splits}")
        check_config(cfg)
        assert cfg.data.splits == splits  # in `data`: the resolved config W&B and .hydra/ record
    for other in (["data=wikitext2"], ["data=text", "data.train_path=a", "data.val_path=b"]):
        with pytest.raises(ConfigError, match=r"data\.splits is not a key of data"):
            check_config(composed(*other, "+data.splits=disjoint"))


def test_a_checkpoint_from_before_the_key_resumes_at_the_default() -> None:
    old = composed()
    with open_dict(old):
        del old.data["splits"]  # a config written before data.splits existed
    assert run_identity(old) == run_identity(composed()) == run_identity(composed("data.splits=nanogpt"))
    assert run_identity(composed("data.splits=disjoint"))["data.splits"] == "disjoint"  # another run


def test_tuned_sweep_warns_when_test_is_validation() -> None:
    warning = validation_as_test_warning(composed())
    assert warning is not None and "data.splits=nanogpt" in warning and "held-out" in warning
    assert "\n" not in warning
    assert validation_as_test_warning(composed("data.splits=disjoint")) is None
    assert validation_as_test_warning(composed("data=wikitext2")) is None
    text = ["data=text", "data.train_path=a", "data.val_path=b"]
    assert "data.test_path is null" in (validation_as_test_warning(composed(*text)) or "")
    assert validation_as_test_warning(composed(*text, "data.test_path=c")) is None


# --- blocks: held-out text from the whole corpus (issue 34) ------------------------------------


def test_blocks_hold_out_four_blocks_per_split_spread_through_the_text(numbered_corpus: Path) -> None:
    text = (numbered_corpus / "tinyshakespeare" / "input.txt").read_text()
    dm = TinyShakespeare(
        data_dir=numbered_corpus, cache_dir=numbered_corpus / "c", splits="blocks", seq_len=16, batch_size=4
    )
    cuts = dm.block_cuts(len(text))
    assert len(cuts["val"]) == len(cuts["test"]) == 4 and len(cuts["train"]) == 8
    covered = sorted(r for ranges in cuts.values() for r in ranges)
    assert covered[0][0] == 0 and covered[-1][1] == len(text)  # every character in one split only
    assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    assert (
        cuts["test"][0][0] < len(text) / 8 and cuts["test"][-1][1] > len(text) / 2
    )  # the first ... and past the middle
    parts = joined(dm.split_texts())
    assert parts["test"] == "".join(text[a:b] for a, b in cuts["test"])
    assert parts["train"] == "".join(text[a:b] for a, b in cuts["train"])
    assert abs(len(parts["test"]) - 0.05 * len(text)) < 8 and abs(len(parts["train"]) - 0.9 * len(text)) < 16
    dm.setup(None)
    bounds = read_meta(dm.cache_path())["blocks"]["test"]  # token boundaries: one token per character here
    assert bounds == [0, *np.cumsum([b - a for a, b in cuts["test"]]).tolist()]
    assert dm.tokenizer.decode(dm.datasets["test"].tokens[bounds[1] : bounds[2]]) == text[slice(*cuts["test"][1])]
    info = dm.unit_text("test")
    assert info["bounds"] == bounds and info["layout"] == "blocks" and info["text"].endswith(f":L{dm.eval_seq_len}")
    assert (
        dm.cache_path()
        != TinyShakespeare(data_dir=numbered_corpus, cache_dir=numbered_corpus / "c", splits="disjoint").cache_path()
    )
    assert run_identity(composed("data.splits=blocks"))["data.splits"] == "blocks"  # a run of its own
    assert validation_as_test_warning(composed("data.splits=blocks")) is None
