"""Sampling with a KV cache gives the same tokens as recomputing the whole prefix."""

from __future__ import annotations

import pytest
import torch

from ablate.nn.spec import ModelSpec
from ablate.nn.transformer import TransformerLM
from ablate.tasks.generation import generate, sample_next


@pytest.mark.parametrize("pos", ["learned", "rope", "alibi", "sinusoidal", "none"])
@pytest.mark.parametrize("attn", ["sdpa", "math"])
def test_cached_equals_recomputed(pos, attn):
    torch.manual_seed(0)
    spec = ModelSpec.from_flat(
        dict(vocab_size=20, n_layers=2, d_model=32, n_heads=4, d_ff=64, max_len=12, pos=pos, attn=attn, n_kv_heads=2)
    ).validate()
    model = TransformerLM(spec)
    prompt = torch.randint(0, 20, (3, 4))
    # greedy, then sampling with the same random stream; 16 new tokens cross the 12-token context
    for temperature, top_k in ((0.0, None), (1.0, 5)):
        cached = generate(
            model,
            prompt,
            16,
            temperature=temperature,
            top_k=top_k,
            use_cache=True,
            generator=torch.Generator().manual_seed(1),
        )
        full = generate(
            model,
            prompt,
            16,
            temperature=temperature,
            top_k=top_k,
            use_cache=False,
            generator=torch.Generator().manual_seed(1),
        )
        assert cached.shape == (3, 20)
        assert torch.equal(cached, full)
        assert torch.equal(cached[:, :4], prompt)


def test_top_k_only_samples_from_top_k():
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0, 3.0]])
    draws = {sample_next(logits, 1.0, 2, torch.Generator().manual_seed(s)).item() for s in range(50)}
    assert draws == {1, 2}
    assert sample_next(logits, 0.0, None, None).item() == 1
