"""ModelSpec validation: invalid combinations fail before any tensor, with a message naming the fix."""

from __future__ import annotations

import pytest

from ablate.config.model import ModelSpec, model_spec, validate
from ablate.config.options import ConfigError
from helpers.tiny_models import TINY


def spec(**kw) -> ModelSpec:
    return ModelSpec(**{**TINY, **kw})


def test_valid_spec_passes_through():
    s = spec(pos="rope", norm="sandwich", act="swiglu", n_kv_heads=2)
    assert validate(s) is s
    assert issubclass(ConfigError, ValueError)


def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ConfigError, match=r"d_model=30 is not divisible by model.n_heads=4") as err:
        validate(spec(d_model=30, n_heads=4))
    assert "divisors of d_model (1, 2, 3, 5, 6, 10, 15, 30)" in str(err.value)


@pytest.mark.parametrize("n_kv_heads", [3, -1])
def test_n_heads_not_divisible_by_n_kv_heads(n_kv_heads):
    with pytest.raises(ConfigError, match=r"n_kv_heads") as err:
        validate(spec(n_heads=4, n_kv_heads=n_kv_heads))
    assert "use a divisor of 4" in str(err.value) and "1 = multi-query" in str(err.value)


def test_gqa_divisors_are_accepted():
    for n_kv in (1, 2, 4):
        validate(spec(n_heads=4, n_kv_heads=n_kv))


@pytest.mark.parametrize(("d_model", "fraction", "features"), [(24, 0.5, "3.0"), (20, 1.0, "5.0"), (32, 0.3, "2.4")])
def test_rope_needs_an_even_rotary_dimension(d_model, fraction, features):
    with pytest.raises(ConfigError, match="positive even integer") as err:
        validate(spec(d_model=d_model, n_heads=4, pos="rope", pos_options={"fraction": fraction}))
    msg = str(err.value)
    assert f"= {features} features" in msg and "pos.fraction" in msg and "model.n_heads" in msg


def test_odd_head_dim_is_fine_without_rope():
    validate(spec(d_model=20, n_heads=4, pos="sinusoidal"))
    validate(spec(d_model=24, n_heads=4, pos="rope", pos_options={"fraction": 1.0}))


@pytest.mark.parametrize(
    ("norm", "init"), [("deepnorm", "gpt2"), ("deepnorm", "xavier"), ("pre", "deepnet"), ("post", "deepnet")]
)
def test_deepnorm_and_deepnet_go_together(norm, init):
    with pytest.raises(ConfigError, match="norm=deepnorm init=deepnet"):
        validate(spec(norm=norm, init=init))


def test_deepnorm_with_deepnet_is_valid():
    validate(spec(norm="deepnorm", init="deepnet"))


@pytest.mark.parametrize(
    ("field", "key", "valid"),
    [
        ("pos", "pos", ["none", "sinusoidal", "learned", "rope", "alibi"]),
        ("norm", "norm", ["pre", "post", "sandwich", "deepnorm"]),
        ("norm_layer", "norm.layer", ["layernorm", "rmsnorm", "scalenorm"]),
        ("act", "act", ["relu", "gelu", "gelu_tanh", "silu", "relu2", "glu", "reglu", "geglu", "swiglu", "bilinear"]),
        ("init", "init", ["pytorch", "xavier", "gpt2", "small", "deepnet"]),
        ("attn", "attn", ["math", "sdpa"]),
    ],
)
def test_unknown_option_lists_the_valid_ones(field, key, valid):
    with pytest.raises(ConfigError) as err:
        validate(spec(**{field: "bogus"}))
    msg = str(err.value)
    assert f"unknown {key}='bogus'" in msg
    assert "valid options: " + ", ".join(valid) in msg


@pytest.mark.parametrize("field", ["vocab_size", "n_layers", "d_model", "n_heads", "d_ff", "max_len"])
def test_sizes_must_be_positive(field):
    with pytest.raises(ConfigError, match=f"model.{field} must be positive"):
        validate(spec(**{field: 0}))


@pytest.mark.parametrize("dropout", [-0.1, 1.0])
def test_dropout_range(dropout):
    with pytest.raises(ConfigError, match="dropout"):
        validate(spec(dropout=dropout))


def test_model_spec_from_config_groups():
    cfg = {
        "model": {"n_layers": 2, "d_model": 32, "n_heads": 4, "max_len": 16},
        "pos": {"name": "rope", "fraction": 0.5, "base": 500},
        "norm": {"placement": "post", "layer": "rmsnorm"},
        "act": {"name": "swiglu", "match_params": False},
        "init": {"name": "small"},
        "attn": {"impl": "math", "n_kv_heads": 2},
    }
    s = model_spec(cfg, vocab_size=50)
    assert (s.d_ff, s.pos, dict(s.pos_options), s.norm, s.norm_layer) == (
        128,
        "rope",
        {"fraction": 0.5, "base": 500},
        "post",
        "rmsnorm",
    )
    assert (s.act, s.match_params, s.init, s.attn, s.n_kv_heads, s.vocab_size) == (
        "swiglu",
        False,
        "small",
        "math",
        2,
        50,
    )
    with pytest.raises(ConfigError, match="n_kv_heads"):
        model_spec({**cfg, "attn": {"impl": "math", "n_kv_heads": 3}}, vocab_size=50)
