"""Learning-rate schedules and weight-decay groups."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.nn.spec import ModelSpec
from ablate.nn.transformer import TransformerLM
from ablate.optim import build_optimizer, build_schedule, param_groups

BASE = {"lr": 1.0, "betas": [0.9, 0.99], "weight_decay": 0.1, "warmup_steps": 10, "min_lr_ratio": 0.1}


def lrs(schedule: str, steps: int = 110, **over) -> list[float]:
    cfg = {**BASE, "schedule": schedule, **over}
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=cfg["lr"])
    sched = build_schedule(opt, cfg, max_steps=100)
    out = []
    for _ in range(steps):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


@pytest.mark.parametrize("schedule", ["cosine", "linear", "inverse_sqrt", "constant"])
def test_warmup_is_linear_and_peaks_at_lr(schedule):
    values = lrs(schedule)
    assert values[:10] == pytest.approx([(s + 1) / 11 for s in range(10)])
    assert values[10] == pytest.approx(1.0)
    assert max(values) == pytest.approx(1.0)


def test_decays():
    cos, lin, inv, const = (lrs(s) for s in ("cosine", "linear", "inverse_sqrt", "constant"))
    assert cos[100] == pytest.approx(0.1) and cos[109] == pytest.approx(0.1)  # floor after decay_steps
    assert cos[55] == pytest.approx(0.1 + 0.45 * (1 + math.cos(math.pi * 0.5)))
    assert lin[55] == pytest.approx(1 - 0.9 * 0.5)
    assert inv[40] == pytest.approx(math.sqrt(11 / 41))  # Vaswani eq. 3, peak-normalised
    assert const[99] == 1.0


def test_no_warmup_starts_at_peak():
    assert lrs("cosine", warmup_steps=0)[0] == pytest.approx(1.0)
    assert lrs("inverse_sqrt", warmup_steps=0)[3] == pytest.approx(0.5)


def test_unknown_schedule_lists_options():
    with pytest.raises(ValueError, match="cosine, linear, inverse_sqrt, constant"):
        lrs("step")


def test_weight_decay_on_matrices_only():
    model = TransformerLM(ModelSpec(vocab_size=30, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=8).validate())
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(p.dim() < 2 for p in no_decay["params"])
    n_unique = len({id(p) for p in model.parameters()})
    assert len(decay["params"]) + len(no_decay["params"]) == n_unique  # the tied head is counted once
    opt = build_optimizer(model, {**BASE, "lr": 1e-3})
    assert isinstance(opt, torch.optim.AdamW)
