"""Sharded FSDP checkpoints for the CPU tests: a folder written by Lightning's own
``FSDPStrategy.save_checkpoint`` (``state_dict_type="sharded"``), from a checkpoint as train.py's
look. Lightning runs FSDP on GPUs only, but its sharded save of a given checkpoint runs anywhere
(in one process DCP writes one shard), so the layout read here is the one a GPU run writes."""

from __future__ import annotations

import copy
import warnings
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.strategies import FSDPStrategy

from ablate.callbacks.checkpointing import ResumeState
from ablate.checkpoints.parts import RESUME_STATE_KEY

IDENTITY = {"model.n_layers": 2, "optim.lr": 0.001, "seed": 1}  # a run identity (ablate.config.identity)


def fsdp_optimizer_state(state_dict: dict[str, torch.Tensor]) -> dict[str, Any]:
    """What FSDP's sharded optimiser state looks like (``FSDP.optim_state_dict``): AdamW's state
    keyed by parameter name, one step taken."""
    params = {name: torch.nn.Parameter(value.detach().clone().float()) for name, value in state_dict.items()}
    optimizer = torch.optim.AdamW(params.values(), lr=1e-3)
    sum(p.sum() for p in params.values()).backward()
    optimizer.step()
    plain = optimizer.state_dict()
    names = list(params)
    return {
        "state": {names[i]: state for i, state in plain["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in plain["param_groups"]],
    }


def resumable(checkpoint: dict[str, Any], identity: dict[str, Any] | None = None) -> dict[str, Any]:
    """``checkpoint`` (a :func:`helpers.checkpoints.lm_checkpoint`'s contents) with the training state
    train.py writes: step, loops, an optimiser state, a schedule and the run's resume state."""
    out = copy.copy(checkpoint)
    out.update(
        global_step=3,
        epoch=0,
        loops={"fit_loop": {}},
        lr_schedulers=[{"last_epoch": 3}],
        optimizer_states=[fsdp_optimizer_state(checkpoint["state_dict"])],
        callbacks={
            RESUME_STATE_KEY: ResumeState(wandb_run_id="wandb-123", run_identity=identity or IDENTITY).state_dict()
        },
    )
    return out


def save_sharded(checkpoint: dict[str, Any], folder: Path) -> Path:
    """``checkpoint`` saved as ``trainer=fsdp trainer.strategy.state_dict_type=sharded`` saves it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # DCP: "assuming the intent is to save in a single process"
        FSDPStrategy(state_dict_type="sharded").save_checkpoint(dict(checkpoint), folder)
    return folder
