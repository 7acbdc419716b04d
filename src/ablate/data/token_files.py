"""A language-modelling corpus's token files, written once into its cache folder.

The text is never held whole: each split is streamed in chunks
(:class:`~ablate.data.text_stream.SplitText`), the tokenizer is fitted on that stream (or on its
first ``bpe_train_mb`` MB) and the ids are appended to the token file batch by batch, so memory
stays flat in the corpus's size.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ablate.data.cache import check_free_space, write_meta
from ablate.data.lm_windows import token_dtype
from ablate.data.progress import Progress
from ablate.data.text_stream import SplitText
from ablate.data.tokenizers import Tokenizer, build_tokenizer, tokenizer_class

log = logging.getLogger(__name__)

SPLITS = ("train", "val", "test")
# bump when the cached files or the split logic change (2: checksums in meta.json; 3: streamed from
# files in chunks cut by bytes, which moves some BPE chunk boundaries of non-ASCII corpora over 16 MB)
CACHE_FORMAT_VERSION = 3


def fit_stream(texts: Mapping[str, SplitText], kind: str, bpe_train_mb: float | None) -> Iterator[str]:
    """The stream the tokenizer is fitted on."""
    if kind == "char":
        # nanoGPT's convention: the character set of the whole corpus, so no split has unknown characters
        for split in SPLITS:
            yield from texts[split].open()
    elif bpe_train_mb is not None:
        yield from texts["train"].limited(int(bpe_train_mb * 1e6))
    else:
        yield from texts["train"].open()  # BPE merges are learned on the training text only


def token_bytes_estimate(tokenizer: Tokenizer, texts: Mapping[str, SplitText], dtype: np.dtype) -> int | None:
    """About how many bytes the token files will take: the text's size times the tokens per
    byte of the train split's first chunk (a char tokenizer: at most one token per byte),
    with 10% to spare; None when a split's size is not known beforehand."""
    sizes = [text.num_bytes for text in texts.values()]
    if any(size is None for size in sizes):
        return None
    first = next(texts["train"].open(), "")
    per_byte = len(tokenizer.encode_array(first)) / max(len(first.encode("utf-8")), 1) if first else 1.0
    return int(1.1 * per_byte * dtype.itemsize * sum(size or 0 for size in sizes))


def write_tokens(
    tokenizer: Tokenizer, text: SplitText, path: Path, dtype: np.dtype, corpus: str | None, append: bool = False
) -> int:
    """Write (``append``: append) the ids of each encoded batch to ``path``; returns the number of tokens."""
    count = 0
    split = path.stem
    with (
        open(path, "ab" if append else "wb") as f,
        Progress(f"Tokenising {corpus} {split}", text.num_bytes) as progress,
    ):
        for ids, num_bytes in tokenizer.encode_stream(text.open()):
            ids.astype(dtype).tofile(f)
            count += ids.size
            progress.advance(num_bytes)
    return count


def build_token_files(
    folder: Path,
    texts: Mapping[str, SplitText],
    blocks: Mapping[str, list[SplitText]],
    *,
    corpus: str | None,
    kind: str,
    vocab_size: int,
    bpe_train_mb: float | None,
    sources: Any,
) -> None:
    """Fit the tokenizer, write ``{train,val,test}.bin`` (``blocks`` block after block) and ``meta.json``."""
    cls = tokenizer_class(kind)
    what = "characters of every split" if kind == "char" else "the train split"
    log.info("Fitting the %s tokenizer of %s on %s", kind, corpus, what)
    tokenizer = build_tokenizer(kind, fit_stream(texts, kind, bpe_train_mb), vocab_size, folder / cls.FILENAME)
    dtype = token_dtype(tokenizer.vocab_size)
    check_free_space(folder, token_bytes_estimate(tokenizer, texts, dtype))
    counts, bounds = {}, {}
    for split in SPLITS:
        path = folder / f"{split}.bin"
        if split not in blocks:
            counts[split] = write_tokens(tokenizer, texts[split], path, dtype, corpus)
            continue
        bounds[split] = [0]
        for i, part in enumerate(blocks[split]):
            n = write_tokens(tokenizer, part, path, dtype, corpus, append=i > 0)
            bounds[split].append(bounds[split][-1] + n)
        counts[split] = bounds[split][-1]
    meta = {
        "format": CACHE_FORMAT_VERSION,
        "corpus": corpus,
        "tokenizer": kind,
        "vocab_size": tokenizer.vocab_size,
        "dtype": dtype.name,
        "num_tokens": counts,
        "sources": sources,
        **({"blocks": bounds} if bounds else {}),
    }
    write_meta(folder, meta)  # last: marks the folder complete
    log.info("Tokenised %s with %s (vocab %d): %s tokens", corpus, kind, tokenizer.vocab_size, counts)
