"""Weight initialisation schemes (the ``init`` option).

Each scheme is an :class:`InitScheme` subclass, declared with its options in :mod:`ablate.nn.options`
(``init.std`` for ``gpt2``), applied once after the model is built.
Schemes treat matrices by the roles the modules declare (:mod:`ablate.nn.roles`), never by
position or name:

* residual outputs: the attention output and FFN output matrices (:data:`RESIDUAL_OUTPUTS`);
* embeddings: the token and position tables (:attr:`Role.EMBEDDING`), one std for both
  (:meth:`InitScheme.embedding_std`), which the additive position signals are scaled to
  (:meth:`ablate.nn.spec.ModelSpec.token_rms`: the scale contract);
* fused layers: each matrix of a fused Q/K/V (or K/V, or GLU gate/value) projection by itself;
* DeepNorm sub-layers: the matrices of a residual whose placement declares a
  :attr:`~ablate.nn.block.Residual.branch_gain` (DeepNet's beta).

Norm layers keep their defaults (gain 1, bias 0) in every scheme.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ablate.nn.block import Residual
from ablate.nn.roles import RESIDUAL_OUTPUTS, Matrix, Role, model_matrices

if TYPE_CHECKING:
    pass

# the matrices DeepNet gives the gain beta (Wang et al. 2022, Sec. 3): W_v, W_o and the FFN's
DEEPNET_GAINED = frozenset({Role.VALUE, Role.ATTN_OUT, Role.FFN_GATE, Role.FFN_IN, Role.FFN_OUT})


def linear_matrices(model: nn.Module) -> list[Matrix]:
    return [m for m in model_matrices(model) if m.role is not Role.EMBEDDING]


def linear_weights(model: nn.Module) -> list[Tensor]:
    """Each linear layer's weight once (a fused one as a whole), in module order."""
    return list({id(m.weight): m.weight for m in linear_matrices(model)}.values())


def embedding_weights(model: nn.Module) -> Iterator[Tensor]:
    return (m.weight for m in model_matrices(model) if m.role is Role.EMBEDDING)


def xavier_(matrix: Matrix, gain: float = 1.0, uniform: bool = True) -> None:
    """Xavier init of one matrix with its own fan-in and fan-out, as if it were a layer of its
    own, also where it is stacked with others in one fused parameter."""
    fill = nn.init.xavier_uniform_ if uniform else nn.init.xavier_normal_
    with torch.no_grad():
        rows = matrix.view()
        rows.copy_(fill(torch.empty_like(rows), gain=gain))


def _zero_biases(model: nn.Module) -> None:
    for module in model.modules():
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)


class InitScheme:
    """Base of the schemes: :meth:`apply` initialises a built model in place. A scheme may check
    the spec it serves in its config (:meth:`ablate.nn.options.OptionConfig.validate`)."""

    def embedding_std(self, d_model: int) -> float:
        """The std of every embedding table (token and learned position): what the additive
        position signals are scaled to (:meth:`ablate.nn.spec.ModelSpec.token_rms`)."""
        return d_model**-0.5

    def apply(self, model: nn.Module) -> None:
        raise NotImplementedError


class PytorchInit(InitScheme):
    """PyTorch's module defaults for every linear layer (Kaiming-uniform, a = sqrt(5)), and the
    embedding tables at ``nn.Linear``'s default, U(-1/sqrt(d), 1/sqrt(d)) (std (3d)^-1/2), not
    ``nn.Embedding``'s N(0, 1): a table tied to the output head *is* a linear layer, and N(0, 1)
    there gives logits of std sqrt(d) (an initial loss of ~110 nats at d=128). Untied tables get
    the same, so flipping ``model.tie_embeddings`` changes only the tying."""

    def embedding_std(self, d_model: int) -> float:
        return (3 * d_model) ** -0.5

    def apply(self, model: nn.Module) -> None:
        for weight in embedding_weights(model):
            bound = weight.size(-1) ** -0.5
            nn.init.uniform_(weight, -bound, bound)


class XavierInit(InitScheme):
    """Xavier-uniform linears, zero biases (Glorot & Bengio 2010), embeddings N(0, d^-1/2) as
    fairseq's Transformer does (Vaswani et al. 2017 scale embeddings by sqrt(d) to match)."""

    def apply(self, model: nn.Module) -> None:
        for matrix in linear_matrices(model):
            xavier_(matrix)
        _zero_biases(model)
        for weight in embedding_weights(model):
            nn.init.normal_(weight, std=self.embedding_std(weight.size(-1)))


class Gpt2Init(InitScheme):
    """GPT-2 (Radford et al. 2019, Sec. 2.3): N(0, std) everywhere, zero biases, and residual
    output projections scaled by 1/sqrt(number of residual branches) = 1/sqrt(2N) for N layers."""

    def __init__(self, std: float) -> None:
        self.std = std

    def embedding_std(self, d_model: int) -> float:
        return self.std

    def apply(self, model: nn.Module) -> None:
        for weight in linear_weights(model):
            nn.init.normal_(weight, std=self.std)
        _zero_biases(model)
        for embedding in embedding_weights(model):
            nn.init.normal_(embedding, std=self.std)
        outputs = [m.weight for m in linear_matrices(model) if m.role in RESIDUAL_OUTPUTS]
        for weight in outputs:
            nn.init.normal_(weight, std=self.std / math.sqrt(len(outputs)))


class SmallInit(InitScheme):
    """SmallInit (Nguyen & Salazar 2019, "Transformers without Tears", Sec. 2.3):
    N(0, sqrt(2 / (5 d))) for every matrix and embedding, zero biases. d is d_model (the
    embedding width) for every matrix, the FFN's output one included, as in GPT-NeoX."""

    def embedding_std(self, d_model: int) -> float:
        return math.sqrt(2 / (5 * d_model))

    def apply(self, model: nn.Module) -> None:
        embeddings = list(embedding_weights(model))
        d = embeddings[0].size(-1) if embeddings else None
        for weight in linear_weights(model):
            nn.init.normal_(weight, std=math.sqrt(2 / (5 * (d or weight.size(-1)))))
        _zero_biases(model)
        for embedding in embeddings:
            nn.init.normal_(embedding, std=self.embedding_std(embedding.size(-1)))


class DeepNetInit(InitScheme):
    """DeepNet (Wang et al. 2022, Sec. 3, "DeepNorm" pseudo-code): Xavier-normal everywhere, then
    gain beta on the value, output and FFN matrices of every DeepNorm sub-layer. Q and K are
    computed by one fused matrix with V here, so their rows keep gain 1 while the value rows get
    beta. Only with ``norm=deepnorm``, whose residuals carry beta."""

    def apply(self, model: nn.Module) -> None:
        for matrix in linear_matrices(model):
            xavier_(matrix, uniform=False)
        _zero_biases(model)
        for embedding in embedding_weights(model):
            nn.init.normal_(embedding, std=embedding.size(-1) ** -0.5)
        for module in model.modules():
            if isinstance(module, Residual) and module.branch_gain is not None:
                for matrix in linear_matrices(module.sublayer):
                    if matrix.role in DEEPNET_GAINED:
                        xavier_(matrix, gain=module.branch_gain, uniform=False)
