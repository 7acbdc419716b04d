"""Optimiser and learning-rate schedules (the ``optim`` config group).

``optim.name`` picks the optimiser from :data:`OPTIMIZERS`: ``adamw`` (Loshchilov & Hutter 2019),
``adam`` (Kingma & Ba 2015; ``weight_decay`` as an L2 term) or ``sgd``, each with the ``optim``
keys it reads (:func:`used_optim_config`).

Weight decay on matrices only, embeddings included (as nanoGPT): biases, norm gains and other
vectors are not decayed (decaying a LayerNorm gain towards zero fights the normalisation).
Schedules return a multiplier of the peak ``lr`` for an optimiser step, after a linear warmup of
``warmup_steps`` (0 allowed).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch
    from torch import nn


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two groups: parameters with >= 2 dims (matrices, decayed) and the rest (not decayed)."""
    params = {id(p): p for p in model.parameters() if p.requires_grad}.values()  # tied: once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


@dataclass(frozen=True)
class OptimizerKind:
    """A torch optimiser (its class' name in :mod:`torch.optim`: the config is checked before torch
    is imported) and the ``optim`` keys it takes (besides ``lr`` and ``weight_decay``)."""

    name: str
    keys: tuple[str, ...]

    @property
    def cls(self) -> type[torch.optim.Optimizer]:
        import torch

        return getattr(torch.optim, self.name)


OPTIMIZERS: dict[str, OptimizerKind] = {
    "adamw": OptimizerKind("AdamW", ("betas", "eps", "fused")),
    "adam": OptimizerKind("Adam", ("betas", "eps", "fused")),
    "sgd": OptimizerKind("SGD", ("momentum",)),
}
# keys that belong to some optimiser; the rest of `optim` (lr, schedule, ...) applies to all
_OPTIMIZER_KEYS = {key for kind in OPTIMIZERS.values() for key in kind.keys}


def optimizer_kind(cfg: Mapping[str, Any]) -> OptimizerKind:
    name = cfg.get("name", "adamw")
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optim.name={name!r}; valid options: {', '.join(OPTIMIZERS)}")
    kind = OPTIMIZERS[name]
    if "momentum" not in kind.keys and cfg.get("momentum") is not None:
        raise ValueError(
            f"optim.momentum={cfg['momentum']} does not apply to optim.name={name} "
            f"(it takes {', '.join(kind.keys)}); use optim.name=sgd or remove optim.momentum"
        )
    return kind


def used_optim_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """``cfg`` without the keys the chosen optimiser does not read: what a run records (W&B,
    hparams, status), so that ``optim.name=sgd`` does not report Adam's betas as if used."""
    kind = optimizer_kind(cfg)
    return {k: v for k, v in cfg.items() if k not in _OPTIMIZER_KEYS or k in kind.keys}


def build_optimizer(model: nn.Module, cfg: Mapping[str, Any]) -> torch.optim.Optimizer:
    """The optimiser ``optim.name`` over :func:`param_groups`, with the keys that kind takes."""
    kind = optimizer_kind(cfg)
    options: dict[str, Any] = {"lr": cfg["lr"]}
    if "betas" in kind.keys:
        options.update(betas=tuple(cfg["betas"]), eps=cfg.get("eps", 1e-8))
    if "fused" in kind.keys:
        fused = cfg.get("fused")
        if fused is None:  # fused Adam(W) is a GPU kernel; on CPU the foreach path is the fast one
            fused = next(model.parameters()).is_cuda
        options["fused"] = fused or None
    if "momentum" in kind.keys:
        options["momentum"] = cfg.get("momentum") or 0.0
    return kind.cls(param_groups(model, cfg["weight_decay"]), **options)


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


class Schedule(Protocol):
    """A schedule's signature: called positionally, or by keyword through ``partial``."""

    def __call__(self, step: int, warmup_steps: int, decay_steps: int, min_ratio: float) -> float: ...


SCHEDULES: dict[str, Schedule] = {
    "cosine": cosine,
    "linear": linear,
    "inverse_sqrt": inverse_sqrt,
    "constant": constant,
}


def build_schedule(
    optimizer: torch.optim.Optimizer, cfg: Mapping[str, Any], max_steps: int
) -> torch.optim.lr_scheduler.LambdaLR:
    name = cfg["schedule"]
    if name not in SCHEDULES:
        raise ValueError(f"unknown optim.schedule={name!r}; valid options: {', '.join(SCHEDULES)}")
    decay_steps = cfg.get("decay_steps") or max_steps
    fn = partial(
        SCHEDULES[name],
        warmup_steps=cfg.get("warmup_steps", 0),
        decay_steps=decay_steps,
        min_ratio=cfg.get("min_lr_ratio", 0.0),
    )
    import torch

    return torch.optim.lr_scheduler.LambdaLR(optimizer, fn)


# --- Gradient clipping under every precision -----------------------------------------------------


def unscales_in_step(optimizer: torch.optim.Optimizer) -> bool:
    """Whether the optimiser unscales fp16 gradients inside its own ``step`` (fused Adam/AdamW:
    PyTorch's ``_step_supports_amp_scaling``), so that a GradScaler leaves them scaled until then."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def unscale_once(scaler: torch.amp.GradScaler | None, optimizer: torch.optim.Optimizer) -> None:
    """Unscale fp16 gradients before they are read or clipped, where nobody else does.

    With a GradScaler Lightning unscales before clipping, except for an optimiser that unscales in
    its step (:func:`unscales_in_step`, e.g. fused AdamW), whose gradients a clipped or logged norm
    would read the loss scale times too large. As PyTorch's AMP recipe does; the scaler records the
    stage, so this runs once per step whatever reads the gradients first. No host synchronisation."""
    if scaler is None or not scaler.is_enabled() or not unscales_in_step(optimizer):
        return
    from torch.amp.grad_scaler import OptState

    # the scaler's own record of this optimiser's stage (READY: not unscaled since the last update)
    if scaler._per_optimizer_states[id(optimizer)]["stage"] is OptState.READY:
        scaler.unscale_(optimizer)


def clip_gradients(
    parameters: list[torch.Tensor], max_value: float, algorithm: str = "norm", sharded_root: nn.Module | None = None
) -> None:
    """Clip gradients to a global L2 norm of ``max_value`` (``algorithm="norm"``) or each element to
    ``[-max_value, max_value]`` (``"value"``), by the same call as Lightning's own clipping; an FSDP
    model's sharded gradients through its root module (a collective every rank calls)."""
    import torch

    if algorithm == "value":
        torch.nn.utils.clip_grad_value_(parameters, max_value)
    elif algorithm != "norm":
        raise ValueError(f"gradient clipping algorithm {algorithm!r}: use norm or value")
    elif sharded_root is not None:
        sharded_root.clip_grad_norm_(max_value)  # type: ignore[operator]  # FSDP's method
    else:
        torch.nn.utils.clip_grad_norm_(parameters, max_value)
