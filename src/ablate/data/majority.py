"""A synthetic sequence-classification corpus: which of two symbols occurs more often.

Each sequence holds ``seq_len / 2`` to ``seq_len`` tokens drawn uniformly from ``symbols``
symbols (ids ``1..symbols``; id 0 pads the row); its label is 1 when symbol 1 occurs more often
than symbol 2, else 0 (ties broken). The splits are generated from the run's seed; an encoder that
pools its outputs (:mod:`ablate.tasks.classify`) learns it in a few hundred steps.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch.utils.data import TensorDataset

from ablate.data.corpus import CachedCorpus
from ablate.data.samplers import ResumableSampler

PAD = 0
SPLITS = ("train", "val", "test")


def majority_split(n: int, seq_len: int, symbols: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``n`` right-padded rows of token ids (n, seq_len) and their labels (n,)."""
    tokens = np.full((n, seq_len), PAD, dtype=np.int64)
    labels = np.empty(n, dtype=np.int64)
    for i in range(n):
        length = int(rng.integers(seq_len // 2, seq_len + 1))
        row = rng.integers(1, symbols + 1, size=length)
        while (row == 1).sum() == (row == 2).sum():  # a tie: no majority to learn
            row[rng.integers(length)] = rng.integers(1, 3)
        tokens[i, :length] = row
        labels[i] = int((row == 1).sum() > (row == 2).sum())
    return tokens, labels


class MajorityData(CachedCorpus):
    """``data=majority``: batches of ``(tokens (B, seq_len), labels (B,))``; 0 pads a row.

    After ``setup()``: :attr:`vocab_size` (the symbols and the padding id), :attr:`num_classes`
    (2) and :attr:`tokenizer` (None: the ids are the data)."""

    name = "majority"
    num_classes = 2
    tokenizer = None

    def __init__(
        self,
        seq_len: int = 32,
        symbols: int = 8,
        train_size: int = 4096,
        val_size: int = 512,
        test_size: int = 512,
        batch_size: int = 32,
        eval_batch_size: int | None = None,
        num_workers: int = 0,
        seed: int = 0,
    ) -> None:
        super().__init__()
        sizes = {"seq_len": seq_len, "train_size": train_size, "val_size": val_size, "test_size": test_size}
        for key, value in {**sizes, "batch_size": batch_size, "eval_batch_size": eval_batch_size or 1}.items():
            if value < 1:
                raise ValueError(f"data.{key} must be positive, got {value}")
        if seq_len < 2 or symbols < 2:
            raise ValueError(f"data.seq_len={seq_len} and data.symbols={symbols}: both must be at least 2")
        self.seq_len, self.symbols, self.seed = seq_len, symbols, seed
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.batch_size, self._eval_batch_size, self.num_workers = batch_size, eval_batch_size, num_workers
        self.vocab_size = symbols + 1
        self.datasets: dict[str, TensorDataset] = {}

    def prepare_data(self) -> None:
        """Nothing to download or cache: :meth:`setup` generates the splits from the seed."""

    def content_fingerprint(self) -> dict[str, str]:
        """None: the splits are the seed's and the settings' (both in the run identity), not a file's."""
        return {}

    def setup(self, stage: str | None = None) -> None:
        for index, split in enumerate(SPLITS):
            if split not in self.datasets:
                rng = np.random.default_rng([self.seed, index])
                tokens, labels = majority_split(self.sizes[split], self.seq_len, self.symbols, rng)
                self.datasets[split] = TensorDataset(torch.from_numpy(tokens), torch.from_numpy(labels))

    def device_batch_size(self) -> int:
        """Rows per training batch: the global batch over the Trainer's devices and accumulation."""
        trainer = self.trainer
        parts = trainer.world_size * trainer.accumulate_grad_batches if trainer is not None else 1
        if self.batch_size % parts:
            raise ValueError(f"data.batch_size={self.batch_size} is not divisible by {parts} devices x accumulation")
        return self.batch_size // parts

    def loader_options(self) -> dict[str, Any]:
        return {"generator": torch.Generator().manual_seed(self.seed)}  # leaves the global RNG alone

    def position(self, sampler: ResumableSampler, steps_done: int) -> dict[str, int]:
        return {"batches_done": steps_done}

    def resume_sampler(self, sampler: ResumableSampler, state: dict[str, int]) -> None:
        sampler.resume_at(state["epoch"], state["batches_done"])
