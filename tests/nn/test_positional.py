"""Positional encodings: sinusoidal formula, RoPE relativity, ALiBi slopes and bias, length limits."""

from __future__ import annotations

import math
import re

import pytest
import torch

from ablate.nn.axes import POS
from ablate.nn.positional import ALiBi, Learned, Rotary, Sinusoidal, alibi_slopes, sinusoid_table
from helpers.tiny_models import ATTN, tiny_lm

# ----------------------------------------------------------------------------------------------
# sinusoidal


@pytest.mark.parametrize(("pos", "i"), [(0, 0), (1, 0), (1, 3), (7, 1), (13, 5), (50, 7), (1000, 2), (4095, 0)])
def test_sinusoid_table_matches_the_formula(pos, i):
    d = 16
    table = sinusoid_table(torch.arange(4096), d)
    angle = pos / 10000 ** (2 * i / d)
    assert table[pos, 2 * i].item() == pytest.approx(math.sin(angle), abs=1e-4)
    assert table[pos, 2 * i + 1].item() == pytest.approx(math.cos(angle), abs=1e-4)


def test_sinusoidal_embed_adds_the_table_at_the_offset():
    d = 16
    enc = Sinusoidal(d_model=d, base=10000.0)
    x = torch.randn(2, 5, d)
    out = enc.embed(x, offset=3)
    expected = torch.tensor(
        [
            [
                math.sin(p / 10000 ** (2 * (j // 2) / d)) if j % 2 == 0 else math.cos(p / 10000 ** (2 * (j // 2) / d))
                for j in range(d)
            ]
            for p in range(3, 8)
        ]
    )
    torch.testing.assert_close(out - x, expected.expand(2, -1, -1), atol=1e-5, rtol=0)


# ----------------------------------------------------------------------------------------------
# RoPE


def _score(rope: Rotary, q, k, m: int, n: int) -> torch.Tensor:
    """q . k after rotating q to position m and k to position n."""
    qr, kr = rope.rotate(q, k, q_offset=m, k_offset=n)
    return (qr * kr).sum(-1)


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_rope_scores_depend_only_on_relative_position(fraction):
    torch.manual_seed(0)
    rope = Rotary(head_dim=16, base=10000.0, fraction=fraction)
    q, k = torch.randn(3, 2, 1, 16), torch.randn(3, 2, 1, 16)
    for m, n in [(0, 0), (5, 2), (2, 9), (17, 3)]:
        base = _score(rope, q, k, m, n)
        for shift in (1, 4, 31, 250):
            torch.testing.assert_close(_score(rope, q, k, m + shift, n + shift), base, atol=1e-4, rtol=1e-4)
    # not vacuous: the score does change with the distance
    assert (_score(rope, q, k, 5, 2) - _score(rope, q, k, 5, 3)).abs().max() > 1e-3


def test_rope_relative_over_whole_sequences():
    """Rotating a whole (q, k) sequence at offset s leaves the score matrix unchanged."""
    torch.manual_seed(0)
    rope = Rotary(head_dim=8, base=10000.0, fraction=1.0)
    q, k = torch.randn(1, 2, 10, 8), torch.randn(1, 2, 10, 8)
    qr, kr = rope.rotate(q, k)
    base = qr @ kr.transpose(-1, -2)
    for s in (3, 64):
        qs, ks = rope.rotate(q, k, q_offset=s, k_offset=s)
        torch.testing.assert_close(qs @ ks.transpose(-1, -2), base, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("fraction", "base"), [(1.0, 10000.0), (0.5, 10000.0), (1.0, 100.0)])
def test_rope_rotates_pair_2i_by_pos_times_base_power(fraction, base):
    """Pair (2i, 2i+1) turns by m * base^(-2i/r), r the rotated width (GPT-NeoX for partial rotary)."""
    torch.manual_seed(0)
    hd = 8
    r = int(hd * fraction)
    rope = Rotary(head_dim=hd, base=base, fraction=fraction)
    x = torch.randn(1, 1, 1, hd)
    m = 7
    out, _ = rope.rotate(x, x, q_offset=m, k_offset=0)
    for i in range(r // 2):
        theta = m * base ** (-2 * i / r)
        a, b = x[..., 2 * i].item(), x[..., 2 * i + 1].item()
        assert out[..., 2 * i].item() == pytest.approx(a * math.cos(theta) - b * math.sin(theta), abs=1e-5)
        assert out[..., 2 * i + 1].item() == pytest.approx(a * math.sin(theta) + b * math.cos(theta), abs=1e-5)


def test_partial_rotary_leaves_the_unrotated_features_unchanged():
    torch.manual_seed(0)
    rope = Rotary(head_dim=16, base=10000.0, fraction=0.25)
    assert rope.rot_dim == 4
    q, k = torch.randn(2, 3, 9, 16), torch.randn(2, 3, 9, 16)
    qr, kr = rope.rotate(q, k, q_offset=5, k_offset=5)
    assert torch.equal(qr[..., 4:], q[..., 4:]) and torch.equal(kr[..., 4:], k[..., 4:])
    assert (qr[..., :4] - q[..., :4]).abs().max() > 1e-2  # the first features do rotate


def test_rope_at_position_zero_is_identity_and_preserves_norms():
    torch.manual_seed(0)
    rope = Rotary(head_dim=16, base=10000.0, fraction=1.0)
    q, k = torch.randn(2, 3, 20, 16), torch.randn(2, 3, 20, 16)
    qr, kr = rope.rotate(q, k, q_offset=0, k_offset=100)
    torch.testing.assert_close(qr[:, :, 0], q[:, :, 0])
    torch.testing.assert_close(qr.norm(dim=-1), q.norm(dim=-1))
    torch.testing.assert_close(kr.norm(dim=-1), k.norm(dim=-1))
    # each rotated pair keeps its own length (a rotation, not a mixing of pairs)
    torch.testing.assert_close(kr.view(*kr.shape[:-1], 8, 2).norm(dim=-1), k.view(*k.shape[:-1], 8, 2).norm(dim=-1))


# ----------------------------------------------------------------------------------------------
# ALiBi


def test_alibi_slopes_power_of_two():
    expected = torch.tensor([2 ** (-8 * i / 8) for i in range(1, 9)])
    torch.testing.assert_close(alibi_slopes(8), expected)
    torch.testing.assert_close(
        alibi_slopes(8), torch.tensor([1 / 2, 1 / 4, 1 / 8, 1 / 16, 1 / 32, 1 / 64, 1 / 128, 1 / 256])
    )


def test_alibi_slopes_non_power_of_two_uses_the_papers_fallback():
    # Press et al.: slopes of the closest smaller power of two (4 heads: 2^-2, 2^-4, 2^-6, 2^-8),
    # then every other slope of the next power of two (8 heads: 2^-1, 2^-3, ...), as many as needed.
    four = [2**-2, 2**-4, 2**-6, 2**-8]
    eight_every_other = [2**-1, 2**-3, 2**-5, 2**-7]
    expected = torch.tensor(four + eight_every_other[:2])
    torch.testing.assert_close(alibi_slopes(6), expected)
    assert alibi_slopes(12).shape == (12,)


def test_alibi_bias_is_minus_slope_times_distance():
    alibi = ALiBi(n_heads=4)
    slopes = alibi_slopes(4)
    bias = alibi.score_bias(6, 6, 0, True, torch.device("cpu"))
    assert bias.shape == (4, 6, 6)
    for h in range(4):
        for i in range(6):
            for j in range(i + 1):
                assert bias[h, i, j].item() == pytest.approx(-slopes[h].item() * (i - j))
    # one decoding step at absolute position 5 over 6 cached keys
    step = alibi.score_bias(1, 6, 5, True, torch.device("cpu"))
    torch.testing.assert_close(step, bias[:, 5:6])


# ----------------------------------------------------------------------------------------------
# lengths


def test_learned_positions_beyond_max_len_raise_a_clear_error():
    model = tiny_lm(pos="learned", max_len=16)
    model(torch.randint(0, 50, (1, 16)))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"max_len"):
        model(torch.randint(0, 50, (1, 17)))
    caches = model.new_caches()
    model(torch.randint(0, 50, (1, 15)), caches=caches)
    model(torch.randint(0, 50, (1, 1)), caches=caches)
    with pytest.raises(ValueError, match=r"max_len"):
        model(torch.randint(0, 50, (1, 1)), caches=caches)
    with pytest.raises(ValueError, match="max_len"):
        Learned(d_model=8, max_len=4).embed(torch.zeros(1, 5, 8))


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("pos", ["none", "sinusoidal", "rope", "alibi"])
def test_non_learned_schemes_run_past_the_training_length(pos, attn):
    model = tiny_lm(pos=pos, attn=attn, max_len=8)
    idx = torch.randint(0, 50, (2, 32))
    with torch.no_grad():
        long = model(idx)
        short = model(idx[:, :8])
    assert long.shape == (2, 32, 50) and torch.isfinite(long).all()
    torch.testing.assert_close(long[:, :8], short, atol=1e-5, rtol=1e-5)


def test_an_unknown_scheme_is_refused_with_the_valid_ones():
    with pytest.raises(ValueError, match=re.escape("valid options: " + ", ".join(POS.options())) + "$"):
        POS.config_class("xpos")
