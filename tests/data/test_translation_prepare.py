"""Preparing a translation corpus at paper scale (issue 20): the files' lines counted before anything
is trained (misaligned or non-UTF-8 files fail in seconds), the disk space checked before the token
files are written, and the joint BPE learned on a sample of ``data.bpe_train_mb`` MB."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir

from ablate.data import cache, translation_cache, translation_text
from ablate.data.cache import CacheSpaceError
from ablate.data.sources import DataFormatError
from ablate.data.tokenizers import BPETokenizer
from ablate.data.translation_data import ParallelFiles
from ablate.data.translation_text import MisalignedFilesError, count_lines, read_lines
from ablate.errors import ConfigError, UserError
from ablate.run.plan import check_config

CONF = Path(__file__).resolve().parents[2] / "conf"

pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py

WORDS = ["haus", "baum", "ein", "großes", "kleines", "über", "straße", "hund", "katze", "wald"]


def _write(path: Path, lines: Iterable[str], end: str = "\n") -> Path:
    data = "".join(f"{line}{end}" for line in lines).encode("utf-8")
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(data))
    else:
        path.write_bytes(data)
    return path


def _sentences(n: int, seed: int, words: list[str] = WORDS) -> list[str]:
    return [" ".join(words[(seed + i * 7 + j * 3) % len(words)] for j in range(3 + (i + seed) % 9)) for i in range(n)]


def _corpus(folder: Path, train: int = 400, val: int = 40, suffix: str = "") -> dict[str, Path]:
    return {
        "train_src": _write(folder / f"train.de{suffix}", _sentences(train, 0)),
        "train_tgt": _write(folder / f"train.en{suffix}", _sentences(train, 1)),
        "val_src": _write(folder / f"val.de{suffix}", _sentences(val, 2)),
        "val_tgt": _write(folder / f"val.en{suffix}", _sentences(val, 3)),
    }


def _module(files: dict[str, Path], cache_dir: Path, **kw: Any) -> ParallelFiles:
    paths = {key: str(path) for key, path in files.items()}
    return ParallelFiles(
        **paths, cache_dir=cache_dir, src_lang="de", tgt_lang="en", vocab_size=300, max_tokens=256, **kw
    )


@pytest.fixture
def no_bpe(monkeypatch: pytest.MonkeyPatch) -> None:
    """Training a BPE fails the test: what is checked must fail before it."""

    def trained(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the BPE was trained before the check")

    monkeypatch.setattr(translation_cache, "train_joint_bpe", trained)


# --- counting lines ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"one\ntwo\n",
        b"one\ntwo",  # no line end after the last line
        b"\n\n\n",  # empty sentences are sentences
        b"dos\r\nline\r\n",
        b"old\rmac\rlast",  # a lone \r ends a line for Python's text mode too
        b"mixed\r\n\rend\n\r",
        "über straße\nnäher\n".encode() * 5,
    ],
)
@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_line_counts_are_the_sentences_a_pass_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, data: bytes, suffix: str
) -> None:
    """Counted in binary blocks (here 3 bytes: lines, characters and \\r\\n across block ends), the
    lines are those :func:`read_lines` yields, and the bytes the decompressed size."""
    monkeypatch.setattr(translation_text, "COUNT_BYTES", 3)
    path = tmp_path / f"side{suffix}"
    path.write_bytes(gzip.compress(data) if suffix else data)
    assert count_lines(path) == (len(read_lines(path)), len(data))


def test_misaligned_files_fail_before_the_bpe_naming_both_files_and_counts(tmp_path: Path, no_bpe: None) -> None:
    files = _corpus(tmp_path)
    files["train_tgt"] = _write(tmp_path / "short.en.gz", _sentences(399, 1))
    with pytest.raises(MisalignedFilesError) as err:
        _module(files, tmp_path / "cache").prepare_data()
    assert isinstance(err.value, UserError)
    assert f"de: {files['train_src']} (400 lines), en: {files['train_tgt']} (399 lines)" in str(err.value)
    assert "the train split" in str(err.value)
    files = _corpus(tmp_path)
    files["val_src"] = _write(tmp_path / "val.de", _sentences(41, 2))  # the validation split is checked as early
    with pytest.raises(MisalignedFilesError, match=r"the val split .*val\.de \(41 lines\), en: .*val\.en \(40 lines\)"):
        _module(files, tmp_path / "cache").prepare_data()
    assert not any((tmp_path / "cache").rglob("*.ids"))


def test_a_file_that_is_not_utf8_fails_before_the_bpe(tmp_path: Path, no_bpe: None) -> None:
    files = _corpus(tmp_path)
    files["val_tgt"].write_bytes("caf\xe9\n".encode("latin-1") * 40)
    with pytest.raises(DataFormatError, match=r"val\.en is not valid UTF-8 \(byte b'\\xe9\\n.*' at offset 3\)"):
        _module(files, tmp_path / "cache").prepare_data()


# --- disk space ----------------------------------------------------------------------------


def test_a_cache_the_disk_cannot_hold_is_refused_before_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = _corpus(tmp_path)
    monkeypatch.setattr(
        cache.shutil, "disk_usage", lambda path: type("Usage", (), {"free": 1000, "total": 10**9, "used": 0})()
    )
    with pytest.raises(
        CacheSpaceError, match=r"needs about [\d.]+ kB but .* has 1\.0 kB free.*paths\.cache_dir"
    ) as err:
        _module(files, tmp_path / "cache").prepare_data()
    assert isinstance(err.value, UserError) and err.value.errno == 28
    assert not any((tmp_path / "cache").rglob("*.ids")) and not any((tmp_path / "cache").rglob("*.offsets"))


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_the_disk_estimate_is_a_little_above_what_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, suffix: str
) -> None:
    """The estimate (from the files' sizes, gzipped ones too, and the tokens per byte of the first
    lines) covers the token and text files, with no more than the 10% margin and rounding to spare."""
    needed: list[int | None] = []
    monkeypatch.setattr(translation_cache, "check_free_space", lambda folder, n: needed.append(n))
    dm = _module(_corpus(tmp_path, suffix=suffix), tmp_path / "cache")
    dm.prepare_data()
    written = sum(p.stat().st_size for p in dm.cache_path().iterdir() if p.suffix in (".ids", ".offsets", ".txt"))
    assert len(needed) == 1 and needed[0] is not None
    assert written <= needed[0] <= 1.15 * written


# --- the BPE's training sample -------------------------------------------------------------


def test_bpe_train_mb_learns_on_the_first_pairs_and_keys_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The joint BPE learns on the first pairs up to about ``bpe_train_mb`` MB (both sides, the
    source lines then the target lines, whole pairs); every token file still holds every pair."""
    files = _corpus(tmp_path, train=2000)
    learned: list[list[str]] = []
    train_joint_bpe = translation_cache.train_joint_bpe

    def recording(lines: Iterable[str], vocab_size: int) -> BPETokenizer:
        learned.append(list(lines))
        return train_joint_bpe(learned[-1], vocab_size)

    monkeypatch.setattr(translation_cache, "train_joint_bpe", recording)
    sample = _module(files, tmp_path / "cache", bpe_train_mb=0.01)
    sample.setup()
    src, tgt = read_lines(files["train_src"]), read_lines(files["train_tgt"])
    sizes = [len(s.encode()) + len(t.encode()) + 2 for s, t in zip(src, tgt)]
    pairs = next(n for n in range(1, len(sizes) + 1) if sum(sizes[:n]) >= 10_000)  # the pair crossing 0.01 MB is in
    assert 50 < pairs < 500
    assert learned == [src[:pairs] + tgt[:pairs]]
    assert len(sample.datasets["train"].src) == 2000
    whole = _module(files, tmp_path / "cache")
    assert whole.cache_path() != sample.cache_path()
    old_key = {  # unset, the cache keeps the folder earlier versions built
        "format": translation_cache.CACHE_FORMAT_VERSION,
        "corpus": "parallel",
        "sources": whole.source_key(),
        "langs": ["de", "en"],
        "max_train_pairs": None,
    }
    digest = hashlib.sha256(json.dumps(old_key, sort_keys=True).encode()).hexdigest()[:10]
    assert whole.cache_path().name == f"parallel-bpe300-{digest}"
    with pytest.raises(ValueError, match="bpe_train_mb must be positive"):
        _module(files, tmp_path / "cache", bpe_train_mb=0)


@pytest.fixture(scope="module")
def hydra_init():  # type: ignore[no-untyped-def]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield


@pytest.mark.parametrize("data", ["multi30k", "iwslt14", "iwslt2017", "wmt14"])
def test_every_translation_corpus_takes_bpe_train_mb(hydra_init: None, data: str, tmp_path: Path) -> None:
    cfg = compose(config_name="train", overrides=["task=translation", f"data={data}", "data.bpe_train_mb=50"])
    check_config(cfg)  # the key is one the data module reads, and a valid value


@pytest.mark.parametrize("value", ["0", "-1", "lots", "true"])
def test_a_bad_bpe_train_mb_fails_with_the_config_naming_the_key(hydra_init: None, value: str) -> None:
    """Checked with the config (train.py's check_config: before any data module is made)."""
    overrides = ["task=translation", "data=parallel", "data.train_src=x", "data.train_tgt=y", "data.val_src=x"]
    cfg = compose(config_name="train", overrides=[*overrides, "data.val_tgt=y", f"data.bpe_train_mb={value}"])
    # the task's own check, before the generic type check: one message for any value that is not a positive number
    with pytest.raises(ConfigError, match=rf"(?i)data\.bpe_train_mb={value}: give a positive number of MB"):
        check_config(cfg)


def test_a_test_or_validation_stage_reads_no_training_pair(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """eval.py on a translation checkpoint printed "29000 training pairs in 249 batches": it read the
    training data to evaluate."""
    files = {**_corpus(tmp_path), "test_src": _write(tmp_path / "test.de", _sentences(30, 4))}
    files["test_tgt"] = _write(tmp_path / "test.en", _sentences(30, 5))
    _module(files, tmp_path / "cache").prepare_data()  # the cache, as training left it
    for stage, split in (("test", "test"), ("validate", "val")):
        module = _module(files, tmp_path / "cache")
        with caplog.at_level("INFO"):
            module.setup(stage)
        assert set(module.datasets) == {split} and len(module.sources(split)) == len(module.references(split))
        assert "training pairs" not in caplog.text
    module.setup("fit")  # training reads them all
    assert set(module.datasets) == {"train", "val", "test"}
