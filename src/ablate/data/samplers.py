"""The training order of both tasks: a seeded, resumable, rank-aware permutation per epoch, over
LM windows or translation's pre-built token batches, so that a mid-epoch checkpoint resumes either
task at the exact next batch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sized
from typing import cast

import torch
from torch.utils.data import Dataset, DistributedSampler

from ablate.seeds import DATA_ORDER, stream_seed


class ResumableSampler(DistributedSampler):
    """The training order: a seeded permutation per epoch (:func:`epoch_order`, its own generator:
    the global RNG is left alone), each global batch split into one contiguous slice per rank.

    Micro-batch ``m`` of rank ``r`` is ``perm[(m * world + r) * batch_size :][:batch_size]``, so an
    optimiser step sees the same samples whatever the split into ranks and accumulation steps (one
    process with batch 8, or two ranks with 4 each: ``perm[0:8]``, then ``perm[8:16]``, ...); the
    tail that does not fill a round is dropped. :meth:`resume_at` makes the next iteration of
    ``epoch`` skip its first ``start_batch`` micro-batches. A ``DistributedSampler``, so that
    Lightning keeps it instead of wrapping it in its own (and calls :meth:`set_epoch`)."""

    def __init__(self, dataset: Dataset, batch_size: int, num_replicas: int = 1, rank: int = 0, seed: int = 0) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self.batch_size = batch_size
        self._resume: tuple[int, int] | None = None  # (epoch, micro-batches to skip)

    @property
    def batches_per_epoch(self) -> int:
        """Micro-batches per rank and epoch."""
        return len(cast(Sized, self.dataset)) // (self.batch_size * self.num_replicas)

    def __len__(self) -> int:
        # a full epoch, also when resuming: Lightning counts the batches before the restart
        return self.batches_per_epoch * self.batch_size

    def resume_at(self, epoch: int, start_batch: int) -> None:
        self._resume = (epoch, start_batch)

    def __iter__(self) -> Iterator[int]:
        start = 0
        if self._resume is not None:
            if self._resume[0] == self.epoch:
                start = self._resume[1]
            self._resume = None
        n_batches, world, size = self.batches_per_epoch, self.num_replicas, self.batch_size
        perm = epoch_order(len(cast(Sized, self.dataset)), self.seed, self.epoch)[: n_batches * world * size]
        yield from perm.view(n_batches, world, size)[start:, self.rank].reshape(-1).tolist()


def epoch_order(n: int, seed: int, epoch: int) -> torch.Tensor:
    """The permutation of ``n`` samples of epoch ``epoch`` of seed ``seed`` (its own stream: :data:`DATA_ORDER`)."""
    g = torch.Generator()
    g.manual_seed(stream_seed(DATA_ORDER, seed, epoch))
    return torch.randperm(n, generator=g)
