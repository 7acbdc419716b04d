"""Sampling from a trained language model, with a KV cache (one position of compute per token).
Past the context length (``spec.max_len``) of learned positions, decoding continues nanoGPT-style
on the last ``max_len`` tokens, recomputed each step.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ablate.nn.transformer import TransformerLM


def sample_next(logits: Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None) -> Tensor:
    """Pick the next token from last-position logits (B, V): greedy at temperature 0."""
    if temperature <= 0:
        return logits.argmax(dim=-1, keepdim=True)
    logits = logits / temperature
    if top_k is not None and top_k < logits.size(-1):
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator)


@torch.no_grad()
def generate(
    model: TransformerLM,
    prompt: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Extend ``prompt`` (B, T) by ``max_new_tokens`` tokens; returns (B, T + max_new_tokens)."""
    was_training = model.training
    model.eval()
    window = model.spec.max_len
    idx = prompt
    caches = model.new_caches() if use_cache and prompt.size(1) < window else None
    logits = model(idx[:, -window:], caches)[:, -1]
    for _ in range(max_new_tokens):
        token = sample_next(logits, temperature, top_k, generator)
        idx = torch.cat((idx, token), dim=1)
        if caches is not None and idx.size(1) <= window:
            logits = model(token, caches)[:, -1]
        else:
            logits = model(idx[:, -window:])[:, -1]
    model.train(was_training)
    return idx
