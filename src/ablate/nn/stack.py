"""One stack of Transformer blocks, the part every model is built from.

A :class:`Stack` turns token embeddings into hidden states: the positional encoding's additive
part, embedding dropout, ``n_layers`` blocks (:class:`~ablate.nn.block.Block`) and, for the
placements that leave the residual stream unnormalised (pre, sandwich), a final norm. What a
stack is within its model, a :class:`StackConfig` says:

* a decoder-only LM (:class:`ablate.nn.transformer.TransformerLM`): one causal stack;
* an encoder-decoder (:class:`ablate.nn.seq2seq.EncoderDecoder`): a bidirectional encoder stack,
  and a causal decoder stack that also attends to the encoder output (cross-attention);
* an encoder-only classifier (:class:`ablate.tasks.classify.EncoderClassifier`): one
  bidirectional stack.

Every architecture option of the spec applies to every stack; each option builds its part from
its typed config (``spec.option(axis)``: :mod:`ablate.nn.options`), so nothing here
branches on an option's name. The placement says how a sub-layer is wrapped in this stack
(DeepNorm's constants depend on the model's depth: :meth:`ablate.nn.block.Residual.for_stack`).
"""

from __future__ import annotations

from functools import partial

from torch import Tensor, nn

from ablate.nn.attention import CrossAttention, SelfAttention
from ablate.nn.block import Block, LayerCache
from ablate.nn.spec import ModelSpec, StackConfig


class Stack(nn.Module):
    """Positional encoding, embedding dropout, blocks and final norm (see the module docstring).

    ``embedding``: the token embedding of a model that is one stack (the LM, the classifier),
    registered first as ``tok_emb``, so that it is built and initialised first and the LM's
    parameters keep their GPT-2 names and order (``tok_emb``, ``pos``, ``blocks``, ``final_norm``).
    An encoder-decoder holds its (possibly shared) embeddings itself and passes none."""

    def __init__(self, spec: ModelSpec, config: StackConfig, embedding: nn.Module | None = None) -> None:
        super().__init__()
        if embedding is not None:
            self.tok_emb = embedding
        self.config = config
        dims = {"d_model": spec.d_model, "n_heads": spec.n_heads, "head_dim": spec.head_dim, "max_len": spec.max_len}
        self.pos = spec.option("pos").build(**dims, **spec.position_scales)  # the scale contract
        self.emb_dropout = nn.Dropout(spec.dropout)
        placement, attn, ffn = spec.option("norm"), spec.option("attn"), spec.option("act")
        make_norm = partial(spec.option("norm_layer").build, spec.d_model)  # a new norm layer per call
        wrap = placement.build(make_norm, config)

        def block() -> Block:
            return Block(
                SelfAttention(
                    spec.d_model,
                    spec.n_heads,
                    spec.n_kv_heads,
                    causal=config.causal,
                    impl=attn,
                    bias=spec.bias,
                    dropout=spec.dropout,
                ),
                ffn.build(spec.d_model, spec.d_ff, ffn.name, bias=spec.bias, dropout=spec.dropout),
                wrap,
                CrossAttention(
                    spec.d_model, spec.n_heads, spec.n_kv_heads, impl=attn, bias=spec.bias, dropout=spec.dropout
                )
                if config.cross
                else None,
            )

        self.blocks = nn.ModuleList(block() for _ in range(config.n_layers))
        self.final_norm = make_norm() if placement.option.needs_final_norm else nn.Identity()

    def forward(
        self,
        x: Tensor,
        *,
        key_padding: Tensor | None = None,
        memory: Tensor | None = None,
        memory_padding: Tensor | None = None,
        caches: list[LayerCache] | None = None,
    ) -> Tensor:
        """Token embeddings ``x`` (B, T, d) -> hidden states (B, T, d).

        ``key_padding`` (B, T): True at real tokens, for a bidirectional stack over padded rows.
        ``memory`` (B, S, d) and ``memory_padding`` (B, S): the encoder output a cross-attending
        stack reads. ``caches`` (one per layer, :meth:`new_caches`): ``x`` continues the sequence
        the caches hold, and only its positions are computed (incremental decoding)."""
        offset = caches[0].self_attn.length if caches else 0
        x = self.emb_dropout(self.pos.embed(x, offset))
        for i, block in enumerate(self.blocks):
            x = block(
                x,
                self.pos,
                key_padding=key_padding,
                memory=memory,
                memory_padding=memory_padding,
                cache=caches[i] if caches else None,
            )
        return self.final_norm(x)

    def new_caches(self) -> list[LayerCache]:
        return [LayerCache() for _ in self.blocks]
