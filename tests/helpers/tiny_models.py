"""Tiny specs and models for the model-component tests (CPU, seconds), and the options of every
axis read from the registries."""

from __future__ import annotations

import torch

from ablate.nn.axes import AXES
from ablate.nn.spec import ModelSpec
from ablate.nn.transformer import TransformerLM

# Every registered option of every axis, read from the table of axes: an option (or an axis) added
# there is covered by every test that iterates these, with no edit here.
OPTIONS = {axis.name: tuple(axis.options()) for axis in AXES}
POS, PLACEMENTS, NORM_LAYERS, ACTS, INITS, ATTN = (
    OPTIONS[a] for a in ("pos", "norm", "norm_layer", "act", "init", "attn")
)

TINY = dict(vocab_size=50, n_layers=2, d_model=32, n_heads=4, d_ff=64, max_len=32)


def tiny_spec(**overrides) -> ModelSpec:
    """A validated tiny spec, its options in the flat words of older checkpoints (``pos="rope"``,
    ``pos_options={...}``, ``norm_layer=...``: :meth:`ModelSpec.from_flat`); ``norm=deepnorm``
    brings ``init=deepnet`` along unless told otherwise."""
    kw = {**TINY, **overrides}
    if kw.get("norm") == "deepnorm":
        kw.setdefault("init", "deepnet")
    return ModelSpec.from_flat(kw).validate()


def tiny_lm(seed: int = 0, **overrides) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(tiny_spec(**overrides)).eval()
