"""One Stack builds every model (ablate.nn.stack): the LM is one causal stack, the encoder-decoder a
bidirectional and a causal cross-attending one, the encoder classifier one bidirectional stack.
A bidirectional stack is covered here for every registered option, as the causal LM is in
test_registry_suites.py: it sees every real token of its row, in both directions, and no padding."""

from __future__ import annotations

import pytest
import torch

from ablate.nn.block import DeepNormResidual
from ablate.nn.seq2seq import EncoderDecoder
from ablate.nn.stack import Stack, StackConfig
from ablate.nn.transformer import TransformerLM
from helpers.tiny_models import ACTS, ATTN, INITS, NORM_LAYERS, PLACEMENTS, POS, tiny_spec

VARIANTS = (
    [("pos", v) for v in POS]
    + [("norm", v) for v in PLACEMENTS]
    + [("norm_layer", v) for v in NORM_LAYERS]
    + [("act", v) for v in ACTS]
    + [("init", v) for v in INITS]
    + [("attn", v) for v in ATTN]
)


def test_every_model_is_built_from_stacks():
    lm = TransformerLM(tiny_spec())
    assert isinstance(lm, Stack) and lm.config == StackConfig.decoder_only(2)
    assert all(b.attn.sublayer.causal and b.cross_attn is None for b in lm.blocks)
    s2s = EncoderDecoder(tiny_spec(encoder_layers=3))
    assert (s2s.encoder.config.causal, s2s.encoder.config.cross, s2s.encoder.config.n_layers) == (False, False, 3)
    assert (s2s.decoder.config.causal, s2s.decoder.config.cross, s2s.decoder.config.n_layers) == (True, True, 2)
    assert not any(b.attn.sublayer.causal for b in s2s.encoder.blocks)


@pytest.mark.parametrize(("axis", "value"), VARIANTS, ids=[f"{a}={v}" for a, v in VARIANTS])
def test_a_bidirectional_stack_sees_every_real_token_and_no_padding(axis: str, value: str) -> None:
    overrides = {axis: value, **({"norm": "deepnorm"} if value == "deepnet" else {})}
    torch.manual_seed(0)
    stack = Stack(tiny_spec(**overrides), StackConfig.encoder_only(2)).eval()
    x = torch.randn(2, 8, 32)
    real = torch.ones(2, 8, dtype=torch.bool)
    real[1, 5:] = False  # row 1: three padded positions
    with torch.no_grad():
        base = stack(x, key_padding=real)
        later = x.clone()
        later[0, 6] = torch.randn(32)  # a later token of row 0
        moved = stack(later, key_padding=real)
        assert (moved[0, 0] - base[0, 0]).abs().max() > 1e-4  # position 0 sees position 6: not causal
        torch.testing.assert_close(moved[1], base[1], rtol=0, atol=0)  # rows are independent
        padded = x.clone()
        padded[1, 5:] = 100 * torch.randn(3, 32)
        torch.testing.assert_close(stack(padded, key_padding=real)[1, :5], base[1, :5], rtol=0, atol=1e-6)


@pytest.mark.parametrize("n_layers", [1, 3])
def test_deepnorm_constants_follow_the_stacks_place_in_the_model(n_layers: int) -> None:
    """DeepNet's Table 1: an encoder-only model takes (2N)^(1/4), (8N)^(-1/4)."""
    stack = Stack(tiny_spec(norm="deepnorm"), StackConfig.encoder_only(n_layers))
    residuals = [m for m in stack.modules() if isinstance(m, DeepNormResidual)]
    assert len(residuals) == 2 * n_layers
    for res in residuals:
        assert res.alpha == pytest.approx((2 * n_layers) ** 0.25) and res.beta == pytest.approx((8 * n_layers) ** -0.25)
