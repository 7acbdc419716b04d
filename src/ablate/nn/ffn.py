"""Position-wise feed-forward networks (the ``act`` option).

Plain FFN (Vaswani et al. 2017, eq. 2): ``W2 act(W1 x)``.
Gated FFN (Shazeer 2020, "GLU Variants Improve Transformer", eqs. 5-6): ``W2 (act(W x) * V x)``.
Shazeer keeps parameter counts equal by shrinking the hidden width of the three-matrix gated
FFN to 2/3 of the two-matrix one; ``gated_width_scale`` does the same (turn it off with
``act.match_params=false``).

Adding an activation: its name and the import path of its function in
:data:`ablate.nn.options.PLAIN_ACTS` (plain) or ``GATED_ACTS`` (gated), declared without torch
(a function of its own goes here), and its formula in ``tests/nn/test_ffn.py``; the FFN's keyword
arguments besides the dimensions are its keys (``match_params`` for the gated ones).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

import torch.nn.functional as F
from torch import Tensor, nn

from ablate.nn.options import GATED_ACTS, PLAIN_ACTS
from ablate.nn.roles import Matrix, Role, fused, whole

Activation = Callable[[Tensor], Tensor]


def relu_squared(x: Tensor) -> Tensor:
    """Squared ReLU (So et al. 2021, "Primer", Sec. 4)."""
    return F.relu(x).square()


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU with the tanh approximation (Hendrycks & Gimpel 2016, eq. 3), as in GPT-2/BERT."""
    return F.gelu(x, approximate="tanh")


def identity(x: Tensor) -> Tensor:
    return x


def _function(path: str) -> Activation:
    module, _, name = path.rpartition(".")
    function: Activation = getattr(importlib.import_module(module), name)
    return function


ACTIVATIONS: dict[str, Activation] = {name: _function(path) for name, path in PLAIN_ACTS.items()}
GATES: dict[str, Activation] = {name: _function(path) for name, path in GATED_ACTS.items()}


def hidden_width(act: str, d_ff: int, match_params: bool = True) -> int:
    """The hidden width a gated FFN needs to have the parameters of a plain one of width d_ff."""
    return round(2 * d_ff / 3) if act in GATES and match_params else d_ff


class FeedForward(nn.Module):
    """Plain two-layer FFN: ``out(act(in(x)))``."""

    def __init__(self, d_model: int, d_ff: int, act: str, *, bias: bool, dropout: float) -> None:
        super().__init__()
        self.act = ACTIVATIONS[act]
        self.fc_in = nn.Linear(d_model, d_ff, bias=bias)
        self.fc_out = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.fc_out(self.act(self.fc_in(x))))

    def matrices(self) -> list[Matrix]:
        return [whole(Role.FFN_IN, self.fc_in), whole(Role.FFN_OUT, self.fc_out)]


class GatedFeedForward(nn.Module):
    """Gated FFN: ``out(gate(W x) * (V x))`` of hidden width :func:`hidden_width`. W and V are
    one fused matrix (``fc_in``): one matmul instead of two, same function; the first half of its
    output is the gate."""

    def __init__(self, d_model: int, d_ff: int, act: str, *, bias: bool, dropout: float, match_params: bool) -> None:
        super().__init__()
        self.gate = GATES[act]
        width = hidden_width(act, d_ff, match_params)
        self.fc_in = nn.Linear(d_model, 2 * width, bias=bias)
        self.fc_out = nn.Linear(width, d_model, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        gate, value = self.fc_in(x).chunk(2, dim=-1)
        return self.dropout(self.fc_out(self.gate(gate) * value))

    def matrices(self) -> list[Matrix]:
        width = self.fc_out.in_features
        return [*fused(self.fc_in, (Role.FFN_GATE, width), (Role.FFN_IN, width)), whole(Role.FFN_OUT, self.fc_out)]
