"""Our pre-LN, learned-position, gelu_tanh, tied model is GPT-2: load a tiny random Hugging Face
GPT-2's weights and get the same logits."""

from __future__ import annotations

import pytest
import torch

from ablate.export.hf import load_gpt2_weights
from ablate.nn.spec import ModelSpec
from ablate.nn.transformer import TransformerLM

transformers = pytest.importorskip("transformers")

N_LAYER, N_EMBD, N_HEAD, N_POS, VOCAB = 2, 32, 4, 32, 50


def tiny_hf_gpt2():
    config = transformers.GPT2Config(
        n_layer=N_LAYER,
        n_embd=N_EMBD,
        n_head=N_HEAD,
        n_positions=N_POS,
        vocab_size=VOCAB,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=None,
        eos_token_id=None,
        attn_implementation="eager",
    )
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(config).eval()
    # HF initialises biases to 0 and LN to (1, 0): randomise everything, so a mis-mapped bias or
    # norm would show up in the logits
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
                p.copy_(1 + 0.2 * torch.randn_like(p))
            else:
                p.add_(0.2 * torch.randn_like(p))
    return hf


@pytest.mark.parametrize("attn", ["math", "sdpa"])
def test_logits_match_hf_gpt2(attn):
    hf = tiny_hf_gpt2()
    spec = ModelSpec.from_flat(
        dict(
            vocab_size=VOCAB,
            n_layers=N_LAYER,
            d_model=N_EMBD,
            n_heads=N_HEAD,
            d_ff=4 * N_EMBD,
            max_len=N_POS,
            pos="learned",
            norm="pre",
            act="gelu_tanh",
            init="gpt2",
            tie_embeddings=True,
            bias=True,
            norm_bias=True,
            attn=attn,
        )
    ).validate()
    model = TransformerLM(spec).eval()
    load_gpt2_weights(model, hf.state_dict())  # the GPT-2 mapping scripts/export_hf.py uses, reversed
    assert model.head.weight is model.tok_emb.weight
    torch.manual_seed(1)
    idx = torch.randint(0, VOCAB, (3, N_POS))
    with torch.no_grad():
        expected = hf(idx).logits
        got = model(idx)
    assert got.shape == expected.shape
    assert expected.abs().max() > 0.1  # logits are not trivially small
    assert (got - expected).abs().max().item() < 1e-4
