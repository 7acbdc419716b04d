"""The joint BPE of a translation corpus and its token cache format.

Vocabulary: one byte-level BPE learned on the source *and* target sides of the training split,
with ``<pad>`` = 0, ``<s>`` = 1, ``</s>`` = 2 (:data:`SPECIALS`). Each side of a split is one flat
file of token ids (``{stem}.ids``, :func:`ids_dtype`) plus an ``int64`` offsets file (sentence
``i`` is ``ids[offsets[i]:offsets[i + 1]]``), written batch by batch (:class:`TokenWriter`) and
read back memory-mapped (:class:`TokenSide`); :func:`cache_bytes` estimates their size first.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import IO, Any

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from ablate.data.tokenizers import BPETokenizer, Tokenizer
from ablate.data.translation_text import TextSize

SPECIALS = ("<pad>", "<s>", "</s>")
PAD, BOS, EOS = 0, 1, 2


def train_joint_bpe(lines: Iterable[str], vocab_size: int) -> BPETokenizer:
    """Byte-level BPE with the special tokens at ids 0, 1, 2, a space before every sentence."""
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
    """The narrowest dtype of the cached ids (``uint16`` halves a WMT-size cache while every id fits)."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.int32)


def encode_flat(tokenizer: Tokenizer, lines: Sequence[str], dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The ids of ``lines`` end to end, and each line's length, as two arrays."""
    seqs = encode_lines(tokenizer, lines)
    lengths = np.fromiter(map(len, seqs), np.int64, count=len(seqs))
    return np.fromiter(chain.from_iterable(seqs), dtype, count=int(lengths.sum())), lengths


def detokenize(tokenizer: Tokenizer, ids: Sequence[int]) -> str:
    """Text of generated ids (special tokens dropped, the prefix space removed)."""
    return tokenizer.decode([i for i in ids if i > EOS]).strip()


# ------------------------------------------------------------------------------ token files


class TokenWriter:
    """Appends sentences to an ids file and an offsets file (``int64``: 0, then each sentence's end)."""

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
    """The sentences of one side of a split as views into its memory-mapped id file (two integer
    arrays, not a Python object per sentence): item ``i`` is ``ids[starts[i] : starts[i] + lengths[i]]``."""

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
        """Pickled without the ids: each spawned DataLoader worker maps the file again."""
        return {k: v for k, v in self.__dict__.items() if k != "ids"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.ids = map_ids(self.path, self.dtype)


# ------------------------------------------------------------------------------ disk space


def tokens_per_byte(tokenizer: Tokenizer, lines: Sequence[str]) -> float:
    """Tokens the BPE makes per byte of text, measured on ``lines`` (nothing to measure: 1.0, the most)."""
    size = sum(len(line.encode("utf-8")) + 1 for line in lines)
    return sum(map(len, encode_lines(tokenizer, lines))) / size if lines and size else 1.0


def cache_bytes(
    sizes: Mapping[str, Mapping[str, TextSize]], per_byte: float, dtype: np.dtype, train_share: float = 1.0
) -> int:
    """About how many bytes the cache of splits of these ``sizes`` takes: the ids, the offsets and the
    raw validation/test text, with 10% to spare (``train_share``: the training split's part kept)."""
    total = 0.0
    for split, sides in sizes.items():
        share = train_share if split == "train" else 1.0
        for size in sides.values():
            total += share * (size.num_bytes * per_byte * dtype.itemsize + 8 * (size.lines + 1))
            total += size.num_bytes if split != "train" else 0
    return int(1.1 * total)
