"""Normalisation layers (the ``norm.layer`` option). Where they sit is the block's business
(``block.py``); this module only says how a vector is normalised.

Each layer is a factory ``(d_model, **options)`` in ``NORM_LAYERS``; its keyword arguments *are*
its options (its typed config, :mod:`ablate.nn.options`): ``norm.eps``, ``norm.bias``,
``norm.alpha_init``, ... where the layer takes them. The ``norm`` group carries every layer's keys,
null unless set; one the chosen layer does not take must stay null (:func:`ablate.nn.axes.typed_options`),
so nothing is set without being used.

Adding a layer: one class or factory with its registry entry here and a test of its maths in
``tests/nn/test_norms.py``; the generic suites (``tests/config/test_options.py``,
``tests/nn/test_registry_suites.py``) cover it.
"""

from __future__ import annotations

from collections.abc import Callable

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


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025, "Transformers without Normalization", eq. 1):
    DyT(x) = gamma * tanh(alpha * x) + beta, with one learned scalar alpha (initialised to
    ``alpha_init``, 0.5 in the paper's default) and per-channel gamma = 1, beta = 0. An
    element-wise squashing in place of a norm: no statistics over the features.

    Written here because neither PyTorch nor a maintained library ships it.
    """

    def __init__(self, d_model: int, alpha_init: float = 0.5) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.tensor(float(alpha_init)))
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias


def layer_norm(d_model: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """LayerNorm (Ba et al. 2016): centre and scale each vector, then a gain and an optional bias."""
    return nn.LayerNorm(d_model, eps=eps, bias=bias)


def rms_norm(d_model: int, eps: float = 1e-5) -> nn.Module:
    """RMSNorm (Zhang & Sennrich 2019, eq. 4): x / RMS(x) * g; no centring and, by definition, no bias."""
    return nn.RMSNorm(d_model, eps=eps)


def scale_norm(d_model: int, eps: float = 1e-5) -> nn.Module:
    return ScaleNorm(d_model, eps=eps)


NORM_LAYERS: dict[str, Callable[..., nn.Module]] = {
    "layernorm": layer_norm,
    "rmsnorm": rms_norm,
    "scalenorm": scale_norm,
    "dyt": DyT,
}
