"""Positional encodings, in the two places a Transformer can put position information.

* Additive schemes (``sinusoidal``, ``learned``) add a vector to each token embedding, at the
  scale of the token signal (the scale contract, :attr:`ablate.nn.spec.ModelSpec.token_rms`):
  a position signal that drowns the tokens (or vanishes beside them) would make a ``pos=`` flip
  compare signal-to-noise ratios rather than encodings.
* Attention schemes act inside attention: ``rope`` rotates queries and keys, ``alibi`` adds a
  distance-proportional bias to the attention scores.

Every scheme implements the same three hooks, so attention never branches on a scheme's name:
``embed`` (additive part), ``rotate`` (q/k transform) and ``score_bias`` (additive score bias).
Positions are absolute token indices; ``offset`` is the index of the first token of the input,
which is non-zero when decoding with a KV cache.

Adding a scheme: subclass :class:`PositionalEncoding` (its keyword arguments besides the dimensions
are its options, ``pos.<key>``), declare it with its keys and their defaults in
:mod:`ablate.nn.options` and test its maths in ``tests/nn/test_positional.py``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ablate.nn.options import rotary_dim
from ablate.nn.roles import Matrix, Role, whole


class PositionalEncoding(nn.Module):
    """Base class: a scheme that does nothing (NoPE). Subclasses override one or more hooks.

    Constructors receive every model dimension as a keyword (d_model, n_heads, head_dim,
    max_len: the dimensions of its axis, :data:`ablate.nn.axes.AXES`) plus the scheme's own options, and take
    the ones they need; its options' defaults and its check of the whole spec are its config's
    (:mod:`ablate.nn.options`).
    """

    max_positions: int | None = None  # the positions it can represent; None: any (it extrapolates)

    def __init__(self, **_: object) -> None:
        super().__init__()

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        """Add position information to token embeddings ``x`` of shape (B, T, d)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, q_offset: int = 0, k_offset: int = 0) -> tuple[Tensor, Tensor]:
        """Transform queries (B, H, Tq, hd) and keys (B, Hkv, Tk, hd) by their positions."""
        return q, k

    def score_bias(self, q_len: int, k_len: int, q_offset: int, causal: bool, device: torch.device) -> Tensor | None:
        """An additive bias for the attention scores, shape (H, Tq, Tk), or None."""
        return None


class NoPositionalEncoding(PositionalEncoding):
    """NoPE: no explicit position information (Haviv et al. 2022, "Transformer Language Models
    without Positional Encodings Still Learn Positional Information"). A causal mask alone leaks
    position; a bidirectional encoder without positions is permutation-equivariant."""


def sinusoid_table(positions: Tensor, d_model: int, base: float = 10000.0) -> Tensor:
    """Vaswani et al. 2017, Sec. 3.5: PE(pos, 2i) = sin(pos / base^(2i/d)), PE(pos, 2i+1) = cos(...).

    Computed from the positions on every call rather than from a fixed-size table, so a model
    can be evaluated at lengths it was never trained on (Press et al. 2022 measure exactly that).
    """
    inv_freq = torch.exp(
        -math.log(base) * torch.arange(0, d_model, 2, dtype=torch.float32, device=positions.device) / d_model
    )
    angles = positions.float()[:, None] * inv_freq[None, :]
    table = torch.zeros(positions.numel(), d_model, device=positions.device)
    table[:, 0::2] = torch.sin(angles)
    table[:, 1::2] = torch.cos(angles[:, : d_model // 2])
    return table


class Sinusoidal(PositionalEncoding):
    """Fixed sinusoidal encodings added to the embeddings (Vaswani et al. 2017, Sec. 3.5), with
    amplitude ``token_rms``, the RMS of the token signal at initialisation.

    The paper adds the unit-amplitude table to tokens of RMS 1 (N(0, d^-1/2) scaled by sqrt(d),
    as fairseq does: ``init=xavier model.scale_embeddings=true``), where this is exactly its
    table. Under any other pairing the table keeps that ratio (position RMS 1/sqrt(2) of the
    token RMS) instead of drowning GPT-2's N(0, 0.02) tokens 36-fold.
    """

    def __init__(self, d_model: int, token_rms: float = 1.0, *, base: float, **_: object) -> None:
        super().__init__()
        self.d_model, self.base, self.amplitude = d_model, base, token_rms

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        positions = torch.arange(offset, offset + x.size(1), device=x.device)
        return x + (self.amplitude * sinusoid_table(positions, self.d_model, self.base)).to(x.dtype)


class Learned(PositionalEncoding):
    """A learned absolute position embedding table added to the embeddings (GPT-2; Radford et al.
    2019). It cannot represent positions beyond ``max_len``. The init draws it like the token
    table, and it is multiplied by the tokens' ``embed_scale`` (sqrt(d) with
    ``model.scale_embeddings``), so it starts at the token signal's scale under every pairing."""

    def __init__(self, d_model: int, max_len: int, embed_scale: float = 1.0, **_: object) -> None:
        super().__init__()
        self.max_len = self.max_positions = max_len
        self.embed_scale = embed_scale
        self.weight = nn.Parameter(torch.empty(max_len, d_model))
        nn.init.normal_(self.weight, std=0.02)

    def embed(self, x: Tensor, offset: int = 0) -> Tensor:
        end = offset + x.size(1)
        if end > self.max_len:
            raise ValueError(
                f"pos=learned has {self.max_len} positions but the input reaches position {end}: "
                f"raise model.max_len (it must cover data.eval_seq_len) or use pos=sinusoidal/rope/alibi, which extrapolate"
            )
        table = self.weight[offset:end]
        return x + (table * self.embed_scale if self.embed_scale != 1.0 else table)

    def matrices(self) -> list[Matrix]:
        return [whole(Role.EMBEDDING, self)]


class Rotary(PositionalEncoding):
    """Rotary position embedding (Su et al. 2021, RoFormer, eq. 34).

    Each pair of query/key features (2i, 2i+1) is rotated by the angle ``pos * base^(-2i/r)``,
    so the dot product of a query at m and a key at n depends on m - n only. ``fraction`` < 1
    rotates only the first ``fraction * head_dim`` features (partial rotary, as in GPT-NeoX),
    leaving the rest position-free.
    """

    inv_freq: Tensor  # a buffer (registered in __init__)

    def __init__(self, head_dim: int, *, base: float, fraction: float, **_: object) -> None:
        super().__init__()
        self.rot_dim = rotary_dim(head_dim, fraction)
        self.base = base
        inv_freq = base ** (-torch.arange(0, self.rot_dim, 2, dtype=torch.float32) / self.rot_dim)
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def _rotate(self, x: Tensor, offset: int) -> Tensor:
        positions = torch.arange(offset, offset + x.size(-2), device=x.device, dtype=torch.float32)
        angles = positions[:, None] * self.inv_freq[None, :]  # (T, r/2)
        cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
        rot, rest = x[..., : self.rot_dim], x[..., self.rot_dim :]
        even, odd = rot[..., 0::2], rot[..., 1::2]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
        return torch.cat((rotated, rest), dim=-1)

    def rotate(self, q: Tensor, k: Tensor, q_offset: int = 0, k_offset: int = 0) -> tuple[Tensor, Tensor]:
        return self._rotate(q, q_offset), self._rotate(k, k_offset)


def alibi_slopes(n_heads: int) -> Tensor:
    """Head slopes of ALiBi (Press et al. 2022, Sec. 3): the geometric sequence starting at
    2^(-8/n) with ratio 2^(-8/n). For a head count that is not a power of two, the paper's code
    takes the slopes of the closest smaller power of two and fills the rest with every other slope
    of the next power of two."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    if math.log2(n_heads).is_integer():
        return torch.tensor(power_of_two(n_heads))
    closest = 2 ** math.floor(math.log2(n_heads))
    extra = power_of_two(2 * closest)[0::2][: n_heads - closest]
    return torch.tensor(power_of_two(closest) + extra)


class ALiBi(PositionalEncoding):
    """Attention with Linear Biases (Press et al. 2022): score(i, j) += -slope_h * |i - j|.

    Only the past is visible to a causal model, so the bias there is -slope * (i - j); for a
    bidirectional encoder the symmetric distance is used (as in the paper's encoder variant).
    """

    slopes: Tensor  # a buffer (registered in __init__)

    def __init__(self, n_heads: int, **_: object) -> None:
        super().__init__()
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def score_bias(self, q_len: int, k_len: int, q_offset: int, causal: bool, device: torch.device) -> Tensor:
        q_pos = torch.arange(q_offset, q_offset + q_len, device=device)
        k_pos = torch.arange(k_len, device=device)
        distance = (q_pos[:, None] - k_pos[None, :]).abs().float()
        return -self.slopes.to(device)[:, None, None] * distance[None]
