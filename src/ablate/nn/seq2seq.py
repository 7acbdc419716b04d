"""The encoder-decoder Transformer (Vaswani et al. 2017, Fig. 1) built from the LM's blocks.

* Encoder: a bidirectional :class:`~ablate.nn.stack.Stack`; self-attention sees every
  real source token, padding is masked out of every key set.
* Decoder: a causal :class:`~ablate.nn.stack.Stack` that cross-attends: masked self-attention,
  encoder-decoder attention over the encoder output (no positional transform or bias there:
  positions are already in the encoder output and in the decoder queries), FFN.

Every architecture option of the spec (``pos``, ``norm``, ``act``, ``init``, ``attn``) applies to
both stacks. Each stack has its own positional encoding (a learned table per stack, as in
fairseq) and, for the placements that need it (pre, sandwich), its own final norm.

Vocabulary: one shared (joint BPE) vocabulary for source and target. ``tie_embeddings``:

* ``true`` / ``"all"``: three-way tying, one matrix for encoder input, decoder input and
  output projection (Vaswani et al. 2017, Sec. 3.4; Press & Wolf 2017);
* ``"decoder"``: decoder input and output tied, a separate source embedding;
* ``false`` / ``"none"``: three separate matrices.

``scale_embeddings`` multiplies the embeddings by sqrt(d) (Sec. 3.4). DeepNorm uses the
encoder-decoder constants of Wang et al. 2022 (:func:`~ablate.nn.block.deepnorm_constants` with N,
M layers, chosen by :meth:`~ablate.nn.block.DeepNormResidual.for_stack`).

Masks: ``src_mask`` (B, S) is True at real source tokens. Targets are right-padded, so the
causal mask already keeps every real target position away from padding; the loss ignores the
padded positions. Outputs at real positions never depend on what the padded positions hold
(``tests/nn/test_seq2seq.py``).
"""

from __future__ import annotations

from torch import Tensor, nn

from ablate.nn.attention import KVCache
from ablate.nn.block import LayerCache
from ablate.nn.embedding import TokenEmbedding
from ablate.nn.norms import calibrate_to_inputs, example_tokens
from ablate.nn.spec import ModelSpec
from ablate.nn.stack import Stack, StackConfig

TIE_MODES = {
    True: "all",
    False: "none",
    "all": "all",
    "none": "none",
    "decoder": "decoder",
    "true": "all",
    "false": "none",
}


def tie_mode(value: object) -> str:
    """``model.tie_embeddings`` as one of ``all`` (three-way), ``decoder`` or ``none``."""
    key = value.lower() if isinstance(value, str) else value
    if key not in TIE_MODES:
        raise ValueError(
            f"model.tie_embeddings={value!r} for an encoder-decoder; valid: true (three-way), "
            f"'decoder' (decoder input + output), false"
        )
    return TIE_MODES[key]


class EncoderDecoder(nn.Module):
    """Sequence-to-sequence Transformer: ``forward(src, tgt_in) -> logits`` for the next target
    token at every target position."""

    def __init__(self, spec: ModelSpec, pad_id: int = 0) -> None:
        super().__init__()
        if spec.encoder_layers <= 0:
            raise ValueError("an encoder-decoder needs model.encoder_layers > 0")
        self.spec, self.pad_id = spec, pad_id
        self.tie = tie_mode(spec.tie_embeddings)
        # the source (or shared) embedding first: its parameter is named tok_emb (grad_norm/embed)
        self.tok_emb = TokenEmbedding(spec.vocab_size, spec.d_model, spec.scale_embeddings)
        self.tgt_emb = (
            None if self.tie == "all" else TokenEmbedding(spec.vocab_size, spec.d_model, spec.scale_embeddings)
        )
        encoder, decoder = StackConfig.encoder_decoder(spec.encoder_layers, spec.n_layers)
        self.encoder = Stack(spec, encoder)
        self.decoder = Stack(spec, decoder)
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        spec.option("init").build().apply(self)
        if self.tie != "none":
            self.head.weight = self.target_embedding.weight
        calibrate_to_inputs(self, lambda: self(*[example_tokens(spec.vocab_size, min(spec.max_len, 64))] * 2))

    @property
    def target_embedding(self) -> TokenEmbedding:
        return self.tok_emb if self.tgt_emb is None else self.tgt_emb

    def source_mask(self, src: Tensor) -> Tensor:
        return src != self.pad_id

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """src (B, S) -> memory (B, S, d). ``src_mask`` (B, S) True at real tokens (default:
        ``src != pad_id``)."""
        if src_mask is None:
            src_mask = self.source_mask(src)
        return self.encoder(self.tok_emb(src), key_padding=src_mask)

    def decode(
        self, tgt: Tensor, memory: Tensor, src_mask: Tensor | None, caches: list[LayerCache] | None = None
    ) -> Tensor:
        """tgt (B, T) decoder input -> logits (B, T, V). With ``caches`` (one per decoder layer),
        ``tgt`` continues the prefix the caches hold and only the new positions are computed."""
        hidden = self.decoder(self.target_embedding(tgt), memory=memory, memory_padding=src_mask, caches=caches)
        return self.head(hidden)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> Tensor:
        if src_mask is None:
            src_mask = self.source_mask(src)
        return self.decode(tgt, self.encode(src, src_mask), src_mask)

    def new_caches(self) -> list[LayerCache]:
        return self.decoder.new_caches()

    def num_params(self) -> int:
        params = {id(p): p for p in self.parameters()}  # tied weights count once
        return sum(p.numel() for p in params.values())


def reorder_caches(caches: list[LayerCache], index: Tensor) -> None:
    """Keep the decoder states of rows ``index`` (beam search: the surviving hypotheses' parents).
    The self-attention caches are gathered; the cross-attention caches are gathered too so that
    rows keep pointing at their own sentence's encoder output."""
    for cache in caches:
        for kv in (cache.self_attn, cache.cross_attn):
            if kv.k is not None:
                assert kv.v is not None  # KVCache.append sets both
                kv.k, kv.v = kv.k.index_select(0, index), kv.v.index_select(0, index)


__all__ = ["EncoderDecoder", "KVCache", "LayerCache", "Stack", "reorder_caches", "tie_mode"]
