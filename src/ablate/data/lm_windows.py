"""Fixed-length windows over a flat, memory-mapped token file: the samples of language modelling,
``seq_len + 1`` tokens each (input and shifted target), a batch gathered in one go
(:meth:`TokenWindows.__getitems__`, :func:`collate_windows`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate


def token_dtype(vocab_size: int) -> np.dtype:
    """Smallest unsigned dtype that holds ids ``0 .. vocab_size - 1`` (uint16 or uint32)."""
    return np.dtype(np.uint16 if vocab_size <= 1 << 16 else np.uint32)


class TokenWindows(Dataset):
    """Windows over a flat token file: item i is ``(x, y)`` with ``x = tokens[i*S : i*S + L]`` and
    ``y = tokens[i*S + 1 : i*S + L + 1]`` for stride S (default L; 1: every offset, as nanoGPT). A
    trailing partial window is dropped; the lazy memory map is not pickled (each worker maps its own)."""

    def __init__(self, path: Path, dtype: np.dtype, seq_len: int, stride: int | None = None) -> None:
        self.path, self.dtype, self.seq_len = Path(path), np.dtype(dtype), seq_len
        self.stride = stride or seq_len
        self.num_tokens = self.path.stat().st_size // self.dtype.itemsize
        self._tokens: np.ndarray | None = None

    @property
    def tokens(self) -> np.ndarray:
        if self._tokens is None:
            self._tokens = np.memmap(self.path, dtype=self.dtype, mode="r", shape=(self.num_tokens,))
        return self._tokens

    def __len__(self) -> int:
        # Each window needs seq_len + 1 tokens: the targets reach one token further.
        return max(0, (self.num_tokens - 1 - self.seq_len) // self.stride + 1)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not 0 <= i < len(self):
            raise IndexError(f"window {i} out of range for {len(self)} windows")
        start = i * self.stride
        chunk = torch.from_numpy(self.tokens[start : start + self.seq_len + 1].astype(np.int64))
        return chunk[:-1], chunk[1:]

    def __getitems__(self, indices: list[int]) -> WindowBatch:
        """A whole batch with one gather from the memory map: about 6x faster than item by item."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= len(self)):
            bad = idx[(idx < 0) | (idx >= len(self))][0]
            raise IndexError(f"window {bad} out of range for {len(self)} windows")
        offsets = idx[:, None] * self.stride + np.arange(self.seq_len + 1)
        chunk = torch.from_numpy(self.tokens[offsets].astype(np.int64))
        return WindowBatch(chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous())

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_tokens": None}


class WindowBatch(Sequence):
    """The windows of one batch, already stacked: ``x``, ``y`` of shape (B, L); also the sequence of
    its ``(x[i], y[i])`` samples, so ``default_collate`` still builds the same batch, only slower."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor) -> None:
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:  # type: ignore[override]  # no slices
        return self.x[i], self.y[i]


def collate_windows(batch: Any) -> Any:
    """A :class:`WindowBatch` as ``[x, y]`` without copying; anything else through ``default_collate``."""
    if isinstance(batch, WindowBatch):
        return [batch.x, batch.y]
    return default_collate(batch)
