"""The typed architecture spec every model is built from (:class:`ModelSpec`): the model's sizes
and, for every axis of :data:`ablate.nn.axes.AXES`, the chosen option's typed config. It is made
where the config is typed (:meth:`ablate.run.config.RunConfig.model_spec`) or read from a
checkpoint (:meth:`ModelSpec.from_dict`), and checked there (:meth:`ModelSpec.validate`); the models
(:mod:`ablate.nn.transformer`, :mod:`ablate.nn.seq2seq`) only read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from ablate.errors import ConfigError
from ablate.nn.axes import AXES
from ablate.nn.options import OptionConfig


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to build a model. ``options``: axis name -> the chosen option's typed
    config (an axis not there: its default option)."""

    vocab_size: int
    n_layers: int
    d_model: int
    n_heads: int
    d_ff: int
    max_len: int
    dropout: float = 0.0
    bias: bool = True
    tie_embeddings: bool | str = True
    scale_embeddings: bool = False
    n_kv_heads: int | None = None
    # encoder-decoder only (0 means a decoder-only LM)
    encoder_layers: int = 0
    options: Mapping[str, OptionConfig] = field(default_factory=dict)
    # the additive position signals at the token signal's scale (:attr:`token_rms`); False: a spec
    # stored before the contract, which builds the model it was trained as (a unit sinusoid)
    scale_contract: bool = True

    def __post_init__(self) -> None:
        """Options given as :meth:`as_dict` stores them (``{"pos": {"name": "rope", "base": ...}}``)
        become their typed configs; an axis that is not one is refused."""
        rows = {a.name: a for a in AXES}
        options: dict[str, OptionConfig] = {}
        for axis, option in self.options.items():
            if axis not in rows:
                raise ConfigError(f"{axis} is not an architecture axis; the axes are {', '.join(rows)}")
            if not isinstance(option, OptionConfig):
                keys = dict(option)
                option = rows[axis].config_class(str(keys.pop("name", rows[axis].default)))(**keys)
            options[axis] = option
        object.__setattr__(self, "options", options)

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def embed_scale(self) -> float:
        """The token embeddings' multiplier: sqrt(d) with ``scale_embeddings`` (Vaswani et al. 2017, Sec. 3.4), else 1."""
        return self.d_model**0.5 if self.scale_embeddings else 1.0

    @property
    def token_rms(self) -> float:
        """The token signal's RMS at initialisation: the init's embedding std times :attr:`embed_scale`.
        Every additive position signal starts at this scale (the scale contract: :mod:`ablate.nn.positional`)."""
        return float(self.option("init").build().embedding_std(self.d_model)) * self.embed_scale

    def option(self, axis: str) -> OptionConfig:
        """The typed config of the option chosen on the axis named ``axis`` (``pos``, ``norm_layer``)."""
        if axis in self.options:
            return self.options[axis]
        row = next(a for a in AXES if a.name == axis)
        return row.config_class(row.default)()

    def choice(self, axis: str) -> str:
        """The option chosen on the axis ``axis``: ``spec.choice("pos") == "rope"``."""
        return self.option(axis).name

    def as_dict(self) -> dict[str, Any]:
        """What a checkpoint stores: the sizes and, per axis, the option's name and keys."""
        stored: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "options"}
        options = {a.name: self.option(a.name) for a in AXES}
        return {**stored, "options": {k: {"name": c.name, **c.options()} for k, c in options.items()}}

    @classmethod
    def from_dict(cls, stored: Mapping[str, Any]) -> ModelSpec:
        """A spec as :meth:`as_dict` writes it, or in the flat layout of older checkpoints (:meth:`from_flat`).
        One stored before the scale contract (no ``scale_contract``) builds the model it was trained as."""
        stored = {"scale_contract": False, **stored}
        return cls(**stored) if "options" in stored else cls.from_flat(stored)

    @property
    def position_scales(self) -> dict[str, float]:
        """What an additive position scheme is built with (the scale contract): the sinusoid's
        amplitude (``token_rms``) and the learned table's multiplier (``embed_scale``); 1 and 1 in
        a spec stored before the contract."""
        if not self.scale_contract:
            return {"token_rms": 1.0, "embed_scale": 1.0}
        return {"token_rms": self.token_rms, "embed_scale": self.embed_scale}

    def contract_changes_model(self) -> bool:
        """A spec stored before the scale contract whose model the contract would change: a sinusoid
        (now at the tokens' scale), a learned table with ``scale_embeddings`` (now scaled with them)."""
        return not self.scale_contract and (
            self.choice("pos") == "sinusoidal" or (self.choice("pos") == "learned" and self.scale_embeddings)
        )

    @classmethod
    def from_flat(cls, flat: Mapping[str, Any]) -> ModelSpec:
        """The flat layout of the checkpoints written before the spec held typed configs (main
        780a50a, ``tests/fixtures``): each axis' option in a field named as the axis, and its keys
        in fields of their own (``pos_options``, ``norm_eps``, ``norm_bias``, ``norm_options``,
        ``match_params``, ``init_std``); a key the option does not take was stored with its default."""
        values = dict(flat)
        keys = {
            "pos": values.pop("pos_options", None) or {},
            "norm_layer": {
                "eps": values.pop("norm_eps", None),
                "bias": values.pop("norm_bias", None),
                **(values.pop("norm_options", None) or {}),
            },
            "act": {"match_params": values.pop("match_params", None)},
            "init": {"std": values.pop("init_std", None)},
        }
        options: dict[str, OptionConfig] = {}
        for axis in AXES:
            config = axis.config_class(str(values.pop(axis.name, axis.default)))
            taken = config.defaults()
            options[axis.name] = config(
                **{k: v for k, v in keys.get(axis.name, {}).items() if k in taken and v is not None}
            )
        return cls(**values, options=options)

    def validate(self) -> ModelSpec:
        """Refuse what no model can be built from, naming the fix: the sizes here, each option's
        own constraints by its typed config (``Rotary``: an odd rotary dimension; ``norm=deepnorm``
        and ``init=deepnet`` only as a pair: :meth:`ablate.nn.options.OptionConfig.validate`)."""
        for key in ("vocab_size", "n_layers", "d_model", "n_heads", "d_ff", "max_len"):
            if getattr(self, key) <= 0:
                raise ConfigError(f"model.{key} must be positive, got {getattr(self, key)}")
        if self.d_model % self.n_heads:
            divisors = ", ".join(str(h) for h in range(1, min(self.d_model, 64) + 1) if self.d_model % h == 0)
            raise ConfigError(
                f"model.d_model={self.d_model} is not divisible by model.n_heads={self.n_heads}: "
                f"choose n_heads among the divisors of d_model ({divisors})"
            )
        n_kv = self.n_heads if self.n_kv_heads is None else self.n_kv_heads
        if n_kv <= 0 or self.n_heads % n_kv:
            raise ConfigError(
                f"model.n_heads={self.n_heads} is not divisible by attn.n_kv_heads={n_kv}: grouped-query attention "
                f"shares each key/value head among n_heads/n_kv_heads query heads; use a divisor of {self.n_heads} (1 = multi-query)"
            )
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"model.dropout must be in [0, 1), got {self.dropout}")
        for axis in AXES:
            try:
                self.option(axis.name).validate(self)
            except ValueError as err:
                raise ConfigError(str(err)) from None
        return self


@dataclass(frozen=True)
class StackConfig:
    """One stack of a model with ``encoder_layers`` bidirectional and ``decoder_layers`` causal
    layers in all: a causal stack is the model's decoder, a bidirectional one its encoder.
    ``cross``: every block also attends to the encoder output (an encoder-decoder's decoder)."""

    causal: bool
    cross: bool
    encoder_layers: int
    decoder_layers: int

    @property
    def n_layers(self) -> int:
        return self.decoder_layers if self.causal else self.encoder_layers

    @property
    def role(self) -> str:
        """``decoder`` or ``encoder``: which of the model's stacks this is (DeepNet's Table 1)."""
        return "decoder" if self.causal else "encoder"

    @classmethod
    def decoder_only(cls, n_layers: int) -> StackConfig:
        return cls(causal=True, cross=False, encoder_layers=0, decoder_layers=n_layers)

    @classmethod
    def encoder_only(cls, n_layers: int) -> StackConfig:
        return cls(causal=False, cross=False, encoder_layers=n_layers, decoder_layers=0)

    @classmethod
    def encoder_decoder(cls, encoder_layers: int, decoder_layers: int) -> tuple[StackConfig, StackConfig]:
        """The encoder's and the decoder's configs."""
        return (
            cls(causal=False, cross=False, encoder_layers=encoder_layers, decoder_layers=decoder_layers),
            cls(causal=True, cross=True, encoder_layers=encoder_layers, decoder_layers=decoder_layers),
        )
