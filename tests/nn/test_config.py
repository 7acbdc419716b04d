"""ModelSpec validation: invalid combinations fail before any tensor, with a message naming the fix;
the architecture groups of a config typed into a spec; the two layouts a checkpoint stores a spec in."""

from __future__ import annotations

import pytest

from ablate.errors import ConfigError
from ablate.nn.axes import AXES, typed_options
from ablate.nn.spec import ModelSpec
from helpers.tiny_models import TINY


def spec(**kw) -> ModelSpec:
    return ModelSpec.from_flat({**TINY, **kw})


def test_valid_spec_passes_through():
    s = spec(pos="rope", norm="sandwich", act="swiglu", n_kv_heads=2)
    assert s.validate() is s
    assert issubclass(ConfigError, ValueError)


def test_d_model_not_divisible_by_n_heads():
    with pytest.raises(ConfigError, match=r"d_model=30 is not divisible by model.n_heads=4") as err:
        spec(d_model=30, n_heads=4).validate()
    assert "divisors of d_model (1, 2, 3, 5, 6, 10, 15, 30)" in str(err.value)


@pytest.mark.parametrize("n_kv_heads", [3, -1])
def test_n_heads_not_divisible_by_n_kv_heads(n_kv_heads):
    with pytest.raises(ConfigError, match=r"n_kv_heads") as err:
        spec(n_heads=4, n_kv_heads=n_kv_heads).validate()
    assert "use a divisor of 4" in str(err.value) and "1 = multi-query" in str(err.value)


def test_gqa_divisors_are_accepted():
    for n_kv in (1, 2, 4):
        spec(n_heads=4, n_kv_heads=n_kv).validate()


@pytest.mark.parametrize(("d_model", "fraction", "features"), [(24, 0.5, "3.0"), (20, 1.0, "5.0"), (32, 0.3, "2.4")])
def test_rope_needs_an_even_rotary_dimension(d_model, fraction, features):
    with pytest.raises(ConfigError, match="positive even integer") as err:
        spec(d_model=d_model, n_heads=4, pos="rope", pos_options={"fraction": fraction}).validate()
    msg = str(err.value)
    assert f"= {features} features" in msg and "pos.fraction" in msg and "model.n_heads" in msg


def test_odd_head_dim_is_fine_without_rope():
    spec(d_model=20, n_heads=4, pos="sinusoidal").validate()
    spec(d_model=24, n_heads=4, pos="rope", pos_options={"fraction": 1.0}).validate()


@pytest.mark.parametrize(
    ("norm", "init"), [("deepnorm", "gpt2"), ("deepnorm", "xavier"), ("pre", "deepnet"), ("post", "deepnet")]
)
def test_deepnorm_and_deepnet_go_together(norm, init):
    with pytest.raises(ConfigError, match="norm=deepnorm init=deepnet"):
        spec(norm=norm, init=init).validate()


def test_deepnorm_with_deepnet_is_valid():
    spec(norm="deepnorm", init="deepnet").validate()


@pytest.mark.parametrize("axis", AXES, ids=lambda a: a.label)
def test_unknown_option_lists_the_valid_ones(axis):
    """Every option, in the registry's order, to the end of the message (the list is the table's)."""
    with pytest.raises(ConfigError) as err:
        spec(**{axis.name: "bogus"}).validate()
    msg = str(err.value)
    assert f"unknown {axis.label}='bogus'" in msg
    assert msg.endswith("valid options: " + ", ".join(axis.options()))


@pytest.mark.parametrize("field", ["vocab_size", "n_layers", "d_model", "n_heads", "d_ff", "max_len"])
def test_sizes_must_be_positive(field):
    with pytest.raises(ConfigError, match=f"model.{field} must be positive"):
        spec(**{field: 0}).validate()


@pytest.mark.parametrize("dropout", [-0.1, 1.0])
def test_dropout_range(dropout):
    with pytest.raises(ConfigError, match="dropout"):
        spec(dropout=dropout).validate()


def _stored_options(spec: ModelSpec) -> dict[str, dict]:
    """The options a checkpoint stores of the axes above; any axis added since stays at its default."""
    options = spec.as_dict()["options"]
    assert all(options[a.name] == {"name": a.default, **spec.option(a.name).options()} for a in AXES[6:])
    return {a.name: options[a.name] for a in AXES[:6]}


def test_the_config_groups_typed_into_a_spec():
    groups = {
        "pos": {"name": "rope", "fraction": 0.5, "base": 500.0},
        "norm": {"placement": "post", "layer": "rmsnorm", "eps": None, "bias": None, "alpha_init": None},
        "act": {"name": "swiglu", "match_params": False},
        "init": {"name": "small"},
        "attn": {"impl": "math", "n_kv_heads": 2},
    }
    s = ModelSpec(**TINY, **typed_options(groups)).validate()
    assert _stored_options(s) == {
        "pos": {"name": "rope", "base": 500.0, "fraction": 0.5},
        "norm": {"name": "post"},
        "norm_layer": {"name": "rmsnorm", "eps": 1e-5},
        "act": {"name": "swiglu", "match_params": False},
        "init": {"name": "small"},
        "attn": {"name": "math"},
    }
    assert s.n_kv_heads == 2 and ModelSpec.from_dict(s.as_dict()) == s  # what a checkpoint stores, read back
    with pytest.raises(ConfigError, match="n_kv_heads"):
        ModelSpec(**TINY, **typed_options({**groups, "attn": {"impl": "math", "n_kv_heads": 3}})).validate()


def test_the_flat_layout_of_older_checkpoints_reads_as_the_same_spec():
    flat = {**TINY, "pos": "rope", "pos_options": {"fraction": 0.5}, "norm": "pre", "norm_layer": "dyt"}
    flat |= {"norm_bias": True, "norm_eps": 1e-5, "norm_options": {"alpha_init": 0.8}, "act": "relu"}
    flat |= {"match_params": True, "init": "xavier", "init_std": 0.02, "attn": "sdpa", "n_kv_heads": None}
    spec = ModelSpec.from_dict(flat)
    assert _stored_options(spec) == {
        "pos": {"name": "rope", "base": 10000.0, "fraction": 0.5},
        "norm": {"name": "pre"},
        "norm_layer": {"name": "dyt", "alpha_init": 0.8},  # LayerNorm's eps and bias do not apply
        "act": {"name": "relu"},
        "init": {"name": "xavier"},
        "attn": {"name": "sdpa"},
    }
