"""Initialisation schemes: the standard deviation (or bound) of every matrix, estimated on a model
wide enough (d_model=256) for a tight estimate."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ablate.nn.roles import Role, model_matrices
from helpers.tiny_models import tiny_lm

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


def _fused_blocks(module: nn.Module, lin: nn.Linear):
    """(rows, fan_out) of each matrix ``module`` declares in its layer ``lin`` (ablate.nn.roles)."""
    return [(m.view(), m.view().size(0)) for m in module.matrices() if m.weight is lin.weight]


def test_modules_declare_the_matrices_of_their_fused_layers():
    model = wide_lm(act="swiglu", n_kv_heads=2, tie_embeddings=False)
    attn, ffn = model.blocks[0].attn.sublayer, model.blocks[0].ffn.sublayer
    assert [(m.role, m.view().size(0)) for m in attn.matrices()] == [
        (Role.QUERY, D),
        (Role.KEY, 64),  # 2 kv heads of 32
        (Role.VALUE, 64),
        (Role.ATTN_OUT, D),
    ]
    width = ffn.fc_out.in_features
    assert [(m.role, m.view().size(0)) for m in ffn.matrices()] == [
        (Role.FFN_GATE, width),
        (Role.FFN_IN, width),
        (Role.FFN_OUT, D),
    ]
    # each matrix is its rows of the fused weight: q, k, v in this order (the forward's split)
    q, k, v = (m.view() for m in attn.matrices()[:3])
    assert torch.equal(torch.cat([q, k, v]), attn.qkv.weight)
    roles = [m.role for m in model_matrices(model)]
    assert roles[0] is Role.EMBEDDING and roles[-1] is Role.LINEAR  # tok_emb first, the undeclared head last


@pytest.mark.parametrize("act", ["gelu", "swiglu"])
def test_xavier_uniform_per_matrix(act):
    model = wide_lm(init="xavier", act=act, n_kv_heads=2, tie_embeddings=False)
    matrices = [m for m in model_matrices(model) if m.role is not Role.EMBEDDING]
    assert len(matrices) == N_LAYERS * (4 + (3 if act == "swiglu" else 2)) + 1  # q, k, v, o; ffn; head
    for i, matrix in enumerate(matrices):
        rows = matrix.view()
        bound = math.sqrt(6 / (rows.size(1) + rows.size(0)))
        what = f"{matrix.role.value}[{i}]"
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
        for rows, fan_out in _fused_blocks(ffn, ffn.fc_in):
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


def test_pytorch_init_leaves_module_defaults_and_draws_tables_as_the_head():
    """Linears keep PyTorch's defaults; every embedding table (tied or not, token or position)
    takes nn.Linear's U(-1/sqrt(d), 1/sqrt(d)), not nn.Embedding's N(0, 1) (logits of std sqrt(d) tied)."""
    for tied in (False, True):
        model = wide_lm(init="pytorch", tie_embeddings=tied)
        fc_in = model.blocks[0].ffn.sublayer.fc_in.weight
        assert fc_in.abs().max().item() <= 1 / math.sqrt(D) + 1e-6  # kaiming-uniform(a=sqrt 5) bound 1/sqrt(fan_in)
        for table in (model.tok_emb.weight, model.pos.weight):
            assert table.abs().max().item() <= 1 / math.sqrt(D) + 1e-6
            _assert_std(table, (3 * D) ** -0.5, "embedding table")
