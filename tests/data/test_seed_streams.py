"""Independent data orders (issue 34 item 2): every (seed, epoch) trains in its own order, and a
checkpoint written in the old order (``seed + epoch``) is refused on resume, not continued in
another order."""

from __future__ import annotations

import itertools

import pytest
import torch

from ablate.data.corpus import CachedCorpus, DataOrderMismatch
from ablate.data.samplers import ResumableSampler, epoch_order
from ablate.seeds import DATA_ORDER, ORDER_VERSION, stream_seed

SEEDS, EPOCHS = range(21), range(11)


def test_no_two_seed_epoch_pairs_share_an_order() -> None:
    """Seeds 0-20 x epochs 0-10: 231 orders of 1,000 samples, all different, and no two share
    even their first batch of 8 (with ``seed + epoch`` seed s's epoch e + 1 was seed s + 1's epoch e)."""
    orders = {(s, e): epoch_order(1000, s, e) for s in SEEDS for e in EPOCHS}
    firsts = {key: tuple(order[:8].tolist()) for key, order in orders.items()}
    assert len(set(firsts.values())) == len(orders)
    for (a, x), (b, y) in itertools.combinations(orders.items(), 2):
        assert not torch.equal(x, y), (a, b)


def test_the_old_rule_would_fail_the_same_check() -> None:
    """The check above can fail: under ``seed + epoch`` seed 0's epoch 1 is seed 1's epoch 0."""

    def old(seed: int, epoch: int) -> torch.Tensor:
        return torch.randperm(1000, generator=torch.Generator().manual_seed(seed + epoch))

    assert torch.equal(old(0, 1), old(1, 0))
    assert not torch.equal(epoch_order(1000, 0, 1), epoch_order(1000, 1, 0))


def test_streams_are_keyed_by_role_seed_and_epoch() -> None:
    assert stream_seed(DATA_ORDER, 3, 2) == stream_seed(DATA_ORDER, 3, 2)  # reproducible
    assert len({stream_seed(DATA_ORDER, s, 0) for s in (-1, 0, 1)}) == 3  # negative seeds too
    assert stream_seed(DATA_ORDER, 3, 2) != stream_seed(DATA_ORDER + 1, 3, 2)  # another role, another stream
    with pytest.raises(ValueError):
        stream_seed(DATA_ORDER, 3, -1)


def test_the_sampler_trains_in_the_epoch_order() -> None:
    sampler = ResumableSampler(list(range(40)), batch_size=4, seed=5)
    sampler.set_epoch(3)
    assert list(sampler) == epoch_order(40, 5, 3)[:40].tolist()


def test_a_checkpoint_in_the_old_order_is_refused_on_resume() -> None:
    corpus = CachedCorpus()
    with pytest.raises(DataOrderMismatch, match="order version 1"):
        corpus.load_state_dict({"seed": 1, "epoch": 2, "samples_done": 64})  # written before the key existed
    corpus.load_state_dict({"seed": 1, "epoch": 2, "samples_done": 64, "order": ORDER_VERSION})
    assert corpus._resume_state == {"seed": 1, "epoch": 2, "samples_done": 64, "order": ORDER_VERSION}
    corpus.load_state_dict({})  # no position saved (no training loader yet): nothing to check
