"""Optimiser and learning-rate schedules (the ``optim`` config group).

AdamW (Loshchilov & Hutter 2019) with weight decay on matrices only: biases, norm gains and
other vectors are not decayed (as in GPT-2/nanoGPT; decaying a LayerNorm gain towards zero
fights the normalisation). Embedding matrices are matrices and are decayed, as nanoGPT does.

Schedules return a multiplier of the peak ``lr`` for an optimiser step, with a linear warmup
of ``warmup_steps`` (0 allowed) in front of every one of them.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, Callable, Mapping

import torch
from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups: parameters with >= 2 dims (matrices, decayed) and the rest (not decayed)."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()  # tied: once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(model: nn.Module, cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    fused = cfg.get("fused")
    if fused is None:  # fused AdamW is a GPU kernel; on CPU the foreach path is the fast one
        fused = next(model.parameters()).is_cuda
    return torch.optim.AdamW(
        param_groups(model, cfg["weight_decay"]),
        lr=cfg["lr"], betas=tuple(cfg["betas"]), eps=cfg.get("eps", 1e-8), fused=fused or None,
    )


def warmup(step: int, warmup_steps: int) -> float:
    """Linear warmup to 1 over ``warmup_steps``; step 0 already gets a small non-zero rate."""
    return (step + 1) / (warmup_steps + 1)


def _progress(step: int, warmup_steps: int, decay_steps: int) -> float:
    span = max(1, decay_steps - warmup_steps)
    return min(1.0, max(0.0, (step - warmup_steps) / span))


def cosine(step: int, warmup_steps: int, decay_steps: int, min_ratio: float) -> float:
    """Cosine decay from 1 to ``min_ratio`` (Loshchilov & Hutter 2017, SGDR without restarts)."""
    if step < warmup_steps:
        return warmup(step, warmup_steps)
    p = _progress(step, warmup_steps, decay_steps)
    return min_ratio + 0.5 * (1 - min_ratio) * (1 + math.cos(math.pi * p))


def linear(step: int, warmup_steps: int, decay_steps: int, min_ratio: float) -> float:
    """Linear decay from 1 to ``min_ratio``."""
    if step < warmup_steps:
        return warmup(step, warmup_steps)
    return 1 - (1 - min_ratio) * _progress(step, warmup_steps, decay_steps)


def inverse_sqrt(step: int, warmup_steps: int, decay_steps: int, min_ratio: float) -> float:
    """Vaswani et al. 2017, eq. 3 ("Noam"): linear warmup, then decay proportional to
    1/sqrt(step), normalised so the peak (the end of warmup) is exactly 1:
    sqrt((warmup+1)/(step+1)). With no warmup it decays as 1/sqrt(step+1) from step 0."""
    if step < warmup_steps:
        return warmup(step, warmup_steps)
    return math.sqrt((warmup_steps + 1) / (step + 1))


def constant(step: int, warmup_steps: int, decay_steps: int, min_ratio: float) -> float:
    return warmup(step, warmup_steps) if step < warmup_steps else 1.0


SCHEDULES: dict[str, Callable[[int, int, int, float], float]] = {
    "cosine": cosine,
    "linear": linear,
    "inverse_sqrt": inverse_sqrt,
    "constant": constant,
}


def build_schedule(optimizer: torch.optim.Optimizer, cfg: Mapping[str, Any], max_steps: int) -> torch.optim.lr_scheduler.LambdaLR:
    name = cfg["schedule"]
    if name not in SCHEDULES:
        raise ValueError(f"unknown optim.schedule={name!r}; valid options: {', '.join(SCHEDULES)}")
    decay_steps = cfg.get("decay_steps") or max_steps
    fn = partial(SCHEDULES[name], warmup_steps=cfg.get("warmup_steps", 0), decay_steps=decay_steps,
                 min_ratio=cfg.get("min_lr_ratio", 0.0))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)
