"""Attention: causality, kernel equivalence (math vs sdpa), GQA/MQA, the KV cache, the math
kernel's weights and cross-attention's view of the memory."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.nn import axes
from ablate.nn.attention import CrossAttention, KVCache, SelfAttention, build_attention_kernel
from helpers.tiny_models import ATTN, POS, tiny_lm

D, H, T = 32, 4, 12


def _pos(name: str, n_heads: int = H, d_model: int = D, max_len: int = 32):
    return axes.POS.config_class(name)().build(
        d_model=d_model, n_heads=n_heads, head_dim=d_model // n_heads, max_len=max_len
    )


# ----------------------------------------------------------------------------------------------
# causality through the whole model


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("pos", POS)
def test_no_position_attends_to_the_future(pos, attn):
    model = tiny_lm(pos=pos, attn=attn, init="xavier")
    torch.manual_seed(1)
    idx = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        base = model(idx)
        for t in (0, 5, 14):
            perturbed = idx.clone()
            perturbed[:, t + 1 :] = (idx[:, t + 1 :] + 1 + torch.randint(0, 48, idx[:, t + 1 :].shape)) % 50
            out = model(perturbed)
            torch.testing.assert_close(
                out[:, : t + 1],
                base[:, : t + 1],
                atol=1e-6,
                rtol=0,
                msg=f"pos={pos} attn={attn}: logits at <= {t} changed when tokens after {t} did",
            )
            # the perturbation is visible where it should be, so the check above is not vacuous
            assert (out[:, t + 1 :] - base[:, t + 1 :]).abs().max() > 1e-3


# ----------------------------------------------------------------------------------------------
# math and sdpa compute the same function


def _pair(impl_from: str, impl_to: str, **kw):
    """Two SelfAttention modules with identical weights and different kernels."""
    a = SelfAttention(D, H, impl=impl_from, **kw)
    b = SelfAttention(D, H, impl=impl_to, **kw)
    b.load_state_dict(a.state_dict())
    return a.eval(), b.eval()


@pytest.mark.parametrize("n_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("padding", [False, True])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("pos", POS)
def test_math_and_sdpa_agree(pos, causal, padding, n_kv_heads):
    torch.manual_seed(0)
    math_attn, sdpa_attn = _pair("math", "sdpa", n_kv_heads=n_kv_heads, causal=causal)
    pe = _pos(pos)
    x = torch.randn(3, T, D)
    key_padding = None
    if padding:  # right padding, so every causal query still sees at least one real key
        key_padding = torch.ones(3, T, dtype=torch.bool)
        key_padding[1, -3:] = False
        key_padding[2, -7:] = False
    with torch.no_grad():
        a = math_attn(x, pe, key_padding=key_padding)
        b = sdpa_attn(x, pe, key_padding=key_padding)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("n_kv_heads", [None, 2])
@pytest.mark.parametrize("pos", POS)
def test_math_and_sdpa_agree_in_the_full_model(pos, n_kv_heads):
    math_model = tiny_lm(pos=pos, attn="math", n_kv_heads=n_kv_heads, init="xavier")
    sdpa_model = tiny_lm(pos=pos, attn="sdpa", n_kv_heads=n_kv_heads, init="xavier")
    sdpa_model.load_state_dict(math_model.state_dict())
    idx = torch.randint(0, 50, (2, 20))
    with torch.no_grad():
        torch.testing.assert_close(math_model(idx), sdpa_model(idx), atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# grouped-query / multi-query attention against a hand-written multi-head attention


def _by_hand(attn: SelfAttention, x, causal: bool = True, kv_head_of=None):
    """Multi-head attention written out from the module's weights, one query head at a time.

    ``kv_head_of(h)`` says which key/value head query head ``h`` reads (identity for MHA)."""
    n_kv = attn.n_kv_heads
    hd = D // H
    W, bias = attn.qkv.weight, attn.qkv.bias
    Wq, Wk, Wv = W[:D], W[D : D + n_kv * hd], W[D + n_kv * hd :]
    bq, bk, bv = bias[:D], bias[D : D + n_kv * hd], bias[D + n_kv * hd :]
    q, k, v = x @ Wq.T + bq, x @ Wk.T + bk, x @ Wv.T + bv
    t = x.size(1)
    future = torch.triu(torch.ones(t, t, dtype=torch.bool), diagonal=1)
    heads = []
    for h in range(H):
        g = kv_head_of(h) if kv_head_of else h
        qh = q[..., h * hd : (h + 1) * hd]
        kh, vh = k[..., g * hd : (g + 1) * hd], v[..., g * hd : (g + 1) * hd]
        scores = qh @ kh.transpose(-1, -2) / math.sqrt(hd)
        if causal:
            scores = scores.masked_fill(future, float("-inf"))
        heads.append(scores.softmax(-1) @ vh)
    return attn.out_proj(torch.cat(heads, dim=-1))


@pytest.mark.parametrize("impl", ATTN)
@pytest.mark.parametrize("causal", [True, False])
def test_gqa_with_as_many_kv_heads_as_heads_is_mha(impl, causal):
    torch.manual_seed(0)
    attn = SelfAttention(D, H, n_kv_heads=H, impl=impl, causal=causal).double().eval()
    assert attn.qkv.out_features == 3 * D
    x = torch.randn(2, T, D, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(attn(x, _pos("none")), _by_hand(attn, x, causal))


@pytest.mark.parametrize("impl", ATTN)
@pytest.mark.parametrize("n_kv_heads", [1, 2])
def test_gqa_and_mqa_share_each_kv_head_among_consecutive_query_heads(impl, n_kv_heads):
    torch.manual_seed(0)
    attn = SelfAttention(D, H, n_kv_heads=n_kv_heads, impl=impl).double().eval()
    hd = D // H
    assert attn.qkv.out_features == D + 2 * n_kv_heads * hd
    x = torch.randn(2, T, D, dtype=torch.float64)
    group = H // n_kv_heads
    with torch.no_grad():
        expected = _by_hand(attn, x, kv_head_of=lambda h: h // group)
        torch.testing.assert_close(attn(x, _pos("none")), expected)


def test_mqa_equals_math_kernel_with_repeated_kv_heads():
    torch.manual_seed(0)
    q = torch.randn(2, H, T, 8, dtype=torch.float64)
    k, v = torch.randn(2, 1, T, 8, dtype=torch.float64), torch.randn(2, 1, T, 8, dtype=torch.float64)
    for impl in ATTN:
        kernel = build_attention_kernel(impl, 0.0)
        shared = kernel(q, k, v, causal=True, key_padding=None, bias=None)
        repeated = build_attention_kernel("math", 0.0)(
            q, k.expand(-1, H, -1, -1), v.expand(-1, H, -1, -1), causal=True, key_padding=None, bias=None
        )
        torch.testing.assert_close(shared, repeated)


# ----------------------------------------------------------------------------------------------
# KV cache


@pytest.mark.parametrize("n_kv_heads", [None, 2])
@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("pos", POS)
def test_kv_cache_decoding_equals_full_recomputation(pos, attn, n_kv_heads):
    model = tiny_lm(pos=pos, attn=attn, n_kv_heads=n_kv_heads, init="xavier")
    idx = torch.randint(0, 50, (2, 14))
    with torch.no_grad():
        full = model(idx)
        caches = model.new_caches()
        pieces, start = [], 0
        for size in (5, 1, 1, 4, 1, 2):  # a prompt, single tokens and chunks
            pieces.append(model(idx[:, start : start + size], caches=caches))
            start += size
        assert start == idx.size(1)
        assert caches[0].self_attn.length == idx.size(1)
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# the math kernel's weights


@pytest.mark.parametrize("pos", ["none", "alibi"])
def test_math_weights_are_a_distribution_over_allowed_keys(pos):
    torch.manual_seed(0)
    attn = SelfAttention(D, H, impl="math").eval()
    attn.kernel.keep_weights = True
    key_padding = torch.ones(2, T, dtype=torch.bool)
    key_padding[1, -4:] = False
    x = torch.randn(2, T, D)
    with torch.no_grad():
        attn(x, _pos(pos), key_padding=key_padding)
    w = attn.kernel.weights
    assert w.shape == (2, H, T, T)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, H, T))
    allowed = torch.tril(torch.ones(T, T, dtype=torch.bool))[None, None] & key_padding[:, None, None, :]
    assert torch.all(w[~allowed.expand_as(w)] == 0)
    assert torch.all(w[allowed.expand_as(w)] > 0)


def test_keep_weights_with_sdpa_gives_weights_and_the_same_output():
    torch.manual_seed(0)
    a, b = _pair("sdpa", "sdpa")
    b.kernel.keep_weights = True
    x = torch.randn(2, T, D)
    with torch.no_grad():
        torch.testing.assert_close(a(x, _pos("rope")), b(x, _pos("rope")), atol=1e-5, rtol=1e-5)
    assert b.kernel.weights is not None and b.kernel.weights.shape == (2, H, T, T)


# ----------------------------------------------------------------------------------------------
# cross-attention


@pytest.mark.parametrize("n_kv_heads", [None, 2])
@pytest.mark.parametrize("impl", ATTN)
def test_cross_attention_sees_every_memory_position(impl, n_kv_heads):
    torch.manual_seed(0)
    cross = CrossAttention(D, H, n_kv_heads, impl=impl).eval()
    x, memory = torch.randn(2, 5, D), torch.randn(2, 9, D)
    with torch.no_grad():
        base = cross(x, memory)
        for j in range(memory.size(1)):
            perturbed = memory.clone()
            perturbed[:, j] += torch.randn(2, D)
            change = (cross(x, perturbed) - base).abs().amax(dim=-1)  # (B, T): every query
            assert torch.all(change > 1e-4), f"memory position {j} is invisible to some query"


@pytest.mark.parametrize("impl", ATTN)
def test_padded_memory_positions_change_nothing(impl):
    torch.manual_seed(0)
    cross = CrossAttention(D, H, impl=impl).eval()
    x, memory = torch.randn(2, 5, D), torch.randn(2, 9, D)
    memory_padding = torch.ones(2, 9, dtype=torch.bool)
    memory_padding[0, -3:] = False
    with torch.no_grad():
        base = cross(x, memory, memory_padding=memory_padding)
        perturbed = memory.clone()
        perturbed[0, -3:] += 10 * torch.randn(3, D)
        torch.testing.assert_close(cross(x, perturbed, memory_padding=memory_padding), base)
        # and equals attending to the unpadded memory alone
        torch.testing.assert_close(base[0], cross(x[:1], memory[:1, :-3])[0], atol=1e-6, rtol=1e-5)


def test_cross_attention_cache_reuses_the_memory_projection():
    torch.manual_seed(0)
    cross = CrossAttention(D, H, impl="math").eval()
    x, memory = torch.randn(1, 4, D), torch.randn(1, 6, D)
    cache = KVCache()
    with torch.no_grad():
        full = cross(x, memory)
        steps = [cross(x[:, i : i + 1], memory, cache=cache) for i in range(4)]
    torch.testing.assert_close(torch.cat(steps, dim=1), full)
    assert cache.length == 6
