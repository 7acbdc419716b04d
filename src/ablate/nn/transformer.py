"""The decoder-only language model (GPT-style): one causal :class:`~ablate.nn.stack.Stack` between
a token embedding and an output head."""

from __future__ import annotations

from torch import Tensor, nn

from ablate.nn.block import LayerCache
from ablate.nn.embedding import TokenEmbedding
from ablate.nn.norms import calibrate_to_inputs, example_tokens
from ablate.nn.spec import ModelSpec
from ablate.nn.stack import Stack, StackConfig


class TransformerLM(Stack):
    """Decoder-only language model: logits for the next token at every position.

    The stack holds the token embedding, so the parameters keep GPT-2's layout: ``tok_emb``,
    ``pos``, ``blocks.<i>``, ``final_norm``, ``head`` (tied to ``tok_emb`` by default)."""

    tok_emb: TokenEmbedding

    def __init__(self, spec: ModelSpec) -> None:
        embedding = TokenEmbedding(spec.vocab_size, spec.d_model, spec.scale_embeddings)
        super().__init__(spec, StackConfig.decoder_only(spec.n_layers), embedding)
        self.spec = spec
        self.head = nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        spec.option("init").build().apply(self)
        if spec.tie_embeddings:  # Press & Wolf 2017: one matrix for input and output embeddings
            self.head.weight = self.tok_emb.weight
        calibrate_to_inputs(self, lambda: self(example_tokens(spec.vocab_size, min(spec.max_len, 64))))

    def forward(self, idx: Tensor, caches: list[LayerCache] | None = None) -> Tensor:  # type: ignore[override]
        """idx (B, T) token ids -> logits (B, T, vocab). With ``caches`` (one per layer), ``idx``
        continues the sequence the caches hold and only the new positions are computed."""
        return self.head(super().forward(self.tok_emb(idx), caches=caches))

    def num_params(self) -> int:
        params = {id(p): p for p in self.parameters()}  # tied weights count once
        return sum(p.numel() for p in params.values())
