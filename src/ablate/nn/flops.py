"""The training FLOPs of a Transformer, per token: one formula for ``train/mfu`` (the throughput
callback), the compute-multiplier fits and the equal-cost comparisons (Lightning-free, so the
analysis scripts need not import the training stack)."""

from __future__ import annotations


def flops_per_token(n_params: float, n_layers: float, d_model: float, seq_len: float) -> float:
    """Training FLOPs per token: 6N for the matmuls of forward + backward, plus the attention
    scores and weighted sum, 12 L d T (Kaplan et al. 2020; PaLM, Chowdhery et al. 2022, App. B)."""
    return 6 * n_params + 12 * n_layers * d_model * seq_len
