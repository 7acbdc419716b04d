"""Shared helpers for the model-component tests: tiny specs and models (CPU, seconds).

Imported relatively (``from ._models import tiny_lm``) so it works whether or not ``tests/`` is a package.
"""

from __future__ import annotations

import torch

from ablate.config import ModelSpec, validate
from ablate.nn.transformer import TransformerLM

POS = ("none", "sinusoidal", "learned", "rope", "alibi")
ATTN = ("math", "sdpa")
PLACEMENTS = ("pre", "post", "sandwich", "deepnorm")

TINY = dict(vocab_size=50, n_layers=2, d_model=32, n_heads=4, d_ff=64, max_len=32)


def tiny_spec(**overrides) -> ModelSpec:
    """A validated tiny spec; ``norm=deepnorm`` brings ``init=deepnet`` along unless told otherwise."""
    kw = {**TINY, **overrides}
    if kw.get("norm") == "deepnorm":
        kw.setdefault("init", "deepnet")
    return validate(ModelSpec(**kw))


def tiny_lm(seed: int = 0, **overrides) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(tiny_spec(**overrides)).eval()
