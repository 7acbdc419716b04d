"""Initialisation schemes: the standard deviation (or bound) of every matrix, estimated on a model
wide enough (d_model=256) for a tight estimate."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ._models import tiny_lm

D, N_LAYERS, VOCAB = 256, 2, 300
TOL = 0.05  # relative tolerance on an estimated std (>= 64k samples per matrix: ~0.3% noise)


def wide_lm(**kw):
    base = dict(d_model=D, n_heads=8, d_ff=4 * D, n_layers=N_LAYERS, vocab_size=VOCAB, max_len=32)
    return tiny_lm(**{**base, **kw})


def _std(t: torch.Tensor) -> float:
    return t.detach().float().std().item()


def _assert_std(t, expected, what):
    assert _std(t) == pytest.approx(expected, rel=TOL), f"{what}: std {_std(t):.5f}, expected {expected:.5f}"


def _linears(model):
    return {n: m for n, m in model.named_modules() if isinstance(m, nn.Linear)}


def _assert_zero_biases(model):
    biases = [(n, p) for n, p in model.named_parameters() if n.endswith(".bias") and "norm" not in n]
    assert biases
    for n, p in biases:
        assert torch.all(p == 0), n


@pytest.mark.parametrize("tie", [True, False])
def test_gpt2_init(tie):
    model = wide_lm(init="gpt2", pos="learned", tie_embeddings=tie)
    residual_std = 0.02 / math.sqrt(2 * N_LAYERS)
    for name, lin in _linears(model).items():
        if name.endswith(("out_proj", "fc_out")):
            _assert_std(lin.weight, residual_std, name)
        else:
            _assert_std(lin.weight, 0.02, name)
    _assert_std(model.tok_emb.weight, 0.02, "tok_emb")
    _assert_std(model.pos.weight, 0.02, "pos")
    _assert_zero_biases(model)
    for m in model.modules():  # norms keep gain 1, bias 0
        if isinstance(m, nn.LayerNorm):
            assert torch.all(m.weight == 1) and torch.all(m.bias == 0)


def test_gpt2_residual_scaling_follows_depth():
    for n_layers in (1, 2):
        model = wide_lm(init="gpt2", n_layers=n_layers)
        _assert_std(model.blocks[0].attn.sublayer.out_proj.weight, 0.02 / math.sqrt(2 * n_layers), f"N={n_layers}")


def test_gpt2_init_std_option():
    model = wide_lm(init="gpt2", init_std=0.05)
    _assert_std(model.blocks[0].ffn.sublayer.fc_in.weight, 0.05, "fc_in")
    _assert_std(model.blocks[0].ffn.sublayer.fc_out.weight, 0.05 / math.sqrt(2 * N_LAYERS), "fc_out")


@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_small_init_std_is_sqrt_2_over_5d(act):
    model = wide_lm(init="small", act=act, pos="learned", tie_embeddings=False)
    expected = math.sqrt(2 / (5 * D))
    for name, lin in _linears(model).items():
        _assert_std(lin.weight, expected, name)
    _assert_std(model.tok_emb.weight, expected, "tok_emb")
    _assert_std(model.pos.weight, expected, "pos")
    _assert_zero_biases(model)


def _fused_blocks(lin: nn.Linear):
    """(rows, fan_out) of each matrix stacked in ``lin``."""
    sizes = getattr(lin, "fused_sizes", (lin.out_features,))
    return list(zip(lin.weight.split(list(sizes), dim=0), sizes))


@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_xavier_uniform_per_matrix(act):
    model = wide_lm(init="xavier", act=act, n_kv_heads=2, tie_embeddings=False)
    qkv = model.blocks[0].attn.sublayer.qkv
    assert [s for _, s in _fused_blocks(qkv)] == [D, 64, 64]  # q, k, v with 2 kv heads of 32
    for name, lin in _linears(model).items():
        for i, (rows, fan_out) in enumerate(_fused_blocks(lin)):
            bound = math.sqrt(6 / (lin.in_features + fan_out))
            what = f"{name}[{i}]"
            assert rows.abs().max().item() <= bound + 1e-6, what
            assert rows.abs().max().item() > 0.95 * bound, what  # uniform fills up to its bound
            _assert_std(rows, bound / math.sqrt(3), what)
    _assert_std(model.tok_emb.weight, D**-0.5, "tok_emb")
    _assert_zero_biases(model)


@pytest.mark.parametrize("n_layers", [1, 2])
@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_deepnet_init(act, n_layers):
    model = wide_lm(norm="deepnorm", init="deepnet", act=act, n_layers=n_layers, n_kv_heads=2)
    beta = (8 * n_layers) ** -0.25
    kv = 64
    for i, block in enumerate(model.blocks):
        attn, ffn = block.attn.sublayer, block.ffn.sublayer
        w = attn.qkv.weight
        q, k, v = w[:D], w[D : D + kv], w[D + kv :]
        _assert_std(q, math.sqrt(2 / (D + D)), f"{i}.q")  # gain 1
        _assert_std(k, math.sqrt(2 / (D + kv)), f"{i}.k")  # gain 1
        _assert_std(v, beta * math.sqrt(2 / (D + kv)), f"{i}.v")
        _assert_std(attn.out_proj.weight, beta * math.sqrt(2 / (D + D)), f"{i}.out_proj")
        for rows, fan_out in _fused_blocks(ffn.fc_in):
            _assert_std(rows, beta * math.sqrt(2 / (D + fan_out)), f"{i}.fc_in")
        width = ffn.fc_out.in_features
        _assert_std(ffn.fc_out.weight, beta * math.sqrt(2 / (width + D)), f"{i}.fc_out")
    _assert_zero_biases(model)


def test_tied_embeddings_share_one_tensor():
    tied = tiny_lm(tie_embeddings=True)
    assert tied.head.weight is tied.tok_emb.weight
    untied = tiny_lm(tie_embeddings=False)
    assert untied.head.weight is not untied.tok_emb.weight
    assert untied.num_params() - tied.num_params() == 50 * 32
    # a gradient step on the head moves the embedding too
    tied.head(torch.randn(1, 32)).sum().backward()
    assert tied.tok_emb.weight.grad is not None and tied.tok_emb.weight.grad.abs().sum() > 0


def test_pytorch_init_leaves_module_defaults():
    model = wide_lm(init="pytorch", tie_embeddings=False)
    fc_in = model.blocks[0].ffn.sublayer.fc_in.weight
    assert fc_in.abs().max().item() <= 1 / math.sqrt(D) + 1e-6  # kaiming-uniform(a=sqrt 5) bound 1/sqrt(fan_in)
    _assert_std(model.tok_emb.weight, 1.0, "tok_emb")
