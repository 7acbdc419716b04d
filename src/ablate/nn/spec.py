"""The typed architecture spec every model is built from (:class:`ModelSpec`). Which options go
together is checked where a config becomes a spec (:func:`ablate.config.model.model_spec`); the models
(:mod:`ablate.nn.transformer`, :mod:`ablate.nn.seq2seq`) only read it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class ModelSpec:
    """Everything needed to build a model, validated."""

    vocab_size: int
    n_layers: int
    d_model: int
    n_heads: int
    d_ff: int
    max_len: int
    dropout: float = 0.0
    bias: bool = True
    tie_embeddings: bool = True
    scale_embeddings: bool = False
    pos: str = "learned"
    pos_options: Mapping[str, Any] = field(default_factory=dict)
    norm: str = "pre"
    norm_layer: str = "layernorm"
    norm_bias: bool = True
    norm_eps: float = 1e-5
    norm_options: Mapping[str, Any] = field(default_factory=dict)  # the layer's own, e.g. DyT's alpha_init
    act: str = "gelu"
    match_params: bool = True
    init: str = "gpt2"
    init_std: float = 0.02
    attn: str = "sdpa"
    n_kv_heads: int | None = None
    # encoder-decoder only (0 means a decoder-only LM)
    encoder_layers: int = 0

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pos_options"] = dict(self.pos_options)
        d["norm_options"] = dict(self.norm_options)
        return d


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
