"""Independent random streams by role: what makes two seeds two independent replicates.

Each random choice of a run is drawn from its own stream,
``numpy.random.SeedSequence(entropy=ROOT, spawn_key=(role, sign, |seed|, *more))``, which hashes
the whole key: streams that differ in any part are independent, none a shifted copy of another.
Not ``seed + epoch``: seed ``s`` at epoch ``e + 1`` would be seed ``s + 1`` at epoch ``e``, so
neighbouring seeds shared most of their epoch orders (issue 34) and a verdict's seed-to-seed
variance was understated. Roles are fixed numbers; a checkpoint records :data:`ORDER_VERSION`
and a resume under another version is refused (:mod:`ablate.data.corpus`).
"""

from __future__ import annotations

import numpy as np

ROOT = 0x61626C617465  # "ablate": the project's root entropy; fixed, so the streams are reproducible
DATA_ORDER = 1  # the training order of each epoch (ablate.data.samplers.ResumableSampler)
ORDER_VERSION = 2  # 1: torch.randperm with seed + epoch (before issue 34); 2: role-keyed seed sequences


def stream_key(role: int, seed: int, *more: int) -> tuple[int, ...]:
    """The spawn key of ``role``'s stream for ``seed`` (any integer, negative too) and ``more``
    (e.g. the epoch, >= 0)."""
    if any(int(m) < 0 for m in more):
        raise ValueError(f"stream indices must be >= 0, got {more}")
    return (int(role), int(seed < 0), abs(int(seed)), *(int(m) for m in more))


def stream_seed(role: int, seed: int, *more: int) -> int:
    """A 64-bit seed for a ``torch.Generator`` (or any generator) from ``role``'s stream for
    ``seed`` and ``more``: the first 64 bits the seed sequence generates."""
    words = np.random.SeedSequence(ROOT, spawn_key=stream_key(role, seed, *more)).generate_state(2, dtype=np.uint32)
    return int(words[0]) | (int(words[1]) << 32)
