"""Checkpoints are the same with model.compile on or off (issue 17.5): no `_orig_mod` or duplicate keys."""

from __future__ import annotations

import torch

from ablate.nn.spec import ModelSpec
from ablate.tasks.lm import LanguageModelTask

SPEC = ModelSpec(vocab_size=11, n_layers=1, d_model=16, n_heads=2, d_ff=32, max_len=8).as_dict()
OPTIM = {"name": "adamw", "lr": 1e-3, "weight_decay": 0.0}


def test_state_dict_keys_do_not_depend_on_compile():
    plain, compiled = LanguageModelTask(SPEC, OPTIM, compile=False), LanguageModelTask(SPEC, OPTIM, compile=True)
    keys = list(plain.state_dict())
    assert keys == list(compiled.state_dict())  # torch.compile is lazy: nothing is compiled here
    assert all(k.startswith("model.") for k in keys)  # the weights once, under model.*


def test_a_checkpoint_of_a_compiled_run_loads_into_an_uncompiled_model_and_back():
    source = LanguageModelTask(SPEC, OPTIM, compile=False)
    # what earlier versions saved for a compiled run: the weights again under forward_fn._orig_mod.*
    old = {**source.state_dict(), **{f"forward_fn._orig_mod.{k[6:]}": v for k, v in source.state_dict().items()}}
    for compile in (False, True):
        target = LanguageModelTask(SPEC, OPTIM, compile=compile)
        checkpoint = {"state_dict": dict(old)}
        target.on_load_checkpoint(checkpoint)
        target.load_state_dict(checkpoint["state_dict"], strict=True)
        x = torch.randint(0, 11, (2, 8))
        assert torch.equal(target.model(x), source.model(x))
