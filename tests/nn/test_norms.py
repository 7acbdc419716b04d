"""Normalisation layers against their formulas."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ablate.nn.axes import NORM_LAYER
from ablate.nn.norms import ScaleNorm
from helpers.tiny_models import tiny_lm

D = 16


def build_norm(layer: str, d_model: int, **options):
    """The norm layer ``layer`` with ``options``, as a model builds it (its typed config)."""
    return NORM_LAYER.config_class(layer)(**options).build(d_model)


def test_layernorm_matches_the_formula():
    torch.manual_seed(0)
    ln = build_norm("layernorm", D)
    with torch.no_grad():
        ln.weight.normal_()
        ln.bias.normal_()
    x = 3 * torch.randn(4, 5, D) + 1
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    expected = (x - mean) / torch.sqrt(var + 1e-5) * ln.weight + ln.bias
    torch.testing.assert_close(ln(x), expected)


def test_rmsnorm_matches_x_over_rms_times_gain():
    torch.manual_seed(0)
    norm = build_norm("rmsnorm", D, eps=1e-6)
    with torch.no_grad():
        norm.weight.normal_()
    x = 3 * torch.randn(4, 5, D) + 1  # a non-zero mean: RMSNorm must not centre
    rms = torch.sqrt(x.square().mean(-1, keepdim=True) + 1e-6)
    torch.testing.assert_close(norm(x), x / rms * norm.weight)
    assert [n for n, _ in norm.named_parameters()] == ["weight"]


def test_scalenorm_is_g_x_over_norm_with_g_initialised_to_sqrt_d():
    torch.manual_seed(0)
    norm = build_norm("scalenorm", D)
    assert isinstance(norm, ScaleNorm)
    assert norm.scale.numel() == 1 and norm.scale.item() == pytest.approx(math.sqrt(D))
    x = torch.randn(4, 5, D)
    torch.testing.assert_close(norm(x), math.sqrt(D) * x / x.norm(dim=-1, keepdim=True))
    with torch.no_grad():
        norm.scale.fill_(0.7)
    torch.testing.assert_close(norm(x), 0.7 * x / x.norm(dim=-1, keepdim=True))
    assert sum(p.numel() for p in norm.parameters()) == 1


def test_norm_bias_false_gives_layernorm_without_bias():
    ln = build_norm("layernorm", D, bias=False)
    assert isinstance(ln, nn.LayerNorm) and ln.bias is None
    assert [n for n, _ in ln.named_parameters()] == ["weight"]
    assert build_norm("layernorm", D, bias=True).bias is not None


@pytest.mark.parametrize("norm", ["pre", "post", "sandwich"])
def test_norm_bias_false_in_the_model_leaves_no_norm_bias(norm):
    names = [n for n, _ in tiny_lm(norm=norm, norm_bias=False).named_parameters()]
    norm_params = [n for n in names if "norm" in n]
    assert norm_params and all(n.endswith("weight") for n in norm_params), norm_params
    with_bias = [n for n, _ in tiny_lm(norm=norm, norm_bias=True).named_parameters() if "norm" in n]
    assert any(n.endswith("bias") for n in with_bias)


@pytest.mark.parametrize(
    ("layer", "cls"), [("layernorm", nn.LayerNorm), ("rmsnorm", nn.RMSNorm), ("scalenorm", ScaleNorm)]
)
def test_norm_layer_option_reaches_every_norm_in_the_model(layer, cls):
    model = tiny_lm(norm="sandwich", norm_layer=layer)
    residual = ("norm", "post_norm", "final_norm")  # by name: a norm of another axis (a QK-norm) is not norm.layer's
    norms = [m for n, m in model.named_modules() if n.rsplit(".", 1)[-1] in residual]
    assert len(norms) == 2 * 2 * 2 + 1  # 2 layers x 2 sub-layers x (norm, post_norm) + final
    assert all(isinstance(m, cls) for m in norms)


def test_unknown_norm_layer_lists_the_valid_ones():
    with pytest.raises(ValueError, match="layernorm, rmsnorm, scalenorm"):
        build_norm("batchnorm", D)


def test_dyt_matches_gamma_tanh_alpha_x_plus_beta():
    """Zhu et al. 2025, eq. 1: DyT(x) = gamma * tanh(alpha * x) + beta, alpha a learned scalar
    initialised to alpha_init; no statistics over the features (each element on its own)."""
    torch.manual_seed(0)
    norm = build_norm("dyt", D, alpha_init=0.8)
    assert norm.alpha.item() == pytest.approx(0.8) and norm.alpha.shape == ()
    assert torch.equal(norm.weight, torch.ones(D)) and torch.equal(norm.bias, torch.zeros(D))
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = 3 * torch.randn(4, 5, D) + 1
    torch.testing.assert_close(norm(x), norm.weight * torch.tanh(0.8 * x) + norm.bias)
    # element-wise: changing one feature changes only that feature's output
    y = x.clone()
    y[..., 0] += 5
    torch.testing.assert_close(norm(y)[..., 1:], norm(x)[..., 1:])
    assert build_norm("dyt", D).alpha.item() == pytest.approx(0.5)  # the paper's default
