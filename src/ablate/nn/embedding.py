"""Token embeddings."""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from ablate.nn.roles import Matrix, Role, whole


class TokenEmbedding(nn.Module):
    """Token lookup, optionally scaled by sqrt(d) (Vaswani et al. 2017, Sec. 3.4)."""

    def __init__(self, vocab_size: int, d_model: int, scale: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        nn.init.normal_(self.weight)
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, idx: Tensor) -> Tensor:
        x = nn.functional.embedding(idx, self.weight)
        return x * self.scale if self.scale != 1.0 else x

    def matrices(self) -> list[Matrix]:
        return [whole(Role.EMBEDDING, self)]
