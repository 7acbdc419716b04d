"""Feed-forward networks: every activation against its formula, and the gated-width parameter match."""

from __future__ import annotations

import math
import re

import pytest
import torch

from ablate.nn.axes import ACT
from ablate.nn.ffn import ACTIVATIONS, GATES, FeedForward, GatedFeedForward, hidden_width
from helpers.tiny_models import tiny_lm


def _gelu_erf(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def _gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


def _relu(x):
    return torch.where(x > 0, x, torch.zeros_like(x))


# the formulas, written independently of the code under test
PLAIN = {
    "relu": _relu,
    "gelu": _gelu_erf,
    "gelu_tanh": _gelu_tanh,
    "silu": lambda x: x / (1 + torch.exp(-x)),
    "relu2": lambda x: _relu(x) ** 2,
}
GATED = {  # gate nonlinearity applied to x W; multiplied by x V (Shazeer 2020, eqs. 5-6)
    "glu": lambda a: 1 / (1 + torch.exp(-a)),
    "reglu": _relu,
    "geglu": _gelu_erf,
    "swiglu": lambda a: a / (1 + torch.exp(-a)),
    "bilinear": lambda a: a,
}


def build_ffn(act: str, d_model: int, d_ff: int, *, bias: bool = True, **options):
    """The FFN of ``act``, as a model builds it (its typed config)."""
    return ACT.config_class(act)(**options).build(d_model, d_ff, act, bias=bias, dropout=0.0)


def test_every_registered_activation_is_covered():
    assert set(PLAIN) == set(ACTIVATIONS) and set(GATED) == set(GATES)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("act", list(PLAIN))
def test_plain_ffn_matches_its_formula(act, bias):
    torch.manual_seed(0)
    ffn = build_ffn(act, 16, 48, bias=bias).double()
    assert isinstance(ffn, FeedForward) and ffn.fc_in.out_features == 48
    x = 8 * torch.randn(
        3, 7, 16, dtype=torch.float64
    )  # pre-activations over about +-10: every piece of a piecewise one
    b_in = ffn.fc_in.bias if bias else 0
    b_out = ffn.fc_out.bias if bias else 0
    expected = PLAIN[act](x @ ffn.fc_in.weight.T + b_in) @ ffn.fc_out.weight.T + b_out
    with torch.no_grad():
        torch.testing.assert_close(ffn(x), expected)


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("act", list(GATED))
def test_gated_ffn_matches_its_formula(act, bias):
    torch.manual_seed(0)
    ffn = build_ffn(act, 16, 48, bias=bias).double()
    width = 32  # 2/3 of 48
    assert isinstance(ffn, GatedFeedForward) and ffn.fc_in.out_features == 2 * width
    W, V = ffn.fc_in.weight[:width], ffn.fc_in.weight[width:]
    bw, bv = (ffn.fc_in.bias[:width], ffn.fc_in.bias[width:]) if bias else (0, 0)
    b_out = ffn.fc_out.bias if bias else 0
    x = 8 * torch.randn(
        3, 7, 16, dtype=torch.float64
    )  # pre-activations over about +-10: every piece of a piecewise one
    expected = (GATED[act](x @ W.T + bw) * (x @ V.T + bv)) @ ffn.fc_out.weight.T + b_out
    with torch.no_grad():
        torch.testing.assert_close(ffn(x), expected)


def _n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("act", list(GATED))
def test_gated_ffn_at_default_width_matches_plain_parameter_count(act, bias):
    plain = _n_params(build_ffn("gelu", 64, 256, bias=bias))
    gated = _n_params(build_ffn(act, 64, 256, bias=bias))
    assert abs(gated - plain) / plain < 0.01, (gated, plain)
    unmatched = _n_params(build_ffn(act, 64, 256, bias=bias, match_params=False))
    assert unmatched / plain == pytest.approx(1.5, rel=0.01)


def test_match_params_reaches_the_model():
    plain = tiny_lm(act="gelu", d_model=64, d_ff=256).num_params()
    matched = tiny_lm(act="swiglu", d_model=64, d_ff=256).num_params()
    unmatched = tiny_lm(act="swiglu", d_model=64, d_ff=256, match_params=False)
    assert abs(matched - plain) / plain < 0.01
    assert unmatched.blocks[0].ffn.sublayer.fc_out.in_features == 256


def test_hidden_width():
    assert hidden_width("swiglu", 256) == 171
    assert hidden_width("swiglu", 256, match_params=False) == 256
    assert hidden_width("gelu", 256) == 256


def test_unknown_activation_lists_the_valid_ones():
    with pytest.raises(ValueError, match=re.escape("valid options: " + ", ".join(ACT.options())) + "$"):
        build_ffn("tanh", 8, 16)
