"""Normalisation layers (the ``norm.layer`` option). Where they sit is the block's business
(``block.py``); this module only says how a vector is normalised.

Each layer is a class or factory ``(d_model, **options)``, declared with its options in
:mod:`ablate.nn.options` (its typed config): ``norm.eps``, ``norm.bias``,
``norm.alpha_init``, ... where the layer takes them. The ``norm`` group carries every layer's keys,
null unless set; one the chosen layer does not take must stay null (:func:`ablate.nn.axes.typed_options`),
so nothing is set without being used.

Adding a layer: one class or factory here, its declaration in :mod:`ablate.nn.options` and a test of its maths in
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

    def __init__(self, d_model: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.scale = nn.Parameter(torch.tensor(float(d_model) ** 0.5))

    def forward(self, x: Tensor) -> Tensor:
        return self.scale * x / x.norm(dim=-1, keepdim=True).clamp_min(self.eps)


class DyT(nn.Module):
    """Dynamic Tanh (Zhu et al. 2025, "Transformers without Normalization", eq. 1):
    DyT(x) = gamma * tanh(alpha * x) + beta, with one learned scalar alpha and per-channel
    gamma = 1, beta = 0. An element-wise squashing in place of a norm: no statistics over the
    features.

    ``alpha_init`` is the paper's alpha_0 (0.5 by default) for an input of unit RMS, the scale the
    paper's models feed it. Here a site's input can be ~0.03 (GPT-2's N(0, 0.02) embeddings),
    where alpha_0 would shrink every branch and the logits ~60-fold and the model could not leave
    its plateau; so each site's alpha starts at alpha_init / RMS(its input at initialisation)
    (:func:`calibrate_to_inputs`, at build), and alpha * x starts at RMS alpha_0 at every site, as
    in the paper. Written here because neither PyTorch nor a maintained library ships it.
    """

    def __init__(self, d_model: int, alpha_init: float) -> None:
        super().__init__()
        self.alpha_init = float(alpha_init)
        self.alpha = nn.Parameter(torch.tensor(self.alpha_init))
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def calibrate(self, x: Tensor) -> None:
        """alpha = alpha_init / RMS(x), for a typical input ``x`` of this site at initialisation."""
        with torch.no_grad():
            self.alpha.fill_(self.alpha_init / float(x.float().pow(2).mean().sqrt().clamp_min(1e-12)))

    def forward(self, x: Tensor) -> Tensor:
        return self.weight * torch.tanh(self.alpha * x) + self.bias


def calibrate_to_inputs(model: nn.Module, forward: Callable[[], object]) -> None:
    """Give every :class:`DyT` of ``model`` its own input's scale: one forward pass (``forward``,
    of fixed random tokens, in eval mode and without gradients) in which each site is calibrated
    before it runs, so a later site sees the calibrated earlier ones. A model without DyT runs no
    pass. The tokens come from their own generator: the global RNG, and so every other option's
    init, is untouched."""
    sites = [m for m in model.modules() if isinstance(m, DyT)]
    if not sites or sites[0].alpha.is_meta:  # a model built for its shapes only (ablate.tasks.checkpoints)
        return
    hooks = [site.register_forward_pre_hook(lambda site, args: site.calibrate(args[0])) for site in sites]
    training = model.training
    try:
        model.eval()
        with torch.no_grad():
            forward()
    finally:
        model.train(training)
        for hook in hooks:
            hook.remove()


def example_tokens(vocab_size: int, length: int, rows: int = 4) -> Tensor:
    """Fixed random token ids (rows, length), the same on every rank and run: the calibration's input."""
    return torch.randint(vocab_size, (rows, length), generator=torch.Generator().manual_seed(0))


def layer_norm(d_model: int, eps: float, bias: bool) -> nn.Module:
    """LayerNorm (Ba et al. 2016): centre and scale each vector, then a gain and an optional bias."""
    return nn.LayerNorm(d_model, eps=eps, bias=bias)


def rms_norm(d_model: int, eps: float) -> nn.Module:
    """RMSNorm (Zhang & Sennrich 2019, eq. 4): x / RMS(x) * g; no centring and, by definition, no bias."""
    return nn.RMSNorm(d_model, eps=eps)
