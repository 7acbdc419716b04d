"""Norm placements: each residual computes its formula, written out from the block's own parts."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ablate.nn.block import DeepNormResidual, PostNormResidual, PreNormResidual, SandwichResidual, deepnorm_constants
from helpers.tiny_models import PLACEMENTS, tiny_lm

D = 32


def _randomise_norms(model):
    """Non-trivial gains and biases, so a norm applied in the wrong place shows."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.copy_(1 + 0.5 * torch.randn_like(p) if name.endswith("weight") else 0.5 * torch.randn_like(p))


def _ln(norm: nn.LayerNorm, x):
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    return (x - mean) / torch.sqrt(var + norm.eps) * norm.weight + norm.bias


def _x(scale: float = 1.0):
    torch.manual_seed(3)
    return scale * torch.randn(2, 10, D)


def test_post_ln_block_output_is_normalised_but_pre_ln_residual_stream_is_not():
    x = _x(scale=100.0)
    post, pre = tiny_lm(norm="post"), tiny_lm(norm="pre")
    with torch.no_grad():
        out_post = post.blocks[0](x, post.pos)
        out_pre = pre.blocks[0](x, pre.pos)
    # post-LN: every vector has mean 0 and std 1 (LN gain 1, bias 0 at init)
    torch.testing.assert_close(out_post.mean(-1), torch.zeros(2, 10), atol=1e-5, rtol=0)
    torch.testing.assert_close(out_post.std(-1, unbiased=False), torch.ones(2, 10), atol=1e-3, rtol=0)
    # pre-LN: the residual stream carries the input's scale through
    assert out_pre.std(-1).mean() > 50


@pytest.mark.parametrize("sub", ["attn", "ffn"])
def test_pre_is_x_plus_f_of_ln_x(sub):
    model = tiny_lm(norm="pre")
    _randomise_norms(model)
    res = getattr(model.blocks[0], sub)
    assert isinstance(res, PreNormResidual)
    x = _x()
    args = (model.pos,) if sub == "attn" else ()
    with torch.no_grad():
        torch.testing.assert_close(res(x, *args), x + res.sublayer(_ln(res.norm, x), *args))


@pytest.mark.parametrize("sub", ["attn", "ffn"])
def test_post_normalises_after_the_residual_add(sub):
    model = tiny_lm(norm="post")
    _randomise_norms(model)
    res = getattr(model.blocks[0], sub)
    assert isinstance(res, PostNormResidual)
    x = _x()
    args = (model.pos,) if sub == "attn" else ()
    with torch.no_grad():
        out = res(x, *args)
        expected = _ln(res.norm, x + res.sublayer(x, *args))
        torch.testing.assert_close(out, expected)
        # not x + LN(f(x)), nor LN applied to the input
        assert (out - (x + _ln(res.norm, res.sublayer(x, *args)))).abs().max() > 1e-2
        assert (out - (x + res.sublayer(_ln(res.norm, x), *args))).abs().max() > 1e-2


@pytest.mark.parametrize("sub", ["attn", "ffn"])
def test_sandwich_is_x_plus_ln_out_of_f_of_ln_in(sub):
    model = tiny_lm(norm="sandwich")
    _randomise_norms(model)
    res = getattr(model.blocks[0], sub)
    assert isinstance(res, SandwichResidual)
    x = _x()
    args = (model.pos,) if sub == "attn" else ()
    with torch.no_grad():
        out = res(x, *args)
        torch.testing.assert_close(out, x + _ln(res.post_norm, res.sublayer(_ln(res.norm, x), *args)))
        # the two norms are distinct and used in that order
        swapped = x + _ln(res.norm, res.sublayer(_ln(res.post_norm, x), *args))
        assert (out - swapped).abs().max() > 1e-2


@pytest.mark.parametrize("n_layers", [1, 2])
@pytest.mark.parametrize("sub", ["attn", "ffn"])
def test_deepnorm_is_ln_of_alpha_x_plus_f(sub, n_layers):
    model = tiny_lm(norm="deepnorm", n_layers=n_layers)
    _randomise_norms(model)
    alpha, beta = (2 * n_layers) ** 0.25, (8 * n_layers) ** -0.25
    for block in model.blocks:
        res = getattr(block, sub)
        assert isinstance(res, DeepNormResidual)
        assert res.alpha == pytest.approx(alpha) and res.beta == pytest.approx(beta)
    res = getattr(model.blocks[0], sub)
    x = _x()
    args = (model.pos,) if sub == "attn" else ()
    with torch.no_grad():
        torch.testing.assert_close(res(x, *args), _ln(res.norm, alpha * x + res.sublayer(x, *args)))


def test_deepnorm_constants_table():
    assert deepnorm_constants(0, 6)["decoder"] == pytest.approx(((2 * 6) ** 0.25, (8 * 6) ** -0.25))
    assert deepnorm_constants(6, 0)["encoder"] == pytest.approx(((2 * 6) ** 0.25, (8 * 6) ** -0.25))
    both = deepnorm_constants(6, 6)
    assert both["encoder"] == pytest.approx((0.81 * (6**4 * 6) ** (1 / 16), 0.87 * (6**4 * 6) ** (-1 / 16)))
    assert both["decoder"] == pytest.approx(((3 * 6) ** 0.25, (12 * 6) ** -0.25))


@pytest.mark.parametrize("norm", PLACEMENTS)
def test_final_norm_present_exactly_for_pre_and_sandwich(norm):
    model = tiny_lm(norm=norm)
    if norm in ("pre", "sandwich"):
        assert isinstance(model.final_norm, nn.LayerNorm)
        assert any(n.startswith("final_norm.") for n, _ in model.named_parameters())
    else:
        assert isinstance(model.final_norm, nn.Identity)
        assert not any(n.startswith("final_norm") for n, _ in model.named_parameters())


@pytest.mark.parametrize("norm", PLACEMENTS)
def test_block_is_attention_residual_then_ffn_residual(norm):
    model = tiny_lm(norm=norm)
    _randomise_norms(model)
    block, x = model.blocks[0], _x()
    with torch.no_grad():
        torch.testing.assert_close(block(x, model.pos), block.ffn(block.attn(x, model.pos)))
    assert hasattr(block.attn, "post_norm") == (norm == "sandwich")


@pytest.mark.parametrize("norm", PLACEMENTS)
def test_lm_is_embed_blocks_final_norm_head(norm):
    model = tiny_lm(norm=norm, pos="learned")
    _randomise_norms(model)
    idx = torch.randint(0, 50, (2, 7))
    with torch.no_grad():
        h = model.tok_emb.weight[idx] + model.pos.weight[:7]
        for block in model.blocks:
            h = block(h, model.pos)
        if norm in ("pre", "sandwich"):
            h = F.layer_norm(h, (D,), model.final_norm.weight, model.final_norm.bias, model.final_norm.eps)
        torch.testing.assert_close(model(idx), h @ model.head.weight.T)
