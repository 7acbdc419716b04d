"""Token batches of translation pairs, sized in tokens as fairseq's ``--max-tokens``
(:func:`make_batches`), each collated from the memory-mapped token files when served
(:class:`PairBatches`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch.utils.data import Dataset

from ablate.data.translation_tokens import BOS, EOS, PAD, TokenSide


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


class PairBatches(Dataset):
    """Item ``i`` is the collated :class:`PairBatch` of batch ``i``, read from its sentences alone."""

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
