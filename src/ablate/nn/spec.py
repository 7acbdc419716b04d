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

    def axes(self) -> dict[str, Any]:
        """The ablation axes, flat, for grouping runs in W&B and in the summary table
        (:data:`ablate.nn.axes.AXES`: ``pos``, ``norm``, ``norm_layer``, ``act``, ``init``, ``attn``)."""
        from ablate.nn.axes import AXES

        return {axis.spec_field: getattr(self, axis.spec_field) for axis in AXES}

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["pos_options"] = dict(self.pos_options)
        d["norm_options"] = dict(self.norm_options)
        return d
