"""The logged gradient norms are the norms of the gradients of that step, before clipping."""

from __future__ import annotations

import copy
import csv
import math

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from ablate.callbacks.grad_norm import GradNormMonitor, group_name
from ablate.nn.spec import ModelSpec
from ablate.tasks.lm import LanguageModelTask

OPTIM = {"lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.1, "schedule": "constant", "warmup_steps": 0}


def make_task(norm: str = "sandwich", tie: bool = False) -> LanguageModelTask:
    spec = ModelSpec.from_flat(
        dict(
            vocab_size=40,
            n_layers=2,
            d_model=32,
            n_heads=4,
            d_ff=64,
            max_len=16,
            norm=norm,
            tie_embeddings=tie,
            pos="learned",
        )
    ).validate()
    return LanguageModelTask(spec.as_dict(), OPTIM)


def by_hand(task: LanguageModelTask, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    """Forward, backward, and per-group norms with a plain Python loop: the reference."""
    task.zero_grad()
    logits = task(x)
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), y.flatten()).backward()
    squares: dict[str, float] = {}
    seen = set()
    for name, p in task.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        key = "grad_norm/" + group_name(name)
        squares[key] = squares.get(key, 0.0) + p.grad.double().pow(2).sum().item()
    out = {k: math.sqrt(v) for k, v in squares.items()}
    out["grad_norm/total"] = math.sqrt(sum(squares.values()))
    return out


def test_group_names():
    assert group_name("model.blocks.3.attn.sublayer.qkv.weight") == "layer_03/attn"
    assert group_name("model.blocks.10.ffn.norm.weight") == "layer_10/ffn_norm"
    assert group_name("model.blocks.0.attn.post_norm.bias") == "layer_00/attn_post_norm"
    assert group_name("model.tok_emb.weight") == "embed"
    assert group_name("model.decoder.blocks.2.cross_attn.sublayer.kv.weight") == "dec_layer_02/cross_attn"


@pytest.mark.parametrize("tie", [False, True])
@pytest.mark.integration
def test_logged_grad_norms_equal_hand_computed(tmp_path, tie):
    torch.manual_seed(0)
    task = make_task(tie=tie)
    reference = copy.deepcopy(task)
    x = torch.randint(0, 40, (4, 16))
    y = torch.randint(0, 40, (4, 16))
    expected = by_hand(reference, x, y)

    logger = CSVLogger(tmp_path, name="csv", version="")
    trainer = L.Trainer(
        max_steps=1,
        logger=logger,
        callbacks=[GradNormMonitor(every_n_steps=1)],
        gradient_clip_val=1e-3,  # clipping happens after logging: must not show
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
        accelerator="cpu",
    )
    trainer.fit(task, DataLoader(TensorDataset(x, y), batch_size=4))
    logger.finalize("success")
    with open(tmp_path / "csv" / "metrics.csv") as f:
        row = next(r for r in csv.DictReader(f) if r.get("grad_norm/total"))
    logged = {k: float(v) for k, v in row.items() if k.startswith("grad_norm/") and v}
    assert set(logged) == set(expected)
    assert {"grad_norm/layer_00/attn", "grad_norm/layer_01/ffn_post_norm", "grad_norm/embed"} <= set(logged)
    assert ("grad_norm/head" in logged) == (not tie), "a tied head is part of embed"
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, rel=1e-4), key
    assert logged["grad_norm/total"] > 1e-2  # clearly above the clip threshold: logged before clipping


def test_interval_and_dense_warmup():
    monitor = GradNormMonitor(every_n_steps=10, dense_steps=5)
    assert [s for s in range(25) if monitor.should_log(s)] == [0, 1, 2, 3, 4, 10, 20]
