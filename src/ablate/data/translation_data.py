"""Parallel corpora for translation: a shared BPE vocabulary, cached token ids and token-based
batching.

Corpora (``data=`` options, ``conf/data/*.yaml``):

* :class:`ParallelCorpus`: a corpus with named splits, read from local files
  ``{data_dir}/{local_dir}/{split_file}.{lang}`` (plain or ``.gz``) when they are there, else from
  the Hugging Face Hub (``hub_path``/``hub_config``). ``multi30k``, ``iwslt14``, ``iwslt2017`` and
  ``wmt14`` are configurations of it. Offline, a missing corpus fails within seconds with a
  message that names the local files that would replace the download (:mod:`ablate.data.sources`).
* :class:`ParallelFiles` (``data=parallel``): any pair of local files per split.

Direction: ``src_lang`` -> ``tgt_lang``; either direction of a pair uses the same cache.

Vocabulary: one byte-level BPE (Hugging Face ``tokenizers``) learned on the source *and* target
sides of the training split (a joint vocabulary, so the embeddings can be tied three ways), with
``<pad>`` = 0, ``<s>`` = 1, ``</s>`` = 2. Byte-level means every string is representable and
decoding gives the text back exactly (sacreBLEU then scores detokenised output). Source sequences
are ``tokens </s>``; the decoder reads ``<s> tokens`` and predicts ``tokens </s>``.

Cache, one folder per corpus sources / vocabulary size (written under a temporary name, renamed
when complete)::

    {cache_dir}/{name}-bpe{V}-{hash}/  tokenizer.json  {split}.{lang}.ids  {split}.{lang}.offsets
                                       {val,test}.{lang}.txt  meta.json

Corpora of millions of pairs (WMT14 En-De: 4.5 M) are prepared in bounded memory: the files are
streamed in batches of :data:`ENCODE_LINES` lines (both sides in step), the BPE learns from a stream
of lines, and each side of a split is one flat file of token ids (``uint16`` while the vocabulary
fits, else ``int32``; ``meta.json`` names it) plus an ``int64`` offsets file (sentence ``i`` is
``ids[offsets[i]:offsets[i + 1]]``). :meth:`TranslationDataModule.setup` memory-maps the ids and
batches from the lengths, so no Python object is made per sentence until a batch is collated.

Batching (as fairseq's ``--max-tokens``): pairs are sorted by length (target, then source) and cut
into batches whose padded size ``n_sentences x longest side`` stays within ``max_tokens``; the
training batches are fixed once and visited in a new random order every epoch. Padding is little
because neighbours in the sorted order have nearly equal lengths; the fraction is reported
(:attr:`TranslationDataModule.padding_fraction`, logged as ``data/padding_fraction``).

``batch_size`` is the number of such token batches per optimiser step over all devices (fairseq's
``update_freq`` x world size; default 1): ``train.py`` derives gradient accumulation from it and
``micro_batch_size`` exactly as for language modelling.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import json
import logging
import os
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack
from functools import partial
from itertools import chain, islice, zip_longest
from pathlib import Path
from typing import IO, Any, NamedTuple

import lightning as L
import numpy as np
import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers
from torch.utils.data import DataLoader, Dataset

from ablate.data.cache import CacheCorruptError, ensure_cache, file_fingerprint, read_meta, write_meta
from ablate.data.samplers import ResumableSampler
from ablate.data.sources import (
    DataFormatError,
    DataNotFoundError,
    default_cache_dir,
    default_data_dir,
    load_hub_dataset,
    missing_file_message,
)
from ablate.data.tokenizers import BPETokenizer, Tokenizer

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
SPECIALS = ("<pad>", "<s>", "</s>")
PAD, BOS, EOS = 0, 1, 2
CACHE_FORMAT_VERSION = 3  # 2: checksums in meta.json (ablate.data.cache); 3: flat id + offsets files
ENCODE_LINES = 10_000
"""Lines per side read, encoded and written at a time. HF's batch encoding keeps a few KB per line
(its Encoding objects) until the batch is written, so this bounds that memory (~40 MB); a few
thousand lines per call already keep all of its Rust threads busy."""


# ------------------------------------------------------------------------------ tokenizer


def train_joint_bpe(lines: Iterable[str], vocab_size: int) -> BPETokenizer:
    """Byte-level BPE with the three special tokens at ids 0, 1, 2, learned on ``lines``.

    A space is put before every sentence (``add_prefix_space``), so a word is one token whether
    or not it starts the sentence; :func:`detokenize` removes it again.
    """
    if vocab_size < 256 + len(SPECIALS):
        raise ValueError(f"data.vocab_size={vocab_size} is below the byte alphabet + specials ({256 + len(SPECIALS)})")
    tok = HFTokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(lines, trainer=trainer)
    for i, name in enumerate(SPECIALS):
        assert tok.token_to_id(name) == i, f"special token {name} is not id {i}"
    return BPETokenizer(tok)


def special_ids(tokenizer: Tokenizer) -> tuple[int, int, int]:
    """(pad, bos, eos) of a translation tokenizer (checked, so a wrong tokenizer fails loudly)."""
    hf = getattr(tokenizer, "hf", None)
    ids = tuple(hf.token_to_id(name) if hf is not None else None for name in SPECIALS)
    if ids != (PAD, BOS, EOS):
        raise ValueError(f"not a translation tokenizer: special tokens {SPECIALS} are at {ids}, expected (0, 1, 2)")
    return ids


def encode_lines(tokenizer: Tokenizer, lines: Sequence[str]) -> list[list[int]]:
    hf = getattr(tokenizer, "hf", None)
    if hf is not None:
        return [e.ids for e in hf.encode_batch_fast(list(lines))]  # no character offsets: less memory
    return [tokenizer.encode(line) for line in lines]


def ids_dtype(vocab_size: int) -> np.dtype:
    """The narrowest dtype of the cached ids: ``uint16`` halves a WMT-size cache (and the pages a
    batch touches) while every id fits."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.int32)


def encode_flat(tokenizer: Tokenizer, lines: Sequence[str], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The ids of ``lines`` end to end, and each line's length: the lists of one batch become two
    arrays at once, so a corpus never exists as a list of lists."""
    seqs = encode_lines(tokenizer, lines)
    lengths = np.fromiter(map(len, seqs), np.int64, count=len(seqs))
    return np.fromiter(chain.from_iterable(seqs), dtype, count=int(lengths.sum())), lengths


def detokenize(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """Text of generated ids (special tokens dropped, the prefix space removed)."""
    return tokenizer.decode([i for i in ids if i > EOS]).strip()


# ------------------------------------------------------------------------------ reading files


class LineSource(NamedTuple):
    """One language of one split: ``name`` (a path, for messages) and ``lines()``, which reads the
    sentences afresh each time (the BPE learns in one pass over the training text, the ids are
    written in a second), one at a time."""

    name: str
    lines: Callable[[], Iterator[str]]


def iter_lines(path: Path) -> Iterator[str]:
    """One sentence per line, plain or gzipped UTF-8, surrounding whitespace removed; streamed, so a
    file of millions of lines is never held whole. A file that is not UTF-8 raises
    :class:`DataFormatError` naming it (not a pathless ``UnicodeDecodeError``)."""
    opener: Callable[..., IO[str]] = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            yield from (line.strip() for line in f)
    except UnicodeDecodeError as err:
        raise DataFormatError(
            f"{path} is not valid UTF-8 (byte {err.object[err.start : err.start + 4]!r}): convert it, "
            f"e.g. `iconv -f latin1 -t utf-8 {path} > fixed.txt`"
        ) from None


def read_lines(path: Path) -> list[str]:
    """All the lines of a small file, as :func:`iter_lines` reads them (``eval.py``'s source and
    reference files)."""
    return list(iter_lines(path))


def file_source(path: Path) -> LineSource:
    return LineSource(str(path), partial(iter_lines, path))


def hub_source(rows: Any, lang: str, name: str) -> LineSource:
    """One language of a Hub split (``datasets.Dataset``), read ``ENCODE_LINES`` rows at a time
    rather than as a whole column; runs of whitespace become one space."""

    def lines() -> Iterator[str]:
        nested = "translation" in rows.column_names
        for batch in rows.iter(batch_size=ENCODE_LINES):
            texts = (r[lang] for r in batch["translation"]) if nested else batch[lang]
            yield from (" ".join(t.split()) for t in texts)

    return LineSource(f"{name} [{lang}]", lines)


def paired_lines(what: str, sides: Mapping[str, LineSource]) -> Iterator[tuple[str, ...]]:
    """The sides' lines in step. A side that ends before the other raises a ``ValueError`` naming
    every file and its line count (counted to the end: a misaligned corpus is an error, not a
    shorter one)."""
    rows = zip_longest(*(side.lines() for side in sides.values()))
    for n, row in enumerate(rows):  # n: the rows before this one
        if None in row:  # a side has ended: count the others' remaining lines
            rest = [int(x is not None) for x in row]
            for more in rows:
                rest = [r + (x is not None) for r, x in zip(rest, more)]
            counts = ", ".join(f"{lang}: {s.name} ({n + r:,} lines)" for (lang, s), r in zip(sides.items(), rest))
            raise ValueError(f"{what} has different line counts per language: {counts}")
        yield row


def chunks(rows: Iterator[tuple[str, ...]], size: int) -> Iterator[list[tuple[str, ...]]]:
    while chunk := list(islice(rows, size)):
        yield chunk


def head_lines(path: Path, n: int) -> list[str]:
    """The first ``n`` lines of a cached validation/test text (small: read whole)."""
    return path.read_text(encoding="utf-8").split("\n")[:n]


def find_file(folder: Path, stem: str) -> Path | None:
    """``folder/stem`` or ``folder/stem.gz``, whichever exists."""
    for name in (stem, f"{stem}.gz"):
        if (folder / name).is_file():
            return folder / name
    return None


# ------------------------------------------------------------------------------ batches


class PairBatch(NamedTuple):
    """One batch: ``src`` (B, S) ``tokens </s>``, ``tgt_in`` (B, T) ``<s> tokens``, ``tgt_out``
    (B, T) ``tokens </s>``, all right-padded with 0, and ``index`` (B,) the pairs' positions in
    their split (to put decoded sentences back in order)."""

    src: torch.Tensor
    tgt_in: torch.Tensor
    tgt_out: torch.Tensor
    index: torch.Tensor  # type: ignore[assignment]  # a field named like tuple.index (the pairs' positions)


def make_batches(
    src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int, max_sentences: int | None = None
) -> list[np.ndarray]:
    """Cut the pairs, sorted by (target length, source length), into batches whose padded size
    (sentences x longest side) is at most ``max_tokens`` (a longer single pair gets its own batch)."""
    order = np.lexsort((src_lens, tgt_lens))  # by target length, then source length; stable
    longest = np.maximum(src_lens, tgt_lens)
    batches, start, width = [], 0, 0
    for pos, i in enumerate(order):
        new_width = max(width, int(longest[i]))
        n = pos - start
        if n and ((n + 1) * new_width > max_tokens or (max_sentences and n >= max_sentences)):
            batches.append(order[start:pos])
            start, new_width = pos, int(longest[i])
        width = new_width
    if start < len(order):
        batches.append(order[start:])
    return batches


def padding_fraction(src_lens: np.ndarray, tgt_lens: np.ndarray, batches: Sequence[np.ndarray]) -> float:
    """Share of padded positions among all positions of the batches (source and target sides)."""
    real = padded = 0
    for b in batches:
        s, t = src_lens[b], tgt_lens[b]
        real += int(s.sum() + t.sum())
        padded += len(b) * int(s.max() + t.max())
    return 1.0 - real / max(1, padded)


class TokenWriter:
    """Appends sentences to an ids file (their ids end to end) and an offsets file (``int64``: 0,
    then where each sentence ends), so a split is written batch by batch, never held whole."""

    def __init__(self, ids: IO[bytes], offsets: IO[bytes], dtype: np.dtype) -> None:
        self.ids, self.offsets, self.dtype, self.tokens = ids, offsets, dtype, 0
        offsets.write(np.zeros(1, np.int64).tobytes())

    def append(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        self.ids.write(ids.astype(self.dtype, copy=False).tobytes())
        self.offsets.write((self.tokens + np.cumsum(lengths)).tobytes())
        self.tokens += int(lengths.sum())


def map_ids(path: Path, dtype: np.dtype) -> np.ndarray:
    """An id file memory-mapped read-only (an empty file cannot be mapped: an empty array)."""
    return np.memmap(path, dtype=dtype, mode="r") if path.stat().st_size else np.zeros(0, dtype)


class TokenSide:
    """The sentences of one side of a split as views into its memory-mapped id file: item ``i`` is
    ``ids[starts[i] : starts[i] + lengths[i]]``. Millions of sentences cost two integer arrays
    instead of millions of Python objects, and a batch reads only its own sentences' pages."""

    def __init__(self, path: Path, dtype: np.dtype, starts: np.ndarray, lengths: np.ndarray) -> None:
        self.path, self.dtype, self.starts, self.lengths = path, dtype, starts, lengths
        self.ids = map_ids(path, dtype)

    @classmethod
    def open(cls, stem: Path, dtype: np.dtype) -> TokenSide:
        """The files ``{stem}.ids`` and ``{stem}.offsets`` written by :class:`TokenWriter`."""
        offsets = np.fromfile(f"{stem}.offsets", dtype=np.int64)
        return cls(Path(f"{stem}.ids"), dtype, offsets[:-1], np.diff(offsets))

    def subset(self, index: np.ndarray, limit: int | None = None) -> TokenSide:
        """Sentences ``index``, in that order, each cut to at most ``limit`` tokens."""
        part = copy.copy(self)
        part.starts, part.lengths = self.starts[index], self.lengths[index]
        if limit is not None:
            part.lengths = np.minimum(part.lengths, limit)
        return part

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> np.ndarray:
        start = int(self.starts[i])
        return self.ids[start : start + int(self.lengths[i])]

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (DataLoader workers started by spawn or forkserver) without the ids: each worker
        maps the file again instead of receiving a copy of the corpus."""
        return {k: v for k, v in self.__dict__.items() if k != "ids"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.ids = map_ids(self.path, self.dtype)


class PairBatches(Dataset):
    """Item ``i`` is the collated :class:`PairBatch` of batch ``i`` (a DataLoader with
    ``batch_size=None`` serves them as they are); only that batch's sentences are read."""

    def __init__(self, src: TokenSide, tgt: TokenSide, batches: Sequence[np.ndarray]) -> None:
        self.src, self.tgt, self.batches = src, tgt, list(batches)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> PairBatch:
        idx = self.batches[i]
        return collate([self.src[j] for j in idx], [self.tgt[j] for j in idx], torch.as_tensor(idx, dtype=torch.long))


def collate(src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], index: torch.Tensor) -> PairBatch:
    """Token id arrays (no specials) -> a right-padded :class:`PairBatch`."""
    b = len(src)
    s_len = max(len(x) for x in src) + 1
    t_len = max(len(y) for y in tgt) + 1
    src_t = torch.full((b, s_len), PAD, dtype=torch.long)
    tgt_in = torch.full((b, t_len), PAD, dtype=torch.long)
    tgt_out = torch.full((b, t_len), PAD, dtype=torch.long)
    for r, (x_ids, y_ids) in enumerate(zip(src, tgt)):
        x, y = torch.from_numpy(np.asarray(x_ids, dtype=np.int64)), torch.from_numpy(np.asarray(y_ids, dtype=np.int64))
        src_t[r, : len(x)] = x
        src_t[r, len(x)] = EOS
        tgt_in[r, 0] = BOS
        tgt_in[r, 1 : len(y) + 1] = y
        tgt_out[r, : len(y)] = y
        tgt_out[r, len(y)] = EOS
    return PairBatch(src_t, tgt_in, tgt_out, index)


# ------------------------------------------------------------------------------ the data module


class TranslationDataModule(L.LightningDataModule):
    """Base class: tokenise a parallel corpus once with a joint BPE, cache it, serve token batches.

    Args:
        data_dir, cache_dir: raw corpora (may be read-only) and the cache; defaults
            ``$ABLATE_DATA_DIR`` / ``./data`` and ``$ABLATE_CACHE_DIR`` / ``./cache``.
        src_lang, tgt_lang: the direction.
        vocab_size: joint BPE vocabulary size (specials included).
        seq_len: the longest sequence in tokens (end token included): longer training pairs are
            dropped, longer evaluation sentences truncated; the model's positions cover it.
        max_tokens: padded tokens per training batch (sentences x longest side), as fairseq.
        max_sentences: optional cap on sentences per batch.
        eval_max_tokens: the same for validation/test batches (``None``: ``max_tokens``).
        batch_size: token batches per optimiser step over all devices (``update_freq`` x world).
        micro_batch_size: token batches per device and forward pass: 1 (``None`` only with
            ``batch_size=1``); ``train.py`` then accumulates ``batch_size / world size`` of them.
        max_train_pairs: use only the first N training pairs (quick runs, overfitting tests).
        max_eval_pairs: use only the first N validation/test pairs.
        num_workers, pin_memory: DataLoader options.
        seed: seed of the training order (``train.py`` passes the run's ``seed``).
    """

    name: str | None = "parallel"
    languages: tuple[str, ...] = ()

    def __init__(
        self,
        data_dir: str | os.PathLike[str] | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
        src_lang: str = "de",
        tgt_lang: str = "en",
        vocab_size: int = 8000,
        seq_len: int = 256,
        max_tokens: int = 4096,
        max_sentences: int | None = None,
        eval_max_tokens: int | None = None,
        batch_size: int = 1,
        micro_batch_size: int | None = None,
        max_train_pairs: int | None = None,
        max_eval_pairs: int | None = None,
        num_workers: int = 0,
        pin_memory: bool = False,
        seed: int = 0,
        **_: Any,
    ) -> None:
        super().__init__()
        if src_lang == tgt_lang:
            raise ValueError(f"data.src_lang and data.tgt_lang are both {src_lang!r}")
        if self.languages and {src_lang, tgt_lang} - set(self.languages):
            raise ValueError(
                f"{self.name} has languages {self.languages}; got data.src_lang={src_lang} data.tgt_lang={tgt_lang}"
            )
        if max_tokens < seq_len:
            raise ValueError(
                f"data.max_tokens={max_tokens} must be at least data.seq_len={seq_len} "
                f"(the longest pair must fit in a batch)"
            )
        if micro_batch_size not in (None, 1) or (micro_batch_size is None and batch_size > 1):
            raise ValueError(
                "translation batches are sized in tokens (data.max_tokens): data.batch_size counts token "
                "batches per optimiser step (all devices), and data.micro_batch_size must be 1 (one token "
                f"batch per forward pass); got batch_size={batch_size}, micro_batch_size={micro_batch_size}"
            )
        self.data_dir = Path(data_dir).expanduser() if data_dir is not None else default_data_dir()
        self.cache_dir = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        self.src_lang, self.tgt_lang = src_lang, tgt_lang
        self.bpe_vocab_size, self.seq_len = vocab_size, seq_len
        self.max_tokens, self.max_sentences = max_tokens, max_sentences
        self.eval_max_tokens = eval_max_tokens or max_tokens
        self.batch_size, self.micro_batch_size = batch_size, micro_batch_size
        self.max_train_pairs, self.max_eval_pairs = max_train_pairs, max_eval_pairs
        self.num_workers, self.pin_memory, self.seed = num_workers, pin_memory, seed
        self.tokenizer: Tokenizer | None = None
        self.vocab_size: int | None = None
        self.datasets: dict[str, PairBatches] = {}
        self.raw: dict[str, dict[str, list[str]]] = {}  # split -> {"src": lines, "tgt": lines}
        self.padding_fraction: dict[str, float] = {}
        self._train_sampler: ResumableSampler | None = None
        self._resume_state: dict[str, int] | None = None

    # --- what a corpus provides ------------------------------------------------------

    def source_key(self) -> Any:
        """JSON-able identity of the raw sources (cheap: no reading of the text)."""
        raise NotImplementedError

    def line_sources(self) -> dict[str, dict[str, LineSource]]:
        """split -> language -> its lines, for ``train``, ``val``, ``test`` and both languages."""
        raise NotImplementedError

    # --- cache ------------------------------------------------------------------------

    def cache_path(self) -> Path:
        key = json.dumps(
            {
                "format": CACHE_FORMAT_VERSION,
                "corpus": self.name,
                "sources": self.source_key(),
                "langs": sorted((self.src_lang, self.tgt_lang)),
                "max_train_pairs": self.max_train_pairs,
            },
            sort_keys=True,
        )
        digest = hashlib.sha256(key.encode()).hexdigest()[:10]
        return self.cache_dir / f"{self.name}-bpe{self.bpe_vocab_size}-{digest}"

    def prepare_data(self) -> None:
        """Tokenise into the cache folder unless an intact cache exists (a damaged one is rebuilt)."""
        ensure_cache(self.cache_path(), self._build_cache)

    def _build_cache(self, folder: Path) -> None:
        sources = self.line_sources()
        langs = (self.src_lang, self.tgt_lang)
        tokenizer = train_joint_bpe(self._bpe_text(sources["train"]), self.bpe_vocab_size)
        tokenizer.save(folder / BPETokenizer.FILENAME)
        dtype = ids_dtype(tokenizer.vocab_size)
        pairs, tokens = {}, {}
        for split in SPLITS:
            sides = {lang: sources[split][lang] for lang in langs}
            pairs[split], counts = self._write_split(folder, split, sides, tokenizer, dtype)
            tokens.update(counts)
        meta = {
            "format": CACHE_FORMAT_VERSION,
            "corpus": self.name,
            "vocab_size": tokenizer.vocab_size,
            "ids_dtype": dtype.str,
            "pairs": pairs,
            "tokens": tokens,
            "sources": self.source_key(),
        }
        write_meta(folder, meta)  # last: marks the folder complete
        log.info("Tokenised %s with a joint BPE (vocab %d): %s", self.name, tokenizer.vocab_size, pairs)

    def _bpe_text(self, train: Mapping[str, LineSource]) -> Iterator[str]:
        """What the joint BPE learns from, streamed: the source side's training lines, then the
        target side's (the first ``max_train_pairs`` of each)."""
        for lang in (self.src_lang, self.tgt_lang):
            yield from islice(train[lang].lines(), self.max_train_pairs or None)

    def _write_split(
        self, folder: Path, split: str, sides: Mapping[str, LineSource], tokenizer: Tokenizer, dtype: np.dtype
    ) -> tuple[int, dict[str, int]]:
        """Encode a split ``ENCODE_LINES`` pairs at a time into its id and offsets files (and, for
        val/test, the raw text BLEU is computed against); returns the pairs and the tokens per side
        written. Encoding stops after ``max_train_pairs``, reading does not: misaligned files are
        refused whatever the limit."""
        limit = (self.max_train_pairs or None) if split == "train" else None
        n = 0
        with ExitStack() as stack:
            writers = {
                lang: TokenWriter(
                    stack.enter_context(open(folder / f"{split}.{lang}.ids", "wb")),
                    stack.enter_context(open(folder / f"{split}.{lang}.offsets", "wb")),
                    dtype,
                )
                for lang in sides
            }
            texts = {
                lang: stack.enter_context(open(folder / f"{split}.{lang}.txt", "w", encoding="utf-8"))
                for lang in (sides if split != "train" else ())
            }
            for chunk in chunks(paired_lines(f"{self.name}: the {split} split", sides), ENCODE_LINES):
                chunk = chunk if limit is None else chunk[: max(0, limit - n)]
                n += len(chunk)
                for lang, lines in zip(sides, zip(*chunk)):
                    writers[lang].append(*encode_flat(tokenizer, lines, dtype))
                    if lang in texts:
                        texts[lang].write("".join(f"{line}\n" for line in lines))
        return n, {f"{split}.{lang}": writer.tokens for lang, writer in writers.items()}

    # --- Lightning hooks --------------------------------------------------------------

    def setup(self, stage: str | None = None) -> None:
        folder = self.cache_path()
        try:
            meta = read_meta(folder)  # sizes checked: a truncated token file is not trained on
        except CacheCorruptError:  # none yet (setup() called first, no Trainer) or damaged since
            self.prepare_data()  # builds it, or verifies it and rebuilds it saying why
            meta = read_meta(folder)
        self.tokenizer = BPETokenizer.load(folder / BPETokenizer.FILENAME)
        special_ids(self.tokenizer)
        self.vocab_size = int(meta["vocab_size"])
        if self.datasets:
            return
        dtype, limit = np.dtype(meta["ids_dtype"]), self.seq_len - 1  # room for the end token
        for split in SPLITS:
            src, tgt = (TokenSide.open(folder / f"{split}.{lang}", dtype) for lang in (self.src_lang, self.tgt_lang))
            if split == "train":
                src, tgt = self._trainable(src, tgt, limit)
            else:
                index = np.arange(min(self.max_eval_pairs or len(src), len(src)))
                src, tgt = src.subset(index, limit), tgt.subset(index, limit)
                self.raw[split] = {
                    "src": head_lines(folder / f"{split}.{self.src_lang}.txt", len(index)),
                    "tgt": head_lines(folder / f"{split}.{self.tgt_lang}.txt", len(index)),
                }
            src_lens, tgt_lens = src.lengths + 1, tgt.lengths + 1
            max_tokens = self.max_tokens if split == "train" else self.eval_max_tokens
            batches = make_batches(src_lens, tgt_lens, max_tokens, self.max_sentences if split == "train" else None)
            self.padding_fraction[split] = padding_fraction(src_lens, tgt_lens, batches)
            self.datasets[split] = PairBatches(src, tgt, batches)
        train = self.datasets["train"]
        log.info(
            "%s %s->%s: %d training pairs in %d batches of <= %d tokens, padding %.1f%%",
            self.name,
            self.src_lang,
            self.tgt_lang,
            len(train.src),
            len(train),
            self.max_tokens,
            100 * self.padding_fraction["train"],
        )

    def _trainable(self, src: TokenSide, tgt: TokenSide, limit: int) -> tuple[TokenSide, TokenSide]:
        """The training pairs whose sides are both non-empty and at most ``limit`` tokens."""
        fits = (src.lengths > 0) & (src.lengths <= limit) & (tgt.lengths > 0) & (tgt.lengths <= limit)
        keep = np.flatnonzero(fits)
        dropped = len(src) - len(keep)
        if dropped:
            log.info(
                "%s: dropped %d of %d training pairs (empty, or longer than seq_len=%d)",
                self.name,
                dropped,
                len(src),
                self.seq_len,
            )
        if not len(keep):
            raise ValueError(f"{self.name}: no training pair is left with data.seq_len={self.seq_len}")
        return src.subset(keep), tgt.subset(keep)

    @property
    def tokens_per_batch(self) -> int:
        return self.max_tokens * self.batch_size

    def references(self, split: str) -> list[str]:
        return self.raw[split]["tgt"]

    def sources(self, split: str) -> list[str]:
        return self.raw[split]["src"]

    def _dataset(self, split: str) -> PairBatches:
        if split not in self.datasets:
            self.setup()
        return self.datasets[split]

    def _loader(self, dataset: Dataset, sampler: ResumableSampler | None = None) -> DataLoader:
        return DataLoader(
            dataset,
            batch_size=None,
            sampler=sampler,
            shuffle=False,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        trainer = self.trainer
        world, rank = (trainer.world_size, trainer.global_rank) if trainer is not None else (1, 0)
        # an item is a whole token batch, so the sampler deals one item per rank and step
        sampler = ResumableSampler(self._dataset("train"), batch_size=1, num_replicas=world, rank=rank, seed=self.seed)
        if self._resume_state:
            state, self._resume_state = self._resume_state, None
            sampler.seed = state["seed"]
            sampler.resume_at(state["epoch"], state["rounds_done"])
        self._train_sampler = sampler
        return self._loader(self._dataset("train"), sampler)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self._dataset("val"))

    def test_dataloader(self) -> DataLoader:
        return self._loader(self._dataset("test"))

    def state_dict(self) -> dict[str, Any]:
        """The position in the training order (saved in checkpoints by Lightning)."""
        sampler, trainer = self._train_sampler, self.trainer
        if sampler is None or trainer is None:
            return {}
        # Lightning's progress counter (a _ProcessedTracker at run time; declared as its base class)
        done = trainer.fit_loop.epoch_loop.batch_progress.current.processed  # type: ignore[attr-defined]
        return {"seed": sampler.seed, "epoch": sampler.epoch, "rounds_done": done}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume_state = dict(state_dict) or None


# ------------------------------------------------------------------------------ corpora


class ParallelCorpus(TranslationDataModule):
    """A corpus with named splits: local files first, the Hugging Face Hub otherwise.

    Args:
        name: corpus name (cache folders, messages).
        languages: the two languages of the corpus.
        local_dir: folder under ``data_dir`` holding ``{split_file}.{lang}`` (or ``.gz``).
        split_files: split -> file stem, e.g. ``{train: train, val: val, test: test_2016_flickr}``.
        hub_path, hub_config, hub_revision: the Hub dataset used when the local files are absent
            (``None`` hub_path: local only).
        hub_splits: split -> the Hub dataset's split name.
        **kwargs: the arguments of :class:`TranslationDataModule`.

    Hub records are either ``{"translation": {lang: text, ...}}`` or ``{lang: text, ...}``.
    """

    def __init__(
        self,
        name: str,
        languages: Sequence[str],
        local_dir: str,
        split_files: Mapping[str, str],
        hub_path: str | None = None,
        hub_config: str | None = None,
        hub_revision: str | None = None,
        hub_splits: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.name, self.languages = name, tuple(languages)
        super().__init__(**kwargs)
        self.local_dir = local_dir
        self.split_files = dict(split_files)
        self.hub_path, self.hub_config, self.hub_revision = hub_path, hub_config, hub_revision
        self.hub_splits = dict(hub_splits or {"train": "train", "val": "validation", "test": "test"})

    def _stems(self) -> dict[str, str]:
        return {f"{split}.{lang}": f"{self.split_files[split]}.{lang}" for split in SPLITS for lang in self.languages}

    def local_files(self) -> dict[str, Path] | None:
        folder = self.data_dir / self.local_dir
        found = {key: find_file(folder, stem) for key, stem in self._stems().items()}
        if all(found.values()):
            return found  # type: ignore[return-value]
        if any(found.values()) or self.hub_path is None:
            missing = [self._stems()[k] + "[.gz]" for k, p in found.items() if p is None]
            why = f"{self.name} needs every split in both languages" + (
                "" if self.hub_path else " (no Hub copy is configured)"
            )
            raise DataNotFoundError(missing_file_message(", ".join(missing), folder, reason=why))
        return None

    def local_alternative(self) -> str:
        names = ", ".join(f"{stem}[.gz]" for stem in self._stems().values())
        return f"put {names} in the folder {(self.data_dir / self.local_dir).absolute()}"

    def source_key(self) -> Any:
        files = self.local_files()
        return (
            file_fingerprint(files, full_paths=True)
            if files
            else f"hub:{self.hub_path}/{self.hub_config}@{self.hub_revision}"
        )

    def line_sources(self) -> dict[str, dict[str, LineSource]]:
        files = self.local_files()
        if files:
            return {split: {lang: file_source(files[f"{split}.{lang}"]) for lang in self.languages} for split in SPLITS}
        kwargs = {"revision": self.hub_revision} if self.hub_revision else {}
        assert self.hub_path is not None  # local_files() found nothing and a Hub path is configured
        ds = load_hub_dataset(self.hub_path, self.hub_config, local_alternative=self.local_alternative(), **kwargs)
        return {
            split: {
                lang: hub_source(ds[self.hub_splits[split]], lang, f"{self.hub_path} {self.hub_splits[split]}")
                for lang in self.languages
            }
            for split in SPLITS
        }


class ParallelFiles(TranslationDataModule):
    """Your own parallel files (``data=parallel``): one source and one target file per split,
    plain or gzipped, one sentence per line. Relative paths are looked up under ``data_dir``
    first, then the working directory. No test files: test = validation."""

    name = "parallel"

    def __init__(
        self,
        train_src: str,
        train_tgt: str,
        val_src: str,
        val_tgt: str,
        test_src: str | None = None,
        test_tgt: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.paths = {
            "train.src": train_src,
            "train.tgt": train_tgt,
            "val.src": val_src,
            "val.tgt": val_tgt,
            "test.src": test_src or val_src,
            "test.tgt": test_tgt or val_tgt,
        }

    def files(self) -> dict[str, Path]:
        found = {}
        for key, path in self.paths.items():
            p = Path(path).expanduser()
            hit = next(
                (c for c in ((p,) if p.is_absolute() else (self.data_dir / p, Path.cwd() / p)) if c.is_file()), None
            )
            if hit is None:
                raise DataNotFoundError(
                    missing_file_message(f"{key} ({path})", p if p.is_absolute() else self.data_dir / p)
                )
            found[key] = hit.absolute()
        return found

    def source_key(self) -> Any:
        return file_fingerprint(self.files(), full_paths=True)

    def line_sources(self) -> dict[str, dict[str, LineSource]]:
        files = self.files()
        return {
            split: {
                self.src_lang: file_source(files[f"{split}.src"]),
                self.tgt_lang: file_source(files[f"{split}.tgt"]),
            }
            for split in SPLITS
        }
