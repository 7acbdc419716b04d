"""Transformer layers and the four norm placements (the ``norm`` option).

A layer is a list of sub-layers (self-attention, optional cross-attention, FFN), each wrapped in
a *residual* that decides where the normalisation sits:

* ``pre``      x + f(LN(x))                  (Xiong et al. 2020; GPT-2). Needs a final norm.
* ``post``     LN(x + f(x))                  (Vaswani et al. 2017). No final norm.
* ``sandwich`` x + LN'(f(LN(x)))             (Ding et al. 2021 "CogView"; a.k.a. Peri-LN,
                                              Kim et al. 2025). Needs a final norm.
* ``deepnorm`` LN(alpha * x + f(x))          (Wang et al. 2022 "DeepNet", eq. 3) with the
                                              sub-layer weights initialised with gain beta.

The encoder, the decoder and the decoder-only LM are all stacks of :class:`Block`
(:class:`ablate.nn.stack.Stack`); they differ only in causality and in whether a cross-attention
sub-layer exists. A placement's constants come from the placement: :meth:`Residual.for_stack`
(DeepNorm's alpha and beta depend on the model's depth), :attr:`Residual.branch_gain` (the gain
an init gives the sub-layer's matrices) and its config's check (DeepNorm needs DeepNet's init:
:mod:`ablate.nn.options`).

Adding a placement: one residual class, its declaration in :mod:`ablate.nn.options`, one test in
``tests/nn/test_block.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from torch import Tensor, nn

from ablate.nn.attention import CrossAttention, KVCache, SelfAttention
from ablate.nn.positional import PositionalEncoding

if TYPE_CHECKING:
    from ablate.nn.spec import StackConfig

NormFactory = Callable[[], nn.Module]
Wrap = Callable[[nn.Module], "Residual"]


class Residual(nn.Module):
    """A sub-layer and its residual connection. Subclasses place the normalisation."""

    needs_final_norm: ClassVar[bool] = False
    # the gain an init scheme gives the sub-layer's value, output and FFN matrices (DeepNet's
    # beta); None: the scheme's own
    branch_gain: float | None = None

    def __init__(self, sublayer: nn.Module, make_norm: NormFactory) -> None:
        super().__init__()
        self.sublayer = sublayer
        self.norm = make_norm()

    @classmethod
    def for_stack(cls, make_norm: NormFactory, stack: StackConfig) -> Wrap:
        """How the sub-layers of one stack are wrapped; its keyword arguments besides these two
        would be the placement's options (``norm.<key>``, declared in :mod:`ablate.nn.options`)."""
        return partial(cls, make_norm=make_norm)


class PreNormResidual(Residual):
    """x + f(LN(x)): the residual stream itself is never normalised."""

    needs_final_norm = True

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return x + self.sublayer(self.norm(x), *args, **kwargs)


class PostNormResidual(Residual):
    """LN(x + f(x)): the output of every sub-layer is normalised after the residual add."""

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self.norm(x + self.sublayer(x, *args, **kwargs))


class SandwichResidual(Residual):
    """x + LN_out(f(LN_in(x))): pre-LN plus a norm on each sub-layer's output."""

    needs_final_norm = True

    def __init__(self, sublayer: nn.Module, make_norm: NormFactory) -> None:
        super().__init__(sublayer, make_norm)
        self.post_norm = make_norm()

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return x + self.post_norm(self.sublayer(self.norm(x), *args, **kwargs))


class DeepNormResidual(Residual):
    """LN(alpha * x + f(x)) (Wang et al. 2022, eq. 3). ``beta`` is read by ``init=deepnet``
    (:attr:`branch_gain`); both come from the model's depth (:meth:`for_stack`)."""

    def __init__(self, sublayer: nn.Module, make_norm: NormFactory, *, alpha: float, beta: float) -> None:
        super().__init__(sublayer, make_norm)
        self.alpha, self.beta = alpha, beta
        self.branch_gain = beta

    @classmethod
    def for_stack(cls, make_norm: NormFactory, stack: StackConfig) -> Wrap:
        alpha, beta = deepnorm_constants(stack.encoder_layers, stack.decoder_layers)[stack.role]
        return partial(cls, make_norm=make_norm, alpha=alpha, beta=beta)

    def forward(self, x: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        return self.norm(self.alpha * x + self.sublayer(x, *args, **kwargs))


def deepnorm_constants(n_encoder: int, n_decoder: int) -> dict[str, tuple[float, float]]:
    """(alpha, beta) per stack, DeepNet Table 1 (Wang et al. 2022).

    Decoder-only (n_encoder = 0): alpha = (2M)^(1/4), beta = (8M)^(-1/4).
    Encoder-only (n_decoder = 0): alpha = (2N)^(1/4), beta = (8N)^(-1/4).
    Encoder-decoder: encoder alpha = 0.81 (N^4 M)^(1/16), beta = 0.87 (N^4 M)^(-1/16);
                     decoder alpha = (3M)^(1/4),         beta = (12M)^(-1/4).
    """
    n, m = n_encoder, n_decoder
    if n == 0:
        return {"decoder": ((2 * m) ** 0.25, (8 * m) ** -0.25)}
    if m == 0:
        return {"encoder": ((2 * n) ** 0.25, (8 * n) ** -0.25)}
    return {
        "encoder": (0.81 * (n**4 * m) ** (1 / 16), 0.87 * (n**4 * m) ** (-1 / 16)),
        "decoder": ((3 * m) ** 0.25, (12 * m) ** -0.25),
    }


@dataclass
class LayerCache:
    """Per-layer decoding state: the self-attention keys/values and the (fixed) cross-attention ones."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)


class Block(nn.Module):
    """One Transformer layer: self-attention, optional cross-attention, FFN, each wrapped by ``wrap``."""

    def __init__(
        self,
        self_attn: SelfAttention,
        ffn: nn.Module,
        wrap: Callable[[nn.Module], Residual],
        cross_attn: CrossAttention | None = None,
    ) -> None:
        super().__init__()
        self.attn = wrap(self_attn)
        self.cross_attn = wrap(cross_attn) if cross_attn is not None else None
        self.ffn = wrap(ffn)

    def forward(
        self,
        x: Tensor,
        pos: PositionalEncoding,
        *,
        key_padding: Tensor | None = None,
        memory: Tensor | None = None,
        memory_padding: Tensor | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        x = self.attn(x, pos, key_padding=key_padding, cache=cache.self_attn if cache else None)
        if self.cross_attn is not None:
            x = self.cross_attn(x, memory, memory_padding=memory_padding, cache=cache.cross_attn if cache else None)
        return self.ffn(x)
