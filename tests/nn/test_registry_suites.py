"""Generic suites over every registered option of every architecture axis.

The axes and their options come from the table of axes (``ablate.nn.axes.AXES``), so a new
axis, positional encoding, norm layer, placement, activation, init or attention implementation is
covered the moment it is registered: it builds, trains a step with finite gradients everywhere, survives a
state_dict round trip, and a causal LM built with it does not see the future. Each option is
varied alone from a default spec (pre-LN, LayerNorm, GELU, GPT-2 init, SDPA, learned positions).
"""

from __future__ import annotations

import io

import pytest
import torch

from helpers.tiny_models import OPTIONS, tiny_lm

VARIANTS = [(axis, value) for axis, values in OPTIONS.items() for value in values]
IDS = [f"{axis}={value}" for axis, value in VARIANTS]


def build(axis: str, value: str, seed: int = 0):
    overrides = {axis: value}
    if axis == "init" and value == "deepnet":
        overrides["norm"] = "deepnorm"  # a pair (config.validate)
    return tiny_lm(seed=seed, **overrides)


@pytest.mark.parametrize(("axis", "value"), VARIANTS, ids=IDS)
def test_one_training_step_has_finite_gradients_everywhere(axis: str, value: str) -> None:
    model = build(axis, value).train()
    tokens = torch.randint(0, 50, (2, 12))
    logits = model(tokens[:, :-1])
    assert logits.shape == (2, 11, 50)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), tokens[:, 1:].reshape(-1))
    loss.backward()
    missing = [
        n for n, p in model.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.isfinite().all())
    ]
    assert not missing, missing
    assert torch.isfinite(loss) and loss.item() > 0


@pytest.mark.parametrize(("axis", "value"), VARIANTS, ids=IDS)
def test_state_dict_round_trip_gives_the_same_outputs(axis: str, value: str) -> None:
    model, other = build(axis, value, seed=0), build(axis, value, seed=1)
    buffer = io.BytesIO()
    torch.save(model.state_dict(), buffer)
    buffer.seek(0)
    other.load_state_dict(torch.load(buffer, weights_only=True))
    tokens = torch.randint(0, 50, (2, 10))
    torch.testing.assert_close(other(tokens), model(tokens), rtol=0, atol=0)


@pytest.mark.parametrize(("axis", "value"), VARIANTS, ids=IDS)
def test_causal_lm_does_not_see_the_future(axis: str, value: str) -> None:
    model = build(axis, value)
    tokens = torch.randint(0, 50, (1, 12))
    changed = tokens.clone()
    changed[0, 7:] = (changed[0, 7:] + 1) % 50
    torch.testing.assert_close(model(changed)[:, :7], model(tokens)[:, :7])
    assert not torch.allclose(model(changed)[:, 7:], model(tokens)[:, 7:])
