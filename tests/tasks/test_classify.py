"""The encoder-only classification task (``task=classify``, ablate.tasks.classify) on the synthetic
majority data (``data=majority``, ablate.data.majority): a model built from one bidirectional
Stack that sees every real token of its row and no padding, a config checked before any data,
labels that say what the module docstring says, and a run through train.py's own ``fit`` that
learns the task."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

from ablate.data.majority import PAD, MajorityData
from ablate.errors import ConfigError
from ablate.nn.spec import ModelSpec
from ablate.tasks.classify import EncoderClassifier
from helpers.runs import REPO
from helpers.tiny_models import ATTN, POS

pytestmark = pytest.mark.usefixtures("one_thread")
V = 9  # 8 symbols and the padding id


def classifier(**overrides) -> EncoderClassifier:
    torch.manual_seed(0)
    sizes = dict(vocab_size=V, n_layers=2, d_model=32, n_heads=4, d_ff=64, max_len=16, tie_embeddings=False)
    spec = ModelSpec.from_flat({**sizes, **overrides}).validate()
    return EncoderClassifier(spec, num_classes=2).eval()


def composed(tmp_path: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(config_name="train", overrides=["task=classify", "logger=csv", *overrides])
    with open_dict(cfg):
        cfg.paths.root_dir = str(tmp_path)
        cfg.paths.cache_dir, cfg.paths.output_dir = str(tmp_path / "cache"), str(tmp_path / "run")
        for node in cfg.callbacks.values():
            if node is not None and "dirpath" in node:
                node.dirpath = str(tmp_path / "run" / "checkpoints")
    return cfg


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("pos", POS)
def test_the_classifier_reads_every_real_token_and_no_padding(pos: str, attn: str) -> None:
    model = classifier(pos=pos, attn=attn)
    torch.manual_seed(1)
    rows = torch.randint(1, V, (3, 16))
    rows[1, 10:] = PAD  # a shorter row
    with torch.no_grad():
        batch = model(rows)
        # a row alone, unpadded, is classified as inside the padded batch
        torch.testing.assert_close(model(rows[1:2, :10]), batch[1:2], rtol=1e-5, atol=1e-5)
        # every real token counts, the last one too
        last = rows.clone()
        last[1, 9] = last[1, 9] % (V - 1) + 1
        assert (model(last)[1] - batch[1]).abs().max() > 1e-6
    # the stack itself is bidirectional: the first position's state depends on a later token
    hidden = model.blocks[0](model.pos.embed(model.tok_emb(rows)), model.pos)
    later = model.blocks[0](model.pos.embed(model.tok_emb(last)), model.pos)
    assert (later[1, 0] - hidden[1, 0]).abs().max() > 1e-6


def test_the_task_checks_its_config_before_any_data(tmp_path: Path) -> None:
    from ablate.run.plan import check_config

    check_config(composed(tmp_path))  # the defaults pass
    with pytest.raises(ConfigError, match="model.tie_embeddings applies to models with an output vocabulary"):
        check_config(composed(tmp_path, "model.tie_embeddings=true"))
    with pytest.raises(ConfigError, match="task=classify is encoder-only"):
        check_config(composed(tmp_path, "+model.encoder_layers=2"))


def test_majority_rows_and_labels() -> None:
    data = MajorityData(seq_len=12, symbols=5, train_size=300, val_size=50, test_size=50, seed=3)
    data.setup()
    tokens, labels = data.datasets["train"].tensors
    lengths = (tokens != PAD).sum(1)
    assert lengths.min() >= 6 and lengths.max() <= 12 and tokens.max() <= 5
    for row, length in zip(tokens, lengths):
        assert (row[length:] == PAD).all() and (row[:length] != PAD).all()  # right-padded
    ones, twos = (tokens == 1).sum(1), (tokens == 2).sum(1)
    assert (ones != twos).all()  # no ties
    assert torch.equal(labels, (ones > twos).long())
    assert 0.3 < labels.float().mean() < 0.7  # both classes
    again = MajorityData(seq_len=12, symbols=5, train_size=300, val_size=50, test_size=50, seed=3)
    again.setup()
    assert torch.equal(again.datasets["train"].tensors[0], tokens)  # the seed decides
    assert not np.array_equal(data.datasets["val"].tensors[0][:10], tokens[:10])  # its own stream per split


@pytest.mark.integration
def test_classify_trains_through_train_py(tmp_path: Path) -> None:
    """The in-process equivalent of ``python train.py task=classify``: ablate.run.train.fit."""
    from ablate.run.config import RunConfig
    from ablate.run.plan import Job, Plan, RunControl, check_config
    from ablate.run.train import fit

    cfg = composed(
        tmp_path,
        "data.seq_len=16",
        "data.train_size=1024",
        "trainer.max_steps=60",
        "trainer.val_check_interval=30",
        "optim.warmup_steps=10",
        "optim.lr=3e-3",
        "callbacks.progress_bar=null",
        "callbacks.throughput.peak_flops=1e12",
    )
    status = fit(
        RunConfig.from_hydra(cfg), Job(control=RunControl.from_config(cfg, tmp_path / "run")), check_config(cfg), Plan()
    )
    assert status.status == "completed" and status.steps == 60
    assert status.metrics["val/acc"] > 0.9 and status.metrics["test/acc"] > 0.9  # learned (chance: 0.5)
