"""The encoder-decoder model: what each attention may see, padding, tying, DeepNorm constants, and
equivalence with PyTorch's own Transformer layers (an independent implementation)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ablate.callbacks.grad_norm import group_name
from ablate.nn.block import DeepNormResidual, deepnorm_constants
from ablate.nn.seq2seq import EncoderDecoder
from ablate.nn.spec import ModelSpec
from helpers.tiny_models import ACTS, ATTN, INITS, NORM_LAYERS, PLACEMENTS, POS, tiny_spec

V, PAD = 40, 0
TINY_S2S = dict(vocab_size=V, n_layers=2, encoder_layers=2, d_model=32, n_heads=4, d_ff=64, max_len=32)


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def s2s_spec(**overrides) -> ModelSpec:
    return tiny_spec(**{**TINY_S2S, **overrides})  # TINY_S2S replaces every key of the LM's TINY


def tiny_s2s(seed: int = 0, **overrides) -> EncoderDecoder:
    torch.manual_seed(seed)
    return EncoderDecoder(s2s_spec(**overrides), pad_id=PAD).eval()


def batch(seed: int = 1, b: int = 3, s: int = 9, t: int = 7):
    """Right-padded sources (lengths s, s-3, 4) and targets without padding."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(3, V, (b, s), generator=g)
    src[1, s - 3 :] = PAD
    src[2, 4:] = PAD
    tgt = torch.randint(3, V, (b, t), generator=g)
    return src, src != PAD, tgt


# ----------------------------------------------------------------------------------------------
# what attention sees


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("pos", POS)
def test_decoder_never_sees_future_targets(pos, attn):
    model = tiny_s2s(pos=pos, attn=attn, init="xavier")
    src, mask, tgt = batch()
    with torch.no_grad():
        base = model(src, tgt, mask)
        for t in (0, 3, 5):
            perturbed = tgt.clone()
            perturbed[:, t + 1 :] = (tgt[:, t + 1 :] + 1 + torch.randint(0, V - 4, tgt[:, t + 1 :].shape)) % (V - 3) + 3
            out = model(src, perturbed, mask)
            torch.testing.assert_close(
                out[:, : t + 1],
                base[:, : t + 1],
                atol=1e-6,
                rtol=0,
                msg=f"pos={pos} attn={attn}: target logits at <= {t} saw later targets",
            )
            assert (out[:, t + 1 :] - base[:, t + 1 :]).abs().max() > 1e-3


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("pos", POS)
def test_cross_attention_sees_every_source_position(pos, attn):
    """Changing any one real source token changes the logits at every target position, the
    first included (the encoder is bidirectional and cross-attention is not causal)."""
    model = tiny_s2s(pos=pos, attn=attn, init="xavier")
    src, mask, tgt = batch()
    with torch.no_grad():
        base = model(src, tgt, mask)
        for j in range(int(mask[0].sum())):
            perturbed = src.clone()
            perturbed[0, j] = 3 + (src[0, j] - 3 + 7) % (V - 3)
            diff = (model(src=perturbed, tgt=tgt, src_mask=mask) - base).abs().amax(dim=-1)
            assert (diff[0] > 1e-5).all(), (
                f"pos={pos} attn={attn}: source position {j} invisible at some target position"
            )
            torch.testing.assert_close(
                diff[1:], torch.zeros_like(diff[1:]), atol=1e-6, rtol=0
            )  # other sentences untouched
        # the same at the encoder output itself: one memory position, every target position
        memory = model.encode(src, mask)
        base = model.decode(tgt, memory, mask)
        for i in range(src.size(0)):
            for j in range(int(mask[i].sum())):
                moved = memory.clone()
                moved[i, j] += 1.0
                diff = (model.decode(tgt, moved, mask) - base).abs().amax(dim=-1)
                assert (diff[i] > 1e-5).all(), f"memory position {j} of sentence {i} invisible at some target position"


def test_cross_attention_weights_cover_source_and_skip_padding():
    model = tiny_s2s(attn="math", pos="sinusoidal")
    src, mask, tgt = batch()
    kernels = [blk.cross_attn.sublayer.kernel for blk in model.decoder.blocks]
    for k in kernels:
        k.keep_weights = True
    with torch.no_grad():
        model(src, tgt, mask)
    for k in kernels:
        w = k.weights  # (B, H, T, S)
        real = mask[:, None, None, :].expand_as(w)
        assert (w[real] > 0).all()
        assert (w[~real] == 0).all()


# ----------------------------------------------------------------------------------------------
# padding changes nothing


@pytest.mark.parametrize("attn", ATTN)
@pytest.mark.parametrize("pos", POS)
@pytest.mark.parametrize("norm", ["pre", "post"])
def test_padding_changes_nothing(pos, attn, norm):
    model = tiny_s2s(pos=pos, attn=attn, norm=norm, init="xavier")
    src, mask, tgt = batch()
    tgt_pad = tgt.clone()
    tgt_pad[2, 4:] = PAD  # sentence 2 has a 4-token target
    with torch.no_grad():
        base = model(src, tgt_pad, mask)
        # 1. whatever the padded source positions hold (the mask says they are padding)
        noisy_src = src.masked_fill(~mask, 0) + (~mask) * torch.randint(3, V, src.shape)
        assert not torch.equal(noisy_src, src)
        torch.testing.assert_close(model(noisy_src, tgt_pad, mask), base, atol=1e-6, rtol=0)
        # 2. whatever the padded target positions hold, the real positions' logits are the same
        noisy_tgt = tgt_pad.clone()
        noisy_tgt[2, 4:] = torch.randint(3, V, (tgt.size(1) - 4,))
        torch.testing.assert_close(model(src, noisy_tgt, mask)[2, :4], base[2, :4], atol=1e-6, rtol=0)
        # 3. a sentence alone, unpadded, gives what it gives inside the padded batch
        for i in range(src.size(0)):
            n = int(mask[i].sum())
            alone = model(src[i : i + 1, :n], tgt_pad[i : i + 1, :4])
            torch.testing.assert_close(alone[0], base[i, :4], atol=2e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# options, tying, DeepNorm


@pytest.mark.parametrize("norm", PLACEMENTS)
def test_every_placement_builds_and_has_final_norms_where_needed(norm):
    model = tiny_s2s(norm=norm)
    src, mask, tgt = batch()
    out = model(src, tgt, mask)
    assert out.shape == (3, tgt.size(1), V) and torch.isfinite(out).all()
    needs_final = norm in ("pre", "sandwich")
    for stack in (model.encoder, model.decoder):
        assert isinstance(stack.final_norm, nn.LayerNorm) == needs_final
    # every decoder layer has cross-attention, no encoder layer does
    assert all(b.cross_attn is not None for b in model.decoder.blocks)
    assert all(b.cross_attn is None for b in model.encoder.blocks)


def test_deepnorm_uses_encoder_decoder_constants():
    model = tiny_s2s(norm="deepnorm", encoder_layers=3, n_layers=2)
    expected = deepnorm_constants(3, 2)
    assert expected["encoder"][0] == pytest.approx(0.81 * (3**4 * 2) ** (1 / 16))
    assert expected["decoder"][0] == pytest.approx((3 * 2) ** 0.25)
    for stack, key in ((model.encoder, "encoder"), (model.decoder, "decoder")):
        residuals = [m for m in stack.modules() if isinstance(m, DeepNormResidual)]
        assert residuals and all((r.alpha, r.beta) == pytest.approx(expected[key]) for r in residuals)


def test_tying_modes():
    three = tiny_s2s(tie_embeddings=True)
    assert three.tgt_emb is None and three.head.weight is three.tok_emb.weight
    dec = tiny_s2s(tie_embeddings="decoder")
    assert dec.head.weight is dec.tgt_emb.weight and dec.tok_emb.weight is not dec.tgt_emb.weight
    none = tiny_s2s(tie_embeddings=False)
    assert none.head.weight is not none.tgt_emb.weight and none.head.weight is not none.tok_emb.weight
    d = TINY_S2S["d_model"]
    assert dec.num_params() - three.num_params() == V * d
    assert none.num_params() - three.num_params() == 2 * V * d


def test_embeddings_scaled_by_sqrt_d():
    plain, scaled = tiny_s2s(scale_embeddings=False), tiny_s2s(scale_embeddings=True)
    idx = torch.tensor([[5, 6]])
    torch.testing.assert_close(scaled.tok_emb(idx), plain.tok_emb(idx) * TINY_S2S["d_model"] ** 0.5)


def test_grad_norm_groups_name_both_stacks():
    model = tiny_s2s(tie_embeddings=False)
    names = {group_name("model." + n) for n, _ in model.named_parameters()}
    for expected in (
        "embed",
        "tgt_emb",
        "head",
        "enc_layer_00/attn",
        "enc_layer_01/ffn_norm",
        "dec_layer_01/cross_attn",
        "dec_layer_00/cross_attn_norm",
        "dec_layer_00/attn",
    ):
        assert expected in names, (expected, sorted(names))


# ----------------------------------------------------------------------------------------------
# equivalence with torch.nn.Transformer*Layer


def _load_encoder_layer(ours, ref: nn.TransformerEncoderLayer) -> None:
    with torch.no_grad():
        ours.attn.sublayer.qkv.weight.copy_(ref.self_attn.in_proj_weight)
        ours.attn.sublayer.qkv.bias.copy_(ref.self_attn.in_proj_bias)
        ours.attn.sublayer.out_proj.load_state_dict(ref.self_attn.out_proj.state_dict())
        ours.ffn.sublayer.fc_in.load_state_dict(ref.linear1.state_dict())
        ours.ffn.sublayer.fc_out.load_state_dict(ref.linear2.state_dict())
        ours.attn.norm.load_state_dict(ref.norm1.state_dict())
        ours.ffn.norm.load_state_dict(ref.norm2.state_dict())


def _load_decoder_layer(ours, ref: nn.TransformerDecoderLayer) -> None:
    d = ref.self_attn.embed_dim
    with torch.no_grad():
        ours.attn.sublayer.qkv.weight.copy_(ref.self_attn.in_proj_weight)
        ours.attn.sublayer.qkv.bias.copy_(ref.self_attn.in_proj_bias)
        ours.attn.sublayer.out_proj.load_state_dict(ref.self_attn.out_proj.state_dict())
        cross = ours.cross_attn.sublayer
        cross.q_proj.weight.copy_(ref.multihead_attn.in_proj_weight[:d])
        cross.q_proj.bias.copy_(ref.multihead_attn.in_proj_bias[:d])
        cross.kv.weight.copy_(ref.multihead_attn.in_proj_weight[d:])
        cross.kv.bias.copy_(ref.multihead_attn.in_proj_bias[d:])
        cross.out_proj.load_state_dict(ref.multihead_attn.out_proj.state_dict())
        ours.ffn.sublayer.fc_in.load_state_dict(ref.linear1.state_dict())
        ours.ffn.sublayer.fc_out.load_state_dict(ref.linear2.state_dict())
        ours.attn.norm.load_state_dict(ref.norm1.state_dict())
        ours.cross_attn.norm.load_state_dict(ref.norm2.state_dict())
        ours.ffn.norm.load_state_dict(ref.norm3.state_dict())


def _reference(spec: ModelSpec, norm_first: bool) -> tuple[nn.TransformerEncoder, nn.TransformerDecoder]:
    kw = dict(
        d_model=spec.d_model,
        nhead=spec.n_heads,
        dim_feedforward=spec.d_ff,
        dropout=0.0,
        activation="relu",
        batch_first=True,
        norm_first=norm_first,
    )
    enc_norm = nn.LayerNorm(spec.d_model) if norm_first else None
    dec_norm = nn.LayerNorm(spec.d_model) if norm_first else None
    torch.manual_seed(123)
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(**kw), spec.encoder_layers, norm=enc_norm, enable_nested_tensor=False
    )
    decoder = nn.TransformerDecoder(nn.TransformerDecoderLayer(**kw), spec.n_layers, norm=dec_norm)
    for p in [*encoder.parameters(), *decoder.parameters()]:  # non-trivial norms and biases too
        with torch.no_grad():
            p.add_(0.1 * torch.randn_like(p))
    return encoder.eval(), decoder.eval()


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_matches_torch_transformer_layers(norm):
    """norm=post act=relu pos=sinusoidal is torch's norm_first=False; norm=pre its norm_first=True
    (with the stacks' final LayerNorms, which torch adds as TransformerEncoder/Decoder(norm=...)).
    Weights of the reference are loaded into ours; logits must agree."""
    model = tiny_s2s(norm=norm, act="relu", pos="sinusoidal", init="xavier", scale_embeddings=True, tie_embeddings=True)
    encoder, decoder = _reference(model.spec, norm_first=norm == "pre")
    for ours, ref in zip(model.encoder.blocks, encoder.layers):
        _load_encoder_layer(ours, ref)
    for ours, ref in zip(model.decoder.blocks, decoder.layers):
        _load_decoder_layer(ours, ref)
    if norm == "pre":
        model.encoder.final_norm.load_state_dict(encoder.norm.state_dict())
        model.decoder.final_norm.load_state_dict(decoder.norm.state_dict())

    src, mask, tgt = batch()
    with torch.no_grad():
        ours = model(src, tgt, mask)
        # the reference gets the same embedded inputs (scaled embedding + sinusoid; both tested elsewhere)
        x_src = model.encoder.pos.embed(model.tok_emb(src))
        x_tgt = model.decoder.pos.embed(model.tok_emb(tgt))
        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        memory = encoder(x_src, src_key_padding_mask=~mask)
        hidden = decoder(x_tgt, memory, tgt_mask=causal, memory_key_padding_mask=~mask)
        expected = model.head(hidden)
    torch.testing.assert_close(ours, expected, atol=1e-4, rtol=1e-4)
    # the layers individually, too (one encoder layer, one decoder layer)
    with torch.no_grad():
        x = torch.randn(3, 9, model.spec.d_model)
        ours_enc = model.encoder.blocks[0](x, model.encoder.pos, key_padding=mask)
        ref_enc = encoder.layers[0](x, src_key_padding_mask=~mask)
        torch.testing.assert_close(ours_enc[mask], ref_enc[mask], atol=1e-5, rtol=1e-5)
        y = torch.randn(3, 7, model.spec.d_model)
        ours_dec = model.decoder.blocks[0](y, model.decoder.pos, memory=x, memory_padding=mask)
        ref_dec = decoder.layers[0](y, x, tgt_mask=causal, memory_key_padding_mask=~mask)
        torch.testing.assert_close(ours_dec, ref_dec, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "option",
    [{"act": a} for a in ACTS]
    + [{"init": i} | ({"norm": "deepnorm"} if i == "deepnet" else {}) for i in INITS]  # a pair (config.validate)
    + [{"norm_layer": n} for n in NORM_LAYERS]
    + [{"n_kv_heads": 1}, {"n_kv_heads": 2}],
    ids=lambda o: "+".join(f"{k}={v}" for k, v in o.items()),
)
def test_every_option_reaches_both_stacks_and_trains(option):
    """The option (every one of the table's acts, inits and norm layers) is built into the encoder
    and the decoder alike; a few steps lower the loss."""
    model = tiny_s2s(**option).train()
    enc_ffn, dec_ffn = model.encoder.blocks[0].ffn.sublayer, model.decoder.blocks[0].ffn.sublayer
    assert type(enc_ffn) is type(dec_ffn) and enc_ffn.fc_in.weight.shape == dec_ffn.fc_in.weight.shape
    assert type(model.encoder.blocks[0].attn.norm) is type(model.decoder.blocks[0].cross_attn.norm)
    src, mask, tgt = batch()
    target = torch.roll(tgt, -1, dims=1)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(6):
        loss = torch.nn.functional.cross_entropy(model(src, tgt, mask).flatten(0, 1), target.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]
