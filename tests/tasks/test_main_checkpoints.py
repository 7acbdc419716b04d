"""Checkpoints written by main 780a50a (before one Stack built every model) still load and compute
what they computed then, the way eval.py, generate.py and translate.py load them
(:func:`ablate.tasks.load_task_checkpoint`), and a run resumes from one.

The fixtures (``tests/fixtures/main_780a50a_*``) were saved by ``Trainer.save_checkpoint`` after
one training step of a tiny LM (RoPE, SwiGLU, RMSNorm, multi-query attention) and a tiny
encoder-decoder (sinusoidal, post-LN, ReLU, Xavier, decoder-tied embeddings), with the sum of the
logits each gave on a fixed input (``main_780a50a_checkpoints.json``).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from ablate.checkpoints.files import inspect_checkpoint
from ablate.tasks.checkpoints import load_task_checkpoint
from helpers.checkpoints import quiet_trainer

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXPECTED = json.loads((FIXTURES / "main_780a50a_checkpoints.json").read_text())

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_language_model_checkpoint_from_main_loads_and_computes_what_it_did():
    task = load_task_checkpoint(FIXTURES / "main_780a50a_lm.ckpt", "lm", "generate.py")
    assert task.tokenizer is not None and task.spec.choice("pos") == "rope" and task.spec.n_kv_heads == 1
    with torch.no_grad():
        got = task.model.eval()(torch.tensor(EXPECTED["lm_probe"])).double().sum().item()
    assert math.isclose(got, EXPECTED["lm"], rel_tol=1e-6)
    # a task built now saves the hyper-parameters main saved: its checkpoints rebuild the same way
    stored = inspect_checkpoint(FIXTURES / "main_780a50a_lm.ckpt")["hyper_parameters"]
    assert dict(type(task)(**stored).hparams) == dict(stored)


def test_a_translation_checkpoint_from_main_loads_and_computes_what_it_did():
    task = load_task_checkpoint(FIXTURES / "main_780a50a_translation.ckpt", "translation", "eval.py")
    assert task.tokenizer is not None and task.spec.encoder_layers == 1
    src, tgt = torch.tensor(EXPECTED["translation_src"]), torch.tensor(EXPECTED["translation_tgt"])
    with torch.no_grad():
        got = task.model.eval()(src, tgt, src != 0).double().sum().item()
    assert math.isclose(got, EXPECTED["translation"], rel_tol=1e-6)
    stored = inspect_checkpoint(FIXTURES / "main_780a50a_translation.ckpt")["hyper_parameters"]
    assert dict(type(task)(**stored).hparams) == dict(stored)


@pytest.mark.integration
def test_training_resumes_from_a_checkpoint_of_main(tmp_path):
    """The optimiser state maps onto the parameters by their order: a changed order would fail
    here (or, with equal shapes, resume silently wrong, which the fingerprints guard)."""
    path = FIXTURES / "main_780a50a_lm.ckpt"
    task = load_task_checkpoint(path, "lm")
    x = torch.randint(0, task.spec.vocab_size, (4, 9))
    trainer = quiet_trainer(max_steps=2, default_root_dir=tmp_path)
    before = {n: p.detach().clone() for n, p in task.model.named_parameters()}
    trainer.fit(task, DataLoader([(x[i, :-1], x[i, 1:]) for i in range(4)], batch_size=2), ckpt_path=str(path))
    assert trainer.global_step == 2  # resumed at step 1, trained one more
    assert any(not torch.equal(before[n], p) for n, p in task.model.named_parameters())
