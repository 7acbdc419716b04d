"""Tests of ablate.data: tokenizers, caching, windowing and offline failure modes."""

from __future__ import annotations

import logging
import os
import pickle
import socket
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import SequentialSampler

from ablate.data import sources, token_files
from ablate.data.lm_data import TextFiles, TinyShakespeare, WikiText2
from ablate.data.lm_windows import token_dtype
from ablate.data.samplers import ResumableSampler
from ablate.data.sources import DataNotFoundError
from ablate.data.tokenizers import BPETokenizer, CharTokenizer, build_tokenizer

SHARED_DATA = Path(__file__).parents[2].parent / "shared" / "data"
SHAKESPEARE = SHARED_DATA / "tinyshakespeare" / "input.txt"
WIKI_SAMPLE = SHARED_DATA / "wikitext-2-sample"


def _require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"real data not available: {path} is missing (expected ../shared/data next to the repo)")
    return path


@pytest.fixture(scope="module")
def shakespeare_text() -> str:
    return _require(SHAKESPEARE).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def char_dm(tmp_path_factory: pytest.TempPathFactory, shakespeare_text: str) -> TinyShakespeare:
    """Tiny Shakespeare, char-level, prepared once for the module."""
    dm = TinyShakespeare(
        data_dir=SHARED_DATA,
        cache_dir=tmp_path_factory.mktemp("cache"),
        tokenizer="char",
        seq_len=64,
        eval_seq_len=512,
        batch_size=8,
        eval_batch_size=4,
    )
    dm.prepare_data()
    dm.setup("fit")
    dm.setup("test")
    return dm


def _closed_port() -> int:
    """A localhost port nothing listens on (connections are refused at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.lstat().st_size, p.lstat().st_mtime_ns) for p in folder.rglob("*")}


# --- tokenizers ----------------------------------------------------------------------


def test_char_tokenizer_round_trip_and_vocab(char_dm: TinyShakespeare, shakespeare_text: str) -> None:
    tok = char_dm.tokenizer
    assert isinstance(tok, CharTokenizer)
    assert tok.vocab_size == char_dm.vocab_size == 65
    assert tok.chars == sorted(set(shakespeare_text))
    assert tok.decode(tok.encode(shakespeare_text)) == shakespeare_text
    assert np.array_equal(tok.encode_array(shakespeare_text[:5000]), tok.encode(shakespeare_text[:5000]))
    with pytest.raises(ValueError, match="not in the vocabulary"):
        tok.encode("é")


def test_char_tokenizer_save_load(tmp_path: Path) -> None:
    tok = CharTokenizer.from_text("hello, wörld\n")
    tok.save(tmp_path / "v.json")
    again = CharTokenizer.load(tmp_path / "v.json")
    assert again.chars == tok.chars and again.encode("wörld") == tok.encode("wörld")


def test_bpe_trained_on_train_round_trips_and_is_cached(
    tmp_path: Path, shakespeare_text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    train = shakespeare_text[: int(len(shakespeare_text) * 0.9)]
    val = shakespeare_text[len(train) :]
    path = tmp_path / "tokenizer.json"
    tok = build_tokenizer("bpe", train, 512, path)
    assert isinstance(tok, BPETokenizer) and tok.vocab_size == 512
    for text in (val, "unseen: naïve café 日本語\t\n\n  spaces  "):
        assert tok.decode(tok.encode(text)) == text
    assert len(tok.encode(val)) < 0.6 * len(val)  # merges were actually learned (byte-level: 1.0)

    mtime = path.stat().st_mtime_ns

    def no_training(*args: object, **kwargs: object) -> None:
        raise AssertionError("BPE was retrained although a cached tokenizer exists")

    monkeypatch.setattr(BPETokenizer, "train", classmethod(no_training))
    again = build_tokenizer("bpe", train, 512, path)
    assert path.stat().st_mtime_ns == mtime
    assert again.encode(val) == tok.encode(val)


def test_unknown_tokenizer_kind_lists_valid_kinds(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="char, bpe"):
        build_tokenizer("wordpiece", "abc", 100, tmp_path / "t.json")
    with pytest.raises(ValueError, match="char, bpe"):
        TinyShakespeare(data_dir=tmp_path, cache_dir=tmp_path, tokenizer="wordpiece")


def test_token_dtype() -> None:
    assert token_dtype(65) == np.uint16 and token_dtype(65536) == np.uint16
    assert token_dtype(65537) == np.uint32


# --- Tiny Shakespeare: splits, windows, loaders ---------------------------------------


def test_split_is_first_90_percent(char_dm: TinyShakespeare, shakespeare_text: str) -> None:
    n_train = int(len(shakespeare_text) * 0.9)
    train, val, test = (char_dm.datasets[s] for s in ("train", "val", "test"))
    assert train.num_tokens == n_train == 1_003_854  # one token per character
    assert val.num_tokens == test.num_tokens == len(shakespeare_text) - n_train == 111_540
    assert train.tokens.dtype == np.uint16
    assert char_dm.tokenizer.decode(val.tokens[:300]) == shakespeare_text[n_train : n_train + 300]
    assert np.array_equal(val.tokens, test.tokens)


def test_x_y_shift_and_non_overlapping_windows(char_dm: TinyShakespeare, shakespeare_text: str) -> None:
    ds, L = char_dm.datasets["train"], char_dm.seq_len
    assert len(ds) == (ds.num_tokens - 1) // L
    x0, y0 = ds[0]
    x1, _ = ds[1]
    assert x0.dtype == y0.dtype == torch.int64 and x0.shape == y0.shape == (L,)
    assert torch.equal(y0[:-1], x0[1:])  # y is x shifted by one
    assert y0[-1] == x1[0]  # the next window starts right where this one's inputs end
    assert char_dm.tokenizer.decode(x1.tolist()) == shakespeare_text[L : 2 * L]
    last = len(ds) - 1
    xl, yl = ds[last]
    assert torch.equal(xl, torch.from_numpy(ds.tokens[last * L : (last + 1) * L].astype(np.int64)))
    assert torch.equal(yl, torch.from_numpy(ds.tokens[last * L + 1 : (last + 1) * L + 1].astype(np.int64)))
    with pytest.raises(IndexError):
        ds[len(ds)]


def test_dataloaders(char_dm: TinyShakespeare) -> None:
    train = char_dm.train_dataloader()
    assert isinstance(train.sampler, ResumableSampler) and train.drop_last
    x, y = next(iter(train))
    assert x.shape == y.shape == (8, 64) and x.dtype == torch.int64
    assert char_dm.tokens_per_batch == 8 * 64
    val = char_dm.val_dataloader()
    assert isinstance(val.sampler, SequentialSampler) and not val.drop_last
    assert len(val) == -(-len(char_dm.datasets["val"]) // 4)  # last partial batch kept
    vx, _ = next(iter(val))
    assert torch.equal(vx[1], char_dm.datasets["val"][1][0])  # in order


def test_eval_seq_len_longer_than_seq_len(char_dm: TinyShakespeare) -> None:
    val = char_dm.datasets["val"]
    assert char_dm.eval_seq_len == 512 > char_dm.seq_len
    assert val.seq_len == 512 and len(val) == (111_540 - 1) // 512
    x, y = next(iter(char_dm.val_dataloader()))
    assert x.shape == y.shape == (4, 512)


def test_windows_do_not_pickle_the_token_array(char_dm: TinyShakespeare) -> None:
    ds = char_dm.datasets["train"]
    _ = ds[0]  # opens the memmap
    blob = pickle.dumps(ds)
    assert len(blob) < 10_000  # workers reopen the file instead of receiving a copy
    assert torch.equal(pickle.loads(blob)[3][0], ds[3][0])


def test_seq_len_longer_than_split_says_how_long_it_is(char_dm: TinyShakespeare) -> None:
    dm = TinyShakespeare(data_dir=SHARED_DATA, cache_dir=char_dm.cache_dir, seq_len=64, eval_seq_len=200_000)
    with pytest.raises(ValueError, match=r"eval_seq_len=200000 is too long for the val split.*111540 tokens"):
        dm.setup("fit")


def test_second_prepare_data_uses_cache(
    char_dm: TinyShakespeare, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = char_dm.cache_path()
    before = _snapshot(folder)

    def fail(*args: object, **kwargs: object) -> None:
        raise AssertionError("re-tokenised although the cache is complete")

    monkeypatch.setattr(token_files, "build_tokenizer", fail)
    monkeypatch.setattr(TinyShakespeare, "split_texts", fail)
    dm = TinyShakespeare(data_dir=SHARED_DATA, cache_dir=char_dm.cache_dir, tokenizer="char", seq_len=64)
    with caplog.at_level(logging.INFO, logger="ablate.data"):
        dm.prepare_data()
        dm.setup("fit")
    assert [r for r in caplog.records if "Using cached" in r.getMessage()]
    assert _snapshot(folder) == before
    assert dm.vocab_size == 65


def test_bpe_datamodule_fits_tokenizer_on_train_split_only(
    tmp_path: Path, shakespeare_text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    real_build = token_files.build_tokenizer

    def spy(kind: str, train_text: Iterable[str], *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        text = "".join(train_text)  # the stream the tokenizer is fitted on
        seen.append(text)
        return real_build(kind, text, *args, **kwargs)

    monkeypatch.setattr(token_files, "build_tokenizer", spy)
    dm = TinyShakespeare(data_dir=SHARED_DATA, cache_dir=tmp_path, tokenizer="bpe", vocab_size=300, seq_len=128)
    dm.setup("fit")  # prepares on demand
    assert seen == [shakespeare_text[: int(len(shakespeare_text) * 0.9)]]
    assert dm.vocab_size == dm.tokenizer.vocab_size == 300
    assert dm.cache_path().name.startswith("tinyshakespeare-bpe-300-")
    val = dm.datasets["val"]
    assert dm.tokenizer.decode(val.tokens) == shakespeare_text[int(len(shakespeare_text) * 0.9) :]


def test_killed_build_leaves_no_trusted_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _require(SHAKESPEARE)
    dm = TinyShakespeare(data_dir=SHARED_DATA, cache_dir=tmp_path, seq_len=64)

    def crash(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    with monkeypatch.context() as m:
        m.setattr(token_files, "write_tokens", crash)
        with pytest.raises(KeyboardInterrupt):
            dm.prepare_data()
    # neither the final folder nor the temporary one (the builders' lock file stays: it is empty; so does
    # the memo of the sources' content hashes, ablate.data.cache.HASH_MEMO)
    assert [p.name for p in tmp_path.iterdir() if p.suffix != ".lock" and p.name != ".source-sha256.json"] == []
    dm.cache_path().mkdir()  # an incomplete folder under the final name ...
    dm.setup("fit")  # ... is rebuilt, not trusted
    assert (dm.cache_path() / "meta.json").is_file() and dm.vocab_size == 65


def test_read_only_data_dir_is_never_written(tmp_path: Path) -> None:
    _require(SHAKESPEARE)
    data_dir = tmp_path / "data"
    (data_dir / "tinyshakespeare").mkdir(parents=True)
    (data_dir / "tinyshakespeare" / "input.txt").symlink_to(SHAKESPEARE)
    data_dir.chmod(0o555)
    before, shared_before = _snapshot(data_dir), _snapshot(SHARED_DATA)
    try:
        dm = TinyShakespeare(data_dir=data_dir, cache_dir=tmp_path / "cache", seq_len=64)
        dm.prepare_data()
        dm.setup("fit")
    finally:
        data_dir.chmod(0o755)
    assert _snapshot(data_dir) == before  # (the tests may run as root, so compare, don't trust 0o555)
    assert _snapshot(SHARED_DATA) == shared_before
    assert dm.cache_path().parent == tmp_path / "cache" and (dm.cache_path() / "train.bin").is_file()


# --- offline behaviour ---------------------------------------------------------------


def test_missing_shakespeare_offline_fails_fast_with_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"http://127.0.0.1:{_closed_port()}/input.txt"
    monkeypatch.setattr(TinyShakespeare, "URL", url)
    dm = TinyShakespeare(data_dir=tmp_path / "empty", cache_dir=tmp_path / "cache")
    start = time.monotonic()
    with pytest.raises(DataNotFoundError) as info:
        dm.prepare_data()
    assert time.monotonic() - start < 30
    msg = str(info.value)
    expected = tmp_path / "empty" / "tinyshakespeare" / "input.txt"
    for needle in (str(expected), url, "paths.data_dir=", "ABLATE_DATA_DIR"):
        assert needle in msg
    assert isinstance(info.value, FileNotFoundError)
    assert list(expected.parent.iterdir()) == []  # no partial download left behind


def test_download_url_is_atomic_and_works(tmp_path: Path) -> None:
    src = tmp_path / "src.txt"
    src.write_text("to be or not to be\n")
    dest = sources.download_url(src.as_uri(), tmp_path / "out" / "input.txt")
    assert dest.read_text() == "to be or not to be\n"
    assert [p.name for p in dest.parent.iterdir()] == ["input.txt"]


def test_wikitext_hf_offline_fails_fast_naming_local_alternative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import datasets

    def no_hub(*args: object, **kwargs: object) -> None:
        raise AssertionError("load_dataset must not be reached when offline")

    monkeypatch.setattr(datasets, "load_dataset", no_hub)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    dm = WikiText2(data_dir=tmp_path, cache_dir=tmp_path / "cache")
    start = time.monotonic()
    with pytest.raises(DataNotFoundError) as info:
        dm.prepare_data()
    assert time.monotonic() - start < 10
    msg = str(info.value)
    for needle in (
        "Salesforce/wikitext",
        "wikitext-2-raw-v1",
        "HF_HUB_OFFLINE",
        str(tmp_path / "wikitext-2"),
        "train.txt, valid.txt, test.txt",
        "wiki.train.tokens",
        "paths.data_dir=",
    ):
        assert needle in msg


def test_hub_unreachable_and_load_errors_are_wrapped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(DataNotFoundError, match=r"cannot connect to 127\.0\.0\.1(.|\n)*put x\.txt here"):
        sources.load_hub_dataset("org/ds", "cfg", local_alternative="put x.txt here")

    import datasets

    def network_down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("connection reset")

    monkeypatch.setattr(sources, "hub_offline_reason", lambda: None)
    monkeypatch.setattr(datasets, "load_dataset", network_down)
    with pytest.raises(DataNotFoundError, match=r"connection reset(.|\n)*put x\.txt here") as info:
        sources.load_hub_dataset("org/ds", "cfg", local_alternative="put x.txt here")
    assert isinstance(info.value.__cause__, ConnectionError)


def test_wikitext_prefers_local_files(tmp_path: Path) -> None:
    valid, test = _require(WIKI_SAMPLE / "valid.txt"), WIKI_SAMPLE / "test.txt"
    folder = tmp_path / "data" / "wikitext-2"
    folder.mkdir(parents=True)
    (folder / "wiki.valid.tokens").symlink_to(valid)
    dm = WikiText2(data_dir=tmp_path / "data", cache_dir=tmp_path / "cache", seq_len=128)
    with pytest.raises(DataNotFoundError, match="wiki.train.tokens"):  # half a file set is an error
        dm.prepare_data()
    (folder / "wiki.train.tokens").symlink_to(valid)
    (folder / "wiki.test.tokens").symlink_to(test)
    dm.setup("fit")  # no Hub access: would fail here without network
    assert dm.datasets["val"].num_tokens == len(valid.read_text(encoding="utf-8"))


# --- TextFiles -------------------------------------------------------------------------


def test_text_files_loads_wikitext_sample(tmp_path: Path) -> None:
    valid, test = _require(WIKI_SAMPLE / "valid.txt"), _require(WIKI_SAMPLE / "test.txt")
    dm = TextFiles(
        train_path=valid,
        val_path=valid,
        test_path=test,
        cache_dir=tmp_path,
        tokenizer="char",
        seq_len=128,
        batch_size=4,
    )
    dm.setup(None)
    valid_text, test_text = valid.read_text(encoding="utf-8"), test.read_text(encoding="utf-8")
    assert dm.vocab_size == len(set(valid_text) | set(test_text))
    assert dm.datasets["train"].num_tokens == dm.datasets["val"].num_tokens == len(valid_text)
    assert dm.tokenizer.decode(dm.datasets["test"].tokens[:1000]) == test_text[:1000]
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 128)


def test_text_files_relative_to_data_dir_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("abcdefgh" * 100)
    dm = TextFiles(
        train_path="a.txt", val_path="a.txt", data_dir=tmp_path, cache_dir=tmp_path / "c", seq_len=16, batch_size=2
    )
    dm.setup("test")
    assert dm.vocab_size == 8 and dm.datasets["test"].num_tokens == 800  # test defaults to val
    missing = TextFiles(train_path="a.txt", val_path="nope.txt", data_dir=tmp_path, cache_dir=tmp_path / "c")
    with pytest.raises(DataNotFoundError, match=str(tmp_path / "nope.txt")):
        missing.prepare_data()


# --- stale caches (issue 32 item 5) ----------------------------------------------------------


def _text_files(folder: Path, train: str) -> TextFiles:
    return TextFiles(
        train_path=folder / "train.txt",
        val_path=folder / "val.txt",
        cache_dir=folder / "cache",
        seq_len=4,
        batch_size=2,
    )


def test_a_same_size_same_mtime_replacement_is_not_served_from_the_cache(tmp_path: Path) -> None:
    """data=text: the train file replaced by other text of the same size, its mtime set back: the
    cache is keyed by content, so the new text is tokenised (it was 'Using cached tokens' of the old)."""
    train, val = tmp_path / "train.txt", tmp_path / "val.txt"
    train.write_text("abcabcabcabcabcabcabcabc\n")
    val.write_text("abcabc\n")
    first = _text_files(tmp_path, "train")
    first.prepare_data()
    before = first.cache_path()
    stamp = train.stat().st_mtime_ns
    train.write_text("cbacbacbacbacbacbacbacba\n")  # same size, in place (same inode)
    os.utime(train, ns=(stamp, stamp))
    assert train.stat().st_size == 25 and train.stat().st_mtime_ns == stamp
    second = _text_files(tmp_path, "train")
    assert second.cache_path() != before
    second.setup("fit")
    tokens = second.datasets["train"].tokens[:3].tolist()
    assert second.tokenizer.decode(tokens) == "cba"


def test_an_unchanged_source_is_hashed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ablate.data import cache

    path = tmp_path / "input.txt"
    path.write_text("some text\n" * 100)
    hashed: list[Path] = []
    real = cache.sha256_file
    monkeypatch.setattr(cache, "sha256_file", lambda p: hashed.append(p) or real(p))
    first = cache.content_sha256(path, tmp_path / "c")
    assert cache.content_sha256(path, tmp_path / "c") == first and len(hashed) == 2  # just written: not remembered
    monkeypatch.setattr(cache, "RACY_NS", 0)  # as if written long ago
    cache.content_sha256(path, tmp_path / "c")
    assert cache.content_sha256(path, tmp_path / "c") == first and len(hashed) == 3  # the memo
    stamp = path.stat().st_mtime_ns
    path.write_text("some texT\n" * 100)  # same size, in place
    os.utime(path, ns=(stamp, stamp))  # the ctime still moves: the memo does not match
    assert cache.content_sha256(path, tmp_path / "c") != first and len(hashed) == 4
