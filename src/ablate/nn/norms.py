"""Normalisation layers (the ``norm.layer`` option). Where they sit is the block's business
(``block.py``); this module only says how a vector is normalised.

Adding a layer: one class or factory, one ``NORM_LAYERS`` entry, a value documented in
``conf/norm/*.yaml`` and a test in ``tests/nn/test_norms.py``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn


class ScaleNorm(nn.Module):
    """ScaleNorm (Nguyen & Salazar 2019, "Transformers without Tears", eq. 9):
    g * x / ||x||, with one learned scalar g initialised to sqrt(d).

    Written here because neither PyTorch nor a maintained library ships it.
    """

    def __init__(self, d_model: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(float(d_model) ** 0.5))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x / x.norm(dim=-1, keepdim=True).clamp_min(self.eps)


def layer_norm(d_model: int, eps: float, bias: bool) -> nn.Module:
    """LayerNorm (Ba et al. 2016): centre and scale each vector, then a gain and an optional bias."""
    return nn.LayerNorm(d_model, eps=eps, bias=bias)


def rms_norm(d_model: int, eps: float, bias: bool) -> nn.Module:
    """RMSNorm (Zhang & Sennrich 2019, eq. 4): x / RMS(x) * g; no centring and, by definition, no bias."""
    return nn.RMSNorm(d_model, eps=eps)


def scale_norm(d_model: int, eps: float, bias: bool) -> nn.Module:
    return ScaleNorm(d_model, eps=eps)


NORM_LAYERS: dict[str, Callable[[int, float, bool], nn.Module]] = {
    "layernorm": layer_norm,
    "rmsnorm": rms_norm,
    "scalenorm": scale_norm,
}


def build_norm(layer: str, d_model: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """Build the norm layer registered as ``layer``. ``bias`` applies to LayerNorm only."""
    if layer not in NORM_LAYERS:
        raise ValueError(f"unknown norm.layer={layer!r}; valid options: {', '.join(NORM_LAYERS)}")
    return NORM_LAYERS[layer](d_model, eps, bias)
