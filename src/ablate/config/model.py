"""The typed architecture spec and the one place that says which options go together.

``train.py`` composes a Hydra config; :func:`model_spec` turns its architecture groups (``model``,
``pos``, ``norm``, ``act``, ``init``, ``attn``) into a frozen :class:`ModelSpec` and rejects
invalid combinations with a message that names the fix, before any tensor is allocated.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ablate.config.options import ConfigError, check_option_keys, group_keys
from ablate.nn.axes import AXES
from ablate.nn.spec import ModelSpec


def _choice(value: str, valid: Mapping | tuple | list, key: str) -> str:
    if value not in valid:
        raise ConfigError(f"unknown {key}={value!r}; valid options: {', '.join(valid)}")
    return value


def validate(spec: ModelSpec) -> ModelSpec:
    """Reject invalid combinations with a message that names the fix: the model's sizes here,
    each option's own constraints by its typed config (``Rotary``: an odd rotary dimension;
    ``norm=deepnorm`` and ``init=deepnet`` only as a pair: :meth:`ablate.nn.options.OptionConfig.validate`)."""
    for axis in AXES:
        _choice(getattr(spec, axis.spec_field), axis.options(), axis.label)
    for key in ("vocab_size", "n_layers", "d_model", "n_heads", "d_ff", "max_len"):
        if getattr(spec, key) <= 0:
            raise ConfigError(f"model.{key} must be positive, got {getattr(spec, key)}")
    if spec.d_model % spec.n_heads:
        raise ConfigError(
            f"model.d_model={spec.d_model} is not divisible by model.n_heads={spec.n_heads}: "
            f"choose n_heads among the divisors of d_model ({', '.join(str(h) for h in range(1, spec.d_model + 1) if spec.d_model % h == 0 and h <= 64)})"
        )
    n_kv = spec.n_heads if spec.n_kv_heads is None else spec.n_kv_heads
    if n_kv <= 0 or spec.n_heads % n_kv:
        raise ConfigError(
            f"model.n_heads={spec.n_heads} is not divisible by attn.n_kv_heads={n_kv}: grouped-query attention "
            f"shares each key/value head among n_heads/n_kv_heads query heads; use a divisor of {spec.n_heads} (1 = multi-query)"
        )
    for axis in AXES:
        try:
            axis.config(spec).validate(spec)
        except ValueError as err:
            raise ConfigError(str(err)) from None
    if not 0.0 <= spec.dropout < 1.0:
        raise ConfigError(f"model.dropout must be in [0, 1), got {spec.dropout}")
    return spec


def model_spec(cfg: Mapping[str, Any], vocab_size: int, max_len: int | None = None) -> ModelSpec:
    """Build and validate the spec from a composed config (``cfg.model``, ``cfg.pos``, ...)."""
    check_option_keys(cfg)  # every key of pos/norm/act/init/attn applies to the chosen option
    model, pos, norm, act, init, attn = (cfg[k] for k in ("model", "pos", "norm", "act", "init", "attn"))
    pos_options = {k: v for k, v in dict(pos).items() if k != "name"}
    d_ff = model.get("d_ff") or 4 * model["d_model"]
    spec = ModelSpec(
        vocab_size=vocab_size,
        n_layers=model.get("n_layers") or model.get("decoder_layers"),
        encoder_layers=model.get("encoder_layers", 0) or 0,
        d_model=model["d_model"],
        n_heads=model["n_heads"],
        d_ff=d_ff,
        max_len=model.get("max_len") or max_len or 0,
        dropout=model.get("dropout", 0.0),
        bias=model.get("bias", True),
        tie_embeddings=model.get("tie_embeddings", True),
        scale_embeddings=model.get("scale_embeddings", False),
        pos=pos["name"],
        pos_options=pos_options,
        norm=norm["placement"],
        norm_layer=norm.get("layer", "layernorm"),
        norm_bias=True if norm.get("bias") is None else norm["bias"],  # null: the layer's default
        norm_eps=1e-5 if norm.get("eps") is None else norm["eps"],
        norm_options={k: v for k, v in dict(norm).items() if k not in group_keys("norm")},
        act=act["name"],
        match_params=act.get("match_params", True),
        init=init["name"],
        init_std=0.02 if init.get("std") is None else init["std"],
        attn=attn["impl"],
        n_kv_heads=attn.get("n_kv_heads"),
    )
    return validate(spec)
