"""Greedy and beam search: beam 1 is greedy, batched beam search equals one sentence at a time,
the KV cache changes nothing, lengths respect max_len_a/b, the GNMT length penalty."""

from __future__ import annotations

import pytest
import torch

from ablate.nn.seq2seq import EncoderDecoder
from ablate.nn.spec import ModelSpec
from ablate.tasks.decoding import DecodeConfig, SpecialIds, beam_search, greedy_search, length_penalty, translate_tokens

V = 24
IDS = SpecialIds(pad=0, bos=1, eos=2)


def random_model(seed: int, pos: str = "sinusoidal", attn: str = "sdpa") -> EncoderDecoder:
    """A random model with peaked, source-dependent output distributions (so beams differ and
    sentences end): untied head scaled up, end token made likely."""
    torch.manual_seed(seed)
    spec = ModelSpec.from_flat(
        dict(
            vocab_size=V,
            n_layers=2,
            encoder_layers=2,
            d_model=32,
            n_heads=4,
            d_ff=64,
            max_len=40,
            pos=pos,
            attn=attn,
            norm="pre",
            act="relu",
            init="pytorch",
            tie_embeddings=False,
        )
    ).validate()
    model = EncoderDecoder(spec, pad_id=0).eval()
    with torch.no_grad():
        model.head.weight.mul_(2.0)
        model.head.weight[IDS.eos] += 0.3 * model.head.weight[3:].mean(0)
    return model


def sources(seed: int, b: int = 6, s: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V, (b, s), generator=g)
    lengths = torch.randint(2, s + 1, (b,), generator=g)
    lengths[0] = s
    for i, n in enumerate(lengths.tolist()):
        src[i, n - 1] = IDS.eos
        src[i, n:] = IDS.pad
    return src, src != IDS.pad


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


SEEDS = range(6)
KW = dict(max_len_a=1.0, max_len_b=4)


@pytest.mark.parametrize("seed", SEEDS)
def test_beam_one_equals_greedy(seed):
    model = random_model(seed)
    src, mask = sources(seed)
    greedy = greedy_search(model, src, mask, IDS, **KW)
    assert greedy == beam_search(model, src, mask, IDS, beam_size=1, length_penalty_alpha=0.6, **KW)
    assert greedy == beam_search(model, src, mask, IDS, beam_size=1, length_penalty_alpha=0.0, **KW)


@pytest.mark.parametrize("attn", ["math", "sdpa"])
@pytest.mark.parametrize("pos", ["sinusoidal", "learned", "rope", "alibi"])
def test_cached_equals_uncached(pos, attn):
    for seed in range(3):
        model = random_model(seed, pos=pos, attn=attn)
        src, mask = sources(seed)
        assert greedy_search(model, src, mask, IDS, use_cache=True, **KW) == greedy_search(
            model, src, mask, IDS, use_cache=False, **KW
        )
        assert beam_search(model, src, mask, IDS, beam_size=4, use_cache=True, **KW) == beam_search(
            model, src, mask, IDS, beam_size=4, use_cache=False, **KW
        )


@pytest.mark.parametrize("seed", SEEDS)
def test_batched_beam_equals_one_at_a_time(seed):
    model = random_model(seed)
    src, mask = sources(seed)
    batched = beam_search(model, src, mask, IDS, beam_size=4, length_penalty_alpha=0.6, **KW)
    for i in range(src.size(0)):
        n = int(mask[i].sum())
        alone = beam_search(
            model, src[i : i + 1, :n], mask[i : i + 1, :n], IDS, beam_size=4, length_penalty_alpha=0.6, **KW
        )
        assert alone[0] == batched[i], f"sentence {i}"


def test_beam_search_is_not_greedy():
    """Over several random models beam 4 changes some outputs (so the equalities above are not
    vacuous), and every beam hypothesis is a well-formed sentence."""
    differs = 0
    for seed in SEEDS:
        model = random_model(seed)
        src, mask = sources(seed)
        greedy = greedy_search(model, src, mask, IDS, **KW)
        beam = beam_search(model, src, mask, IDS, beam_size=4, length_penalty_alpha=0.0, **KW)
        differs += sum(g != b for g, b in zip(greedy, beam))
    assert differs >= 2


def test_lengths_respect_limits_and_no_special_tokens():
    model = random_model(0)
    src, mask = sources(0)
    for a, b in ((0.0, 3), (1.0, 2), (2.0, 0)):
        for out in (
            greedy_search(model, src, mask, IDS, max_len_a=a, max_len_b=b),
            beam_search(model, src, mask, IDS, beam_size=3, max_len_a=a, max_len_b=b),
        ):
            for i, hyp in enumerate(out):
                assert len(hyp) <= max(1, int(a * int(mask[i].sum()) + b))
                assert not {IDS.pad, IDS.bos, IDS.eos} & set(hyp)
    # the model's positions cap the length too (max_len 40 -> at most 39 tokens)
    long = greedy_search(model, src, mask, IDS, max_len_a=0.0, max_len_b=1000)
    assert max(len(h) for h in long) <= 39


def test_gnmt_length_penalty():
    assert length_penalty(1, 0.6) == pytest.approx((6 / 6) ** 0.6)
    assert length_penalty(10, 0.6) == pytest.approx((15 / 6) ** 0.6)
    assert length_penalty(10, 0.0) == 1.0


def test_translate_tokens_dispatch_and_restores_mode():
    model = random_model(1).train()
    src, mask = sources(1)
    out = translate_tokens(model, src, mask, IDS, DecodeConfig(beam_size=1, max_len_a=1.0, max_len_b=4))
    assert model.training
    model.eval()
    assert out == greedy_search(model, src, mask, IDS, **KW)
    with pytest.raises(ValueError, match="beam_size"):
        DecodeConfig.from_mapping({"beam_size": 0})
