"""Tiny specs and models for the model-component tests (CPU, seconds), and the options of every
axis read from the registries."""

from __future__ import annotations

import torch

from ablate.config.model import ModelSpec, validate
from ablate.nn.attention import ATTENTION_KERNELS
from ablate.nn.block import PLACEMENTS as PLACEMENT_REGISTRY
from ablate.nn.ffn import activation_names
from ablate.nn.init import INITS as INIT_REGISTRY
from ablate.nn.norms import NORM_LAYERS as NORM_LAYER_REGISTRY
from ablate.nn.positional import POSITIONAL
from ablate.nn.transformer import TransformerLM

# Every registered option, read from the registries: an option added there is covered by every
# test that iterates these, with no edit here.
POS = tuple(POSITIONAL)
ATTN = tuple(ATTENTION_KERNELS)
PLACEMENTS = tuple(PLACEMENT_REGISTRY)
NORM_LAYERS = tuple(NORM_LAYER_REGISTRY)
ACTS = tuple(activation_names())
INITS = tuple(INIT_REGISTRY)

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
