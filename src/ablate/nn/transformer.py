"""Model assembly: embeddings + positional scheme + a stack of blocks + output head.

:func:`build_stack` makes the stacks that every model shares (the decoder-only LM here, the
encoder and decoder of the translation model); :class:`TransformerLM` is the decoder-only LM.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from torch import Tensor, nn

from ablate.nn.attention import CrossAttention, SelfAttention
from ablate.nn.block import PLACEMENTS, Block, DeepNormResidual, LayerCache, NormFactory, Residual, deepnorm_constants
from ablate.nn.embedding import TokenEmbedding
from ablate.nn.ffn import build_ffn
from ablate.nn.init import initialise
from ablate.nn.norms import build_norm
from ablate.nn.positional import PositionalEncoding, build_positional
from ablate.nn.spec import ModelSpec


def norm_factory(spec: ModelSpec) -> NormFactory:
    return partial(
        build_norm, spec.norm_layer, spec.d_model, eps=spec.norm_eps, bias=spec.norm_bias, **spec.norm_options
    )


def build_stack(
    spec: ModelSpec, n_layers: int, *, causal: bool, cross: bool, deepnorm: tuple[float, float] = (1.0, 1.0)
) -> nn.ModuleList:
    """``n_layers`` blocks of the spec's placement; ``causal`` for decoders, ``cross`` adds
    encoder-decoder attention. ``deepnorm`` is (alpha, beta) for ``norm=deepnorm``."""
    residual, make_norm = PLACEMENTS[spec.norm], norm_factory(spec)
    wrap: Callable[[nn.Module], Residual]
    if spec.norm == "deepnorm":
        assert issubclass(residual, DeepNormResidual)  # PLACEMENTS["deepnorm"]
        wrap = partial(residual, make_norm=make_norm, alpha=deepnorm[0], beta=deepnorm[1])
    else:
        wrap = partial(residual, make_norm=make_norm)

    def block() -> Block:
        return Block(
            SelfAttention(
                spec.d_model,
                spec.n_heads,
                spec.n_kv_heads,
                causal=causal,
                impl=spec.attn,
                bias=spec.bias,
                dropout=spec.dropout,
            ),
            build_ffn(
                spec.act, spec.d_model, spec.d_ff, match_params=spec.match_params, bias=spec.bias, dropout=spec.dropout
            ),
            wrap,
            CrossAttention(
                spec.d_model, spec.n_heads, spec.n_kv_heads, impl=spec.attn, bias=spec.bias, dropout=spec.dropout
            )
            if cross
            else None,
        )

    return nn.ModuleList(block() for _ in range(n_layers))


def final_norm(spec: ModelSpec) -> nn.Module:
    """Placements that leave the residual stream unnormalised (pre, sandwich) end with a norm."""
    return norm_factory(spec)() if PLACEMENTS[spec.norm].needs_final_norm else nn.Identity()


class TransformerLM(nn.Module):
    """Decoder-only language model (GPT-style): logits for the next token at every position."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.spec = spec
        self.tok_emb = TokenEmbedding(spec.vocab_size, spec.d_model, spec.scale_embeddings)
        self.pos: PositionalEncoding = build_positional(
            spec.pos, d_model=spec.d_model, n_heads=spec.n_heads, max_len=spec.max_len, **spec.pos_options
        )
        self.emb_dropout = nn.Dropout(spec.dropout)
        alpha_beta = deepnorm_constants(0, spec.n_layers)["decoder"]
        self.blocks = build_stack(spec, spec.n_layers, causal=True, cross=False, deepnorm=alpha_beta)
        self.final_norm = final_norm(spec)
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        initialise(self, spec.init, spec.init_std)
        if spec.tie_embeddings:  # Press & Wolf 2017: one matrix for input and output embeddings
            self.head.weight = self.tok_emb.weight

    def forward(self, idx: Tensor, caches: list[LayerCache] | None = None) -> Tensor:
        """idx (B, T) token ids -> logits (B, T, vocab). With ``caches`` (one per layer), ``idx``
        continues the sequence the caches hold and only the new positions are computed."""
        offset = caches[0].self_attn.length if caches else 0
        x = self.emb_dropout(self.pos.embed(self.tok_emb(idx), offset))
        for i, block in enumerate(self.blocks):
            x = block(x, self.pos, cache=caches[i] if caches else None)
        return self.head(self.final_norm(x))

    def new_caches(self) -> list[LayerCache]:
        return [LayerCache() for _ in self.blocks]

    def num_params(self) -> int:
        params = {id(p): p for p in self.parameters()}  # tied weights count once
        return sum(p.numel() for p in params.values())
