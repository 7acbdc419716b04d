"""What each weight matrix of a model does, as the modules that own them declare it.

An init scheme treats matrices by their role (DeepNet scales the value, output and FFN matrices;
GPT-2 shrinks the residual outputs; Xavier takes each matrix's own fan-out), and some layers
hold several matrices in one parameter for speed: the fused Q/K/V projection of self-attention,
K/V of cross-attention, the gate and value of a GLU. A module says which rows are which with
a ``matrices()`` method (:class:`DeclaresMatrices`), so :mod:`ablate.nn.init` never slices by
position or by name. A linear layer no module declares (the output head) counts as one
:attr:`Role.LINEAR` matrix.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, runtime_checkable

from torch import Tensor, nn


class Role(Enum):
    QUERY = "query"
    KEY = "key"
    VALUE = "value"
    ATTN_OUT = "attn_out"  # attention's output projection (a residual branch's last matrix)
    FFN_GATE = "ffn_gate"  # the gate half of a GLU's input matrix
    FFN_IN = "ffn_in"  # the FFN's input matrix (a GLU's value half)
    FFN_OUT = "ffn_out"  # the FFN's output matrix (a residual branch's last matrix)
    EMBEDDING = "embedding"  # a token or position table
    LINEAR = "linear"  # a linear layer no module declares (the output head)


RESIDUAL_OUTPUTS = frozenset({Role.ATTN_OUT, Role.FFN_OUT})  # the last matrix of each residual branch


@dataclass(frozen=True, eq=False)
class Matrix:
    """One matrix: ``rows`` of the parameter ``weight`` (all of them unless the parameter is fused)."""

    role: Role
    weight: Tensor
    rows: slice = field(default_factory=lambda: slice(None))

    def view(self) -> Tensor:
        """The matrix itself: a view into its parameter (write into it under ``torch.no_grad``)."""
        return self.weight[self.rows]


def whole(role: Role, module: nn.Linear | nn.Module) -> Matrix:
    """A linear layer's (or an embedding's) whole weight as one matrix."""
    weight = module.weight
    assert isinstance(weight, Tensor)
    return Matrix(role, weight)


def fused(linear: nn.Linear, *parts: tuple[Role, int]) -> list[Matrix]:
    """The matrices stacked by rows in one linear layer, ``(role, rows)`` in order."""
    if sum(n for _, n in parts) != linear.out_features:
        raise ValueError(f"parts of {[n for _, n in parts]} rows do not add up to {linear.out_features}")
    out, start = [], 0
    for role, n in parts:
        out.append(Matrix(role, linear.weight, slice(start, start + n)))
        start += n
    return out


@runtime_checkable
class DeclaresMatrices(Protocol):
    """A module that says what its matrices (its own parameters or its child linear layers') are."""

    def matrices(self) -> Iterable[Matrix]: ...


def model_matrices(model: nn.Module) -> list[Matrix]:
    """Every matrix of ``model`` in module order: those its modules declare, and each linear
    layer no module declares, whole, as :attr:`Role.LINEAR`. A module comes before its children
    in ``model.modules()``, so its declaration is seen before the linear layers it covers."""
    out: list[Matrix] = []
    declared: set[int] = set()
    for module in model.modules():
        if isinstance(module, DeclaresMatrices):
            for matrix in module.matrices():
                out.append(matrix)
                declared.add(id(matrix.weight))
        elif isinstance(module, nn.Linear) and id(module.weight) not in declared:
            out.append(whole(Role.LINEAR, module))
    return out
