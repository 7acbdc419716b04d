"""Streaming preparation (issue 20): chunked reading, fitting and encoding give what the whole
text would; one builder per cache; the disk is checked before writing; progress is reported."""

from __future__ import annotations

import gzip
import logging
import threading
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from ablate.data import cache, lm_data, progress
from ablate.data.cache import CacheSpaceError, ensure_cache, write_meta
from ablate.data.lm_data import TextFiles, WikiText2
from ablate.data.sources import DataFormatError
from ablate.data.text_stream import SplitText, join_rows, read_file_chunks
from ablate.data.tokenizers import BPETokenizer, CharTokenizer
from ablate.errors import ConfigError, UserError
from ablate.tasks.lm import LanguageModelTask

TEXT = "".join(f"line {i}: the quick brown fox, naïve café {i * 7919 % 1000}\n" for i in range(3000))


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


# --- reading in chunks ----------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True])
def test_file_chunks_rebuild_the_text_and_end_after_a_newline(tmp_path: Path, gz: bool) -> None:
    path = tmp_path / ("corpus.txt.gz" if gz else "corpus.txt")
    if gz:
        path.write_bytes(gzip.compress(TEXT.encode()))
    else:
        _write(path, TEXT)
    chunks = list(read_file_chunks(path, size=1000))
    assert "".join(chunks) == TEXT
    assert len(chunks) > 50
    assert all(c.endswith("\n") and len(c.encode()) >= 1000 for c in chunks[:-1])


def test_text_without_final_newline_keeps_its_last_line(tmp_path: Path) -> None:
    path = _write(tmp_path / "t.txt", "a\nb\nlast line")
    assert "".join(read_file_chunks(path, size=2)) == "a\nb\nlast line"


def test_non_utf8_byte_is_named_with_its_file_offset(tmp_path: Path) -> None:
    path = tmp_path / "latin1.txt"
    good = ("x" * 99 + "\n") * 50  # 5,000 bytes, then a Latin-1 byte
    path.write_bytes(good.encode() + "café\n".encode("latin-1"))
    with pytest.raises(DataFormatError, match=r"latin1\.txt is not valid UTF-8 .* at offset 5,003") as err:
        list(read_file_chunks(path, size=1000))
    assert isinstance(err.value, UserError)  # exit code 2, no traceback


def test_rows_are_joined_into_chunks_of_lines() -> None:
    rows = ["first", "", "third\n", "fourth"]
    assert "".join(join_rows(rows, size=8)) == "first\n\nthird\nfourth\n"
    assert all(c.endswith("\n") for c in join_rows(rows, size=8))


def test_limited_pass_stops_after_the_sample(tmp_path: Path) -> None:
    text = SplitText.from_file(_write(tmp_path / "t.txt", TEXT))
    sample = "".join(text.limited(10_000))
    assert TEXT.startswith(sample)
    assert 10_000 <= len(sample.encode()) < 10_000 + 2 * (1 << 16)
    assert len(sample) < len(TEXT)


# --- fitting and encoding a stream ------------------------------------------------------


def test_char_fit_on_a_stream_equals_the_fit_on_the_whole_text() -> None:
    pieces = [TEXT[i : i + 777] for i in range(0, len(TEXT), 777)]
    assert CharTokenizer.fit(pieces, 0).chars == CharTokenizer.from_text(TEXT).chars


def test_bpe_stream_encoding_equals_encoding_each_chunk() -> None:
    """Batched (``encode_batch_fast``, all cores) gives the ids of encoding each chunk alone."""
    tok = BPETokenizer.train(TEXT, vocab_size=400)
    chunks = list(SplitText.from_string(TEXT, "t").open())
    streamed = np.concatenate([ids for ids, _ in tok.encode_stream(chunks)])
    one_by_one = np.concatenate([tok.encode(c) for c in chunks])
    np.testing.assert_array_equal(streamed, one_by_one)
    assert sum(n for _, n in tok.encode_stream(chunks)) == len(TEXT.encode())
    assert tok.decode(streamed) == TEXT


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_text_files_cache_decodes_back_to_each_file(tmp_path: Path, kind: str) -> None:
    splits = {name: _write(tmp_path / f"{name}.txt", TEXT[n:] + TEXT[:n]) for name, n in [("tr", 0), ("va", 999)]}
    dm = TextFiles(splits["tr"], splits["va"], cache_dir=tmp_path / "cache", tokenizer=kind, vocab_size=400, seq_len=8)
    dm.setup(None)
    for split, path in [("train", splits["tr"]), ("val", splits["va"]), ("test", splits["va"])]:
        assert dm.tokenizer is not None
        assert dm.tokenizer.decode(dm.datasets[split].tokens) == path.read_text(encoding="utf-8"), split


def test_bpe_train_mb_fits_the_merges_on_a_sample_and_keys_the_cache(tmp_path: Path) -> None:
    train = _write(tmp_path / "train.txt", TEXT * 4)
    val = _write(tmp_path / "val.txt", TEXT[:5000])
    whole = TextFiles(train, val, cache_dir=tmp_path / "c", tokenizer="bpe", vocab_size=400, seq_len=8)
    sample = TextFiles(
        train, val, cache_dir=tmp_path / "c", tokenizer="bpe", vocab_size=400, seq_len=8, bpe_train_mb=0.07
    )
    assert whole.cache_path() != sample.cache_path()
    sample.setup("fit")
    assert sample.tokenizer is not None
    assert sample.tokenizer.decode(sample.datasets["train"].tokens) == TEXT * 4  # every token file is whole
    with pytest.raises(ValueError, match="bpe_train_mb must be positive"):
        TextFiles(train, val, cache_dir=tmp_path / "c", tokenizer="bpe", bpe_train_mb=0)


# --- the cache: one builder, stale leftovers, disk space ----------------------------------


def _builder(calls: list[str], started: threading.Event | None = None, release: threading.Event | None = None):  # type: ignore[no-untyped-def]
    def build(folder: Path) -> None:
        calls.append(folder.name)
        if started is not None and release is not None:
            started.set()
            assert release.wait(10)
        (folder / "tokens.bin").write_bytes(b"\0" * 8)
        write_meta(folder, {})

    return build


def test_a_second_builder_waits_for_the_first_and_builds_nothing(tmp_path: Path) -> None:
    final, calls = tmp_path / "corpus-char-abc", []
    started, release = threading.Event(), threading.Event()
    first = threading.Thread(target=ensure_cache, args=(final, _builder(calls, started, release)))
    first.start()
    assert started.wait(10)
    second_done = threading.Event()
    second = threading.Thread(target=lambda: (ensure_cache(final, _builder(calls)), second_done.set()))
    second.start()
    assert not second_done.wait(0.5)  # blocked on the lock while the first builds
    release.set()
    first.join(10)
    second.join(10)
    assert second_done.is_set()
    assert len(calls) == 1  # the corpus was tokenised once
    assert (final / "tokens.bin").is_file()


def test_what_a_killed_build_left_is_removed_by_the_next(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    final = tmp_path / "corpus-char-abc"
    stale = tmp_path / ".corpus-char-abc.tmp-dead"
    stale.mkdir()
    (stale / "train.bin").write_bytes(b"half")
    with caplog.at_level(logging.WARNING, logger=cache.__name__):
        ensure_cache(final, _builder([]))
    assert not stale.exists()
    assert "left by a build that did not finish" in caplog.text


def test_a_cache_the_disk_cannot_hold_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    train = _write(tmp_path / "train.txt", TEXT)
    dm = TextFiles(train, train, cache_dir=tmp_path / "cache", tokenizer="char", seq_len=8)
    monkeypatch.setattr(
        cache.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 1000, "total": 10**9, "used": 0})()
    )
    with pytest.raises(
        CacheSpaceError, match=r"needs about [\d.]+ kB but .* has 1\.0 kB free.*paths\.cache_dir"
    ) as err:
        dm.prepare_data()
    assert isinstance(err.value, UserError) and err.value.errno == 28
    assert not any((tmp_path / "cache").rglob("*.bin"))


# --- progress ------------------------------------------------------------------------------


def test_progress_in_a_log_is_plain_lines_with_rate_and_eta(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(progress, "LOG_EVERY_S", 0.0)
    monkeypatch.setattr(progress, "QUIET_BELOW_S", 0.0)
    with (
        caplog.at_level(logging.INFO, logger=progress.__name__),
        progress.Progress("Tokenising wiki train", 4_000_000, terminal=False) as p,
    ):
        p.advance(1_000_000)
        p.advance(1_000_000)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("Tokenising wiki train: 1 MB of 4 MB (25%), ")
    assert "MB/s, ETA " in lines[0]
    assert "\r" not in "".join(lines)
    assert lines[-1].startswith("Tokenising wiki train: 2 MB in ")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"tokenizer": "char", "bpe_train_mb": 5}, "applies to data.tokenizer=bpe only, not char"),
        ({"tokenizer": "bpe", "bpe_train_mb": 0}, "give a positive number of MB"),
        ({"tokenizer": "bpe", "bpe_train_mb": "lots"}, "give a positive number of MB"),
    ],
)
def test_bpe_train_mb_is_checked_before_any_data_is_read(data: dict[str, object], message: str) -> None:
    cfg = OmegaConf.create({"data": {"seq_len": 8, **data}, "eval": {}})
    with pytest.raises(ConfigError, match=message):
        LanguageModelTask.check_config(cfg)
    LanguageModelTask.check_config(OmegaConf.create({"data": {"tokenizer": "bpe", "bpe_train_mb": 50}, "eval": {}}))


def test_a_hub_corpus_is_streamed_row_by_row(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Online, WikiText asks the Hub for a stream (nothing downloaded whole) and tokenises it like a file."""
    rows = {"train": TEXT.splitlines()[:2000], "validation": ["= Valid =", "", "text"], "test": ["= Test =", "x"]}
    asked: dict[str, object] = {}

    class Stream:  # an IterableDataset: rows one at a time, a fresh pass per iteration
        def __init__(self, lines: list[str]) -> None:
            self.lines = lines

        def __iter__(self):  # type: ignore[no-untyped-def]
            return iter({"text": line} for line in self.lines)

    def fake_hub(path: str, name: str | None = None, **kwargs: object) -> dict[str, Stream]:
        asked.update(kwargs)
        return {split: Stream(lines) for split, lines in rows.items()}

    monkeypatch.setattr(lm_data, "load_hub_dataset", fake_hub)
    dm = WikiText2(data_dir=tmp_path / "no-local-files", cache_dir=tmp_path / "cache", seq_len=8)
    dm.setup(None)
    assert asked.get("streaming") is True
    assert dm.tokenizer is not None
    assert dm.tokenizer.decode(dm.datasets["train"].tokens) == "".join(line + "\n" for line in rows["train"])
    assert dm.tokenizer.decode(dm.datasets["test"].tokens) == "= Test =\nx\n"
