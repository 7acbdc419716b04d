"""Multi-head attention (Vaswani et al. 2017, Sec. 3.2) with grouped-query attention and a KV cache.

The kernels compute the same function, chosen by the ``attn`` option (``attn.impl``, declared in
:mod:`ablate.nn.options`):

* ``math``: softmax(Q K^T / sqrt(d_k) + bias) V written out (eq. 1), able to return the weights;
* ``sdpa``: ``torch.nn.functional.scaled_dot_product_attention``, which dispatches to the flash
  or memory-efficient kernels where the inputs allow it (no additive bias, causal or no mask).

Everything around the kernel (projections, positional hooks, masks, caching) is shared, so a
comparison of the two measures the kernel alone. Adding a kernel: a subclass of
:class:`AttentionKernel` implementing :meth:`~AttentionKernel.attend` (queries, keys, values and
one :class:`Masking`), its registry entry and a test of its maths against ``math``; the generic suites
(``tests/nn/test_registry_suites.py``) cover it.

``n_kv_heads`` < ``n_heads`` gives grouped-query attention (Ainslie et al. 2023); 1 gives
multi-query attention (Shazeer 2019). Each key/value head serves ``n_heads / n_kv_heads``
consecutive query heads.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from ablate.nn.options import OPTIONS, OptionConfig
from ablate.nn.positional import PositionalEncoding
from ablate.nn.roles import Matrix, Role, fused, whole


@dataclass
class KVCache:
    """Keys and values of the positions seen so far, for incremental decoding."""

    k: Tensor | None = None
    v: Tensor | None = None

    @property
    def length(self) -> int:
        return 0 if self.k is None else self.k.size(-2)

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        self.k = k if self.k is None else torch.cat((self.k, k), dim=-2)
        self.v = v if self.v is None else torch.cat((self.v, v), dim=-2)
        return self.k, self.v


def causal_allowed(q_len: int, k_len: int, device: torch.device) -> Tensor:
    """(Tq, Tk) bool, True where query i (at absolute position k_len - q_len + i) may see key j."""
    q_pos = torch.arange(k_len - q_len, k_len, device=device)
    return q_pos[:, None] >= torch.arange(k_len, device=device)[None, :]


def combine_mask(
    causal: bool, key_padding: Tensor | None, q_len: int, k_len: int, device: torch.device
) -> Tensor | None:
    """One boolean mask broadcastable to (B, H, Tq, Tk), True = may attend; None if all allowed.

    ``key_padding`` is (B, Tk) with True at real tokens and False at padding.
    """
    mask = causal_allowed(q_len, k_len, device)[None, None] if causal else None
    if key_padding is not None:
        pad = key_padding[:, None, None, :]
        mask = pad if mask is None else mask & pad
    return mask


@dataclass(frozen=True)
class Masking:
    """Which keys each query may see, and the scores' additive bias: what every kernel's
    :meth:`~AttentionKernel.attend` receives besides queries, keys and values.

    ``causal``: a query sees no later position; ``key_padding`` (B, Tk): True at real keys;
    ``bias``: added to the scores (ALiBi), broadcastable to (B, H, Tq, Tk)."""

    causal: bool
    key_padding: Tensor | None = None
    bias: Tensor | None = None

    def mask(self, q_len: int, k_len: int, device: torch.device) -> Tensor | None:
        """The boolean mask of :func:`combine_mask` (None: every key visible)."""
        return combine_mask(self.causal, self.key_padding, q_len, k_len, device)


def math_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None, dropout_p: float
) -> tuple[Tensor, Tensor]:
    """Eq. 1 of Vaswani et al. written out; returns the output and the attention weights."""
    groups = q.size(1) // k.size(1)
    if groups > 1:  # grouped-query attention: each kv head serves `groups` query heads
        k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    return F.dropout(weights, p=dropout_p) @ v, weights


def sdpa_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, bias: Tensor | None, dropout_p: float, causal: bool
) -> Tensor:
    """The same function through PyTorch's fused kernel.

    A pure causal mask over a square score matrix is passed as ``is_causal`` so the flash kernel
    can run; any bias (ALiBi) or padding becomes an explicit mask, which rules flash out.
    """
    enable_gqa = q.size(1) != k.size(1)
    square = q.size(-2) == k.size(-2)
    if bias is None and mask is None and causal and square:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True, enable_gqa=enable_gqa)
    attn_mask = mask
    if bias is not None:
        attn_mask = bias.to(q.dtype) if mask is None else bias.to(q.dtype).masked_fill(~mask, float("-inf"))
    with sdpa_kernel(SHAPE_FREE_BACKENDS):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, enable_gqa=enable_gqa)


# The SDPA kernels that need no per-shape preparation. cuDNN's attention (which PyTorch may pick on
# Hopper GPUs for a masked call) builds an execution graph for every new shape, a few hundred ms
# each, cached by shape: padded batches of varying shape (translation's length-bucketed token
# batches: nearly every batch of the first epoch a new shape) pay it at almost every step until
# every shape has been seen. A padding or bias mask is such a call; the causal LM's is not.
SHAPE_FREE_BACKENDS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


class AttentionKernel(nn.Module):
    """What every kernel shares: dropout, and the optional capture of the weights (for plots),
    which always goes through eq. 1 written out. A subclass computes the attention itself."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.dropout = dropout
        self.keep_weights = False  # set True to keep the last weights (computed by math_attention)
        self.weights: Tensor | None = None

    def forward(
        self, q: Tensor, k: Tensor, v: Tensor, *, causal: bool, key_padding: Tensor | None, bias: Tensor | None
    ) -> Tensor:
        dropout_p = self.dropout if self.training else 0.0
        masking = Masking(causal, key_padding, bias)
        if self.keep_weights:
            out, weights = math_attention(q, k, v, masking.mask(q.size(-2), k.size(-2), q.device), bias, dropout_p)
            self.weights = weights.detach()
            return out
        return self.attend(q, k, v, masking, dropout_p)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, masking: Masking, dropout_p: float) -> Tensor:
        """Attention of (B, H, Tq, d) queries over (B, H_kv, Tk, d) keys and values, with
        dropout ``dropout_p`` on the weights."""
        raise NotImplementedError


class MathAttention(AttentionKernel):
    """``attn=math``: eq. 1 written out (:func:`math_attention`)."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, masking: Masking, dropout_p: float) -> Tensor:
        mask = masking.mask(q.size(-2), k.size(-2), q.device)
        return math_attention(q, k, v, mask, masking.bias, dropout_p)[0]


class SdpaAttention(AttentionKernel):
    """``attn=sdpa``: PyTorch's fused kernel (:func:`sdpa_attention`); a pure causal mask over a
    square score matrix builds no mask at all, so the flash kernel can run."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, masking: Masking, dropout_p: float) -> Tensor:
        q_len, k_len = q.size(-2), k.size(-2)
        causal, bias = masking.causal, masking.bias
        pure_causal = causal and masking.key_padding is None and bias is None and q_len == k_len
        mask = None if pure_causal else masking.mask(q_len, k_len, q.device)
        return sdpa_attention(q, k, v, mask, bias, dropout_p, causal)


def build_attention_kernel(impl: str | OptionConfig, dropout: float) -> AttentionKernel:
    """The kernel registered as ``impl`` (``attn.impl``), or built by its typed config with its keys."""
    if isinstance(impl, OptionConfig):
        return impl.build(dropout)
    if impl not in OPTIONS["attn"]:
        raise ValueError(f"unknown attn={impl!r}; valid options: {', '.join(OPTIONS['attn'])}")
    return OPTIONS["attn"][impl]().build(dropout)


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, n_heads * hd) -> (B, n_heads, T, hd)."""
    b, t, _ = x.shape
    return x.view(b, t, n_heads, -1).transpose(1, 2)


def merge_heads(x: Tensor) -> Tensor:
    """(B, H, T, hd) -> (B, T, H * hd)."""
    b, h, t, hd = x.shape
    return x.transpose(1, 2).reshape(b, t, h * hd)


class SelfAttention(nn.Module):
    """Self-attention with one fused Q/K/V projection; causal for decoders, not for encoders."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        impl: str | OptionConfig = "sdpa",
        causal: bool = True,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads or n_heads
        self.head_dim, self.causal = d_model // n_heads, causal
        kv_dim = self.n_kv_heads * self.head_dim
        self.qkv = nn.Linear(d_model, d_model + 2 * kv_dim, bias=bias)  # Q, K and V stacked: matrices()
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.kernel = build_attention_kernel(impl, dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, pos: PositionalEncoding, *, key_padding: Tensor | None = None, cache: KVCache | None = None
    ) -> Tensor:
        d, kv_dim = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        q, k, v = self.qkv(x).split((d, kv_dim, kv_dim), dim=-1)
        q, k, v = split_heads(q, self.n_heads), split_heads(k, self.n_kv_heads), split_heads(v, self.n_kv_heads)
        offset = cache.length if cache is not None else 0
        q, k = pos.rotate(q, k, q_offset=offset, k_offset=offset)
        if cache is not None:
            k, v = cache.append(k, v)
        bias = pos.score_bias(q.size(-2), k.size(-2), offset, self.causal, x.device)
        out = self.kernel(q, k, v, causal=self.causal, key_padding=key_padding, bias=bias)
        return self.resid_dropout(self.out_proj(merge_heads(out)))

    def matrices(self) -> list[Matrix]:
        kv_dim = self.n_kv_heads * self.head_dim
        qkv = fused(self.qkv, (Role.QUERY, self.n_heads * self.head_dim), (Role.KEY, kv_dim), (Role.VALUE, kv_dim))
        return [*qkv, whole(Role.ATTN_OUT, self.out_proj)]


class CrossAttention(nn.Module):
    """Decoder-to-encoder attention: queries from the decoder, keys/values from the encoder
    output. No positional transform or bias (positions are already in the encoder output)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_kv_heads: int | None = None,
        *,
        impl: str | OptionConfig = "sdpa",
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads = n_heads, n_kv_heads or n_heads
        self.head_dim = d_model // n_heads
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.kv = nn.Linear(d_model, 2 * self.n_kv_heads * self.head_dim, bias=bias)  # K and V stacked
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        self.kernel = build_attention_kernel(impl, dropout)
        self.resid_dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, memory: Tensor, *, memory_padding: Tensor | None = None, cache: KVCache | None = None
    ) -> Tensor:
        q = split_heads(self.q_proj(x), self.n_heads)
        if cache is not None and cache.k is not None:  # the memory does not change while decoding
            k, v = cache.k, cache.v
        else:
            k, v = (split_heads(t, self.n_kv_heads) for t in self.kv(memory).chunk(2, dim=-1))
            if cache is not None:
                cache.append(k, v)
        out = self.kernel(q, k, v, causal=False, key_padding=memory_padding, bias=None)
        return self.resid_dropout(self.out_proj(merge_heads(out)))

    def matrices(self) -> list[Matrix]:
        kv_dim = self.n_kv_heads * self.head_dim
        kv = fused(self.kv, (Role.KEY, kv_dim), (Role.VALUE, kv_dim))
        return [whole(Role.QUERY, self.q_proj), *kv, whole(Role.ATTN_OUT, self.out_proj)]
