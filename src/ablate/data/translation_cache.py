"""A parallel corpus's cache, written once: the joint BPE, each split's id and offsets files per
side, the raw validation/test text BLEU is scored against, and ``meta.json`` last; in bounded
memory, the files streamed ``ENCODE_LINES`` pairs at a time, both sides in step
(:mod:`ablate.data.translation_text`, :mod:`ablate.data.translation_tokens`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import ExitStack
from itertools import islice
from pathlib import Path
from typing import Any

import numpy as np

from ablate.data import translation_text
from ablate.data.cache import check_free_space, write_meta
from ablate.data.tokenizers import BPETokenizer, Tokenizer
from ablate.data.translation_text import LineSource, TextSize, check_aligned, chunks, paired_lines
from ablate.data.translation_tokens import (
    TokenWriter,
    cache_bytes,
    encode_flat,
    ids_dtype,
    tokens_per_byte,
    train_joint_bpe,
)

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
CACHE_FORMAT_VERSION = 3  # 2: checksums in meta.json (ablate.data.cache); 3: flat id + offsets files
SAMPLE_LINES = 2000  # training lines per side whose tokens per byte give the disk-space estimate

Sides = Mapping[str, LineSource]  # language -> its lines, the source language first


def build_translation_cache(
    folder: Path,
    splits: Mapping[str, Sides],
    *,
    corpus: str | None,
    vocab_size: int,
    max_train_pairs: int | None,
    bpe_train_mb: float | None,
    sources: Any,
) -> None:
    """Learn the joint BPE on the training split, write every split's token files, then ``meta.json``."""
    # counted before anything is trained: misaligned (or non-UTF-8) files fail in seconds, not after the BPE
    sizes = {split: check_aligned(f"{corpus}: the {split} split", sides) for split, sides in splits.items()}
    train = splits["train"]
    pairs_for_bpe = bpe_pairs(train, max_train_pairs, bpe_train_mb, corpus)
    # the source side's first pairs_for_bpe training lines, then the target side's, streamed
    tokenizer = train_joint_bpe(
        (line for side in train.values() for line in islice(side.lines(), pairs_for_bpe)), vocab_size
    )
    tokenizer.save(folder / BPETokenizer.FILENAME)
    dtype = ids_dtype(tokenizer.vocab_size)
    check_free_space(folder, estimate_bytes(tokenizer, train, sizes, dtype, max_train_pairs))
    pairs, tokens = {}, {}
    for split, sides in splits.items():
        limit = (max_train_pairs or None) if split == "train" else None
        pairs[split], counts = write_split(folder, split, sides, tokenizer, dtype, limit, corpus)
        tokens.update(counts)
    meta = {
        "format": CACHE_FORMAT_VERSION,
        "corpus": corpus,
        "vocab_size": tokenizer.vocab_size,
        "ids_dtype": dtype.str,
        "pairs": pairs,
        "tokens": tokens,
        "sources": sources,
    }
    write_meta(folder, meta)  # last: marks the folder complete
    log.info("Tokenised %s with a joint BPE (vocab %d): %s", corpus, tokenizer.vocab_size, pairs)


def bpe_pairs(train: Sides, max_train_pairs: int | None, bpe_train_mb: float | None, corpus: str | None) -> int | None:
    """How many training pairs the BPE learns from: the first ``max_train_pairs`` (None: all)
    and, with ``bpe_train_mb``, only the first pairs up to about that many MB of text (both
    sides; the pair that crosses the mark is in, as the LM's sample takes whole chunks)."""
    limit = max_train_pairs or None
    if bpe_train_mb is None:
        return limit
    used = pairs = 0
    for row in islice(zip(*(side.lines() for side in train.values())), limit):
        pairs += 1
        used += sum(len(line.encode("utf-8")) + 1 for line in row)  # + 1: the line end, as in the file
        if used >= bpe_train_mb * 1e6:
            break
    log.info("Learning the BPE of %s on the first %d training pairs (%.1f MB)", corpus, pairs, used / 1e6)
    return pairs


def estimate_bytes(
    tokenizer: Tokenizer,
    train: Sides,
    sizes: Mapping[str, Mapping[str, TextSize] | None],
    dtype: np.dtype,
    max_train_pairs: int | None,
) -> int | None:
    """About the bytes the token files will take (None: a split's size is not known beforehand)."""
    known = {split: size for split, size in sizes.items() if size is not None}
    if len(known) < len(sizes):
        return None
    sample = [line for side in train.values() for line in islice(side.lines(), SAMPLE_LINES)]
    lines = known["train"][next(iter(train))].lines  # the source side's
    share = min(1.0, max_train_pairs / lines) if max_train_pairs and lines else 1.0
    return cache_bytes(known, tokens_per_byte(tokenizer, sample), dtype, share)


def write_split(
    folder: Path, split: str, sides: Sides, tokenizer: Tokenizer, dtype: np.dtype, limit: int | None, corpus: str | None
) -> tuple[int, dict[str, int]]:
    """Encode a split ``ENCODE_LINES`` pairs at a time into its id and offsets files (and, for
    val/test, the raw text BLEU is computed against); returns the pairs and the tokens per side
    written. Encoding stops after ``limit`` pairs, reading does not: misaligned files are
    refused whatever the limit."""
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
        for chunk in chunks(paired_lines(f"{corpus}: the {split} split", sides), translation_text.ENCODE_LINES):
            chunk = chunk if limit is None else chunk[: max(0, limit - n)]
            n += len(chunk)
            for lang, lines in zip(sides, zip(*chunk)):
                writers[lang].append(*encode_flat(tokenizer, lines, dtype))
                if lang in texts:
                    texts[lang].write("".join(f"{line}\n" for line in lines))
    return n, {f"{split}.{lang}": writer.tokens for lang, writer in writers.items()}
