"""resid_rms/*: the RMS of the residual stream after each block, measured only on logging steps."""

from __future__ import annotations

import csv
import itertools

import lightning as L
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from torch.utils.data import DataLoader, TensorDataset

from ablate.callbacks.residual_rms import ResidualRMSMonitor, block_name
from ablate.nn.seq2seq import EncoderDecoder
from ablate.nn.spec import ModelSpec
from ablate.nn.transformer import TransformerLM
from ablate.tasks.lm import LanguageModelTask

OPTIM = {"lr": 1e-3, "betas": [0.9, 0.99], "weight_decay": 0.1, "schedule": "constant", "warmup_steps": 0}


def spec(**kw) -> ModelSpec:
    base = dict(vocab_size=50, n_layers=2, d_model=32, n_heads=4, d_ff=64, max_len=16, pos="learned")
    return ModelSpec.from_flat({**base, **kw}).validate()


def rms(x: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """Reference: root of the mean square over the features of the real positions."""
    x = x.double()
    if mask is not None:
        x = x[mask]
    return x.pow(2).mean().sqrt().item()


def measure(model: torch.nn.Module, *inputs: torch.Tensor) -> dict[str, float]:
    monitor = ResidualRMSMonitor()
    monitor.attach(model)
    with torch.no_grad():
        model(*inputs)
    monitor.detach()
    assert not any(m._forward_hooks or m._forward_pre_hooks for m in model.modules())  # all removed
    return monitor.compute()


def test_block_names():
    assert block_name("model.blocks.3") == "layer_03"
    assert block_name("blocks.11") == "layer_11"
    assert block_name("model.encoder.blocks.0") == "enc_layer_00"
    assert block_name("model.decoder.blocks.2") == "dec_layer_02"
    assert block_name("model.blocks.3.attn") is None and block_name("model.tok_emb") is None


@pytest.mark.parametrize("norm", ["pre", "post"])
def test_lm_values_equal_hand_computation(norm):
    torch.manual_seed(0)
    model = TransformerLM(spec(norm=norm)).eval()
    idx = torch.randint(0, 50, (3, 16))
    logged = measure(model, idx)
    with torch.no_grad():  # the blocks run by hand
        x, expected = model.pos.embed(model.tok_emb(idx)), {}
        for i, block in enumerate(model.blocks):
            x = block(x, model.pos)
            expected[f"resid_rms/layer_{i:02d}"] = rms(x)
    assert logged.keys() == expected.keys()
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, rel=1e-5), key


def test_translation_values_skip_padding():
    torch.manual_seed(0)
    model = EncoderDecoder(spec(encoder_layers=2, norm="pre", tie_embeddings=True), pad_id=0).eval()
    src = torch.randint(3, 50, (2, 7))
    src[0, 4:] = 0  # padding: a shorter first sentence
    tgt = torch.randint(3, 50, (2, 5))
    tgt[1, 3:] = 0
    logged = measure(model, src, tgt)
    src_mask, tgt_mask = src != 0, tgt != 0
    expected = {}
    with torch.no_grad():
        x = model.encoder.pos.embed(model.tok_emb(src))
        for i, block in enumerate(model.encoder.blocks):
            x = block(x, model.encoder.pos, key_padding=src_mask)
            expected[f"resid_rms/enc_layer_{i:02d}"] = rms(x, src_mask)
        memory = model.encoder.final_norm(x)
        y = model.decoder.pos.embed(model.target_embedding(tgt))
        for i, block in enumerate(model.decoder.blocks):
            y = block(y, model.decoder.pos, memory=memory, memory_padding=src_mask)
            expected[f"resid_rms/dec_layer_{i:02d}"] = rms(y, tgt_mask)
            assert expected[f"resid_rms/dec_layer_{i:02d}"] != pytest.approx(rms(y), rel=1e-3)  # padding matters
    assert logged.keys() == expected.keys()
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, rel=1e-5), key


def test_post_ln_is_flat_and_pre_ln_grows_with_depth():
    """At init, Post-LN's stream is the LayerNorm output after every block (RMS 1, up to eps),
    Pre-LN's is a sum that grows with every block (Xiong et al. 2020; Xavier init as there)."""
    idx = torch.randint(0, 50, (8, 16))
    values = {}
    for norm in ("pre", "post"):
        torch.manual_seed(0)
        model = TransformerLM(spec(norm=norm, n_layers=8, init="xavier")).eval()
        logged = measure(model, idx)
        values[norm] = [logged[f"resid_rms/layer_{i:02d}"] for i in range(8)]
    assert values["post"] == pytest.approx([1.0] * 8, abs=1e-3)
    pre = values["pre"]
    assert all(b > a for a, b in itertools.pairwise(pre)), pre  # strictly increasing with depth
    assert pre[-1] > 2 * pre[0], pre


@pytest.mark.integration
def test_hooks_only_on_logging_steps(tmp_path):
    """Through a Trainer: hooks exist during the forward of logging steps only, are gone on
    every other step and after training, and the values land in the logger at those steps."""
    torch.manual_seed(0)
    task = LanguageModelTask(spec(n_layers=2).as_dict(), OPTIM)
    hooked: dict[int, int] = {}

    class Spy(L.Callback):  # runs after the monitor's on_train_batch_start (callback order)
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            hooked[trainer.global_step] = sum(len(m._forward_hooks) for m in pl_module.modules())

    monitor = ResidualRMSMonitor(every_n_steps=3, dense_steps=2)
    logger = CSVLogger(tmp_path, name="csv", version="")
    data = TensorDataset(torch.randint(0, 50, (32, 16)), torch.randint(0, 50, (32, 16)))
    trainer = L.Trainer(
        max_steps=7,
        logger=logger,
        callbacks=[monitor, Spy()],
        enable_progress_bar=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
        accelerator="cpu",
        log_every_n_steps=1,
    )
    trainer.fit(task, DataLoader(data, batch_size=4))
    logger.finalize("success")
    logging_steps = [0, 1, 3, 6]
    assert {s for s, n in hooked.items() if n} == set(logging_steps)
    assert all(hooked[s] == 2 for s in logging_steps)  # one hook per block
    assert sum(len(m._forward_hooks) for m in task.modules()) == 0
    with open(tmp_path / "csv" / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("resid_rms/layer_00")]
    assert [int(r["step"]) for r in rows] == logging_steps
    assert all(float(r["resid_rms/layer_01"]) > 0 for r in rows)
