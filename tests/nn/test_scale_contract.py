"""The scale contract, for every option of every axis under every init (a new one is covered the
moment it is registered): at the default model's size, flipping one option moves no other part's
initial scale by more than 3x, an additive position signal starts within 3x of the tokens', and
the initial loss is below 2 ln V (:mod:`ablate.nn.probe`).

A flip of ``pos``, ``norm.layer``, ``act`` or ``attn`` is compared with its axis' default under the
same init: the token signal, the residual stream entering each block, each branch's output, the
logits and each block's gradient norm. A placement (``norm=post``) normalises the stream by
design and an init sets every scale, so those two are held to the absolute bounds only.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
import torch.nn.functional as F

from ablate.nn.axes import AXES
from ablate.nn.probe import ScaleReport, measure
from ablate.nn.spec import ModelSpec
from ablate.nn.transformer import TransformerLM
from helpers.tiny_models import OPTIONS

DEFAULT_MODEL = dict(vocab_size=65, n_layers=4, d_model=128, n_heads=4, d_ff=512, max_len=64)  # conf/model/small.yaml
FACTOR = 3.0
FLIPPED = ("pos", "norm_layer", "act", "attn")  # held to the other parts' scales
DEFAULTS = {axis.name: axis.default for axis in AXES}
# Known pairings, each a finding the probe's header line or this table states, not a contract:
KNOWN = {
    # GPT-2's N(0, 0.02) is 0.18 d^-1/2 at d=128: the GLU product is quadratic there, its branch ~5x
    # smaller than GELU's. Why the default init is xavier (issue 50); nanoGPT's recipe keeps gpt2.
    ("gpt2", "act", "swiglu"),
    ("gpt2", "act", "geglu"),
    ("gpt2", "act", "reglu"),
    # DyT's output is tanh(alpha_0 z), RMS 0.44 where LayerNorm's is 1 (the paper's gamma = 1): its
    # blocks' gradients come out 3.2x smaller at GPT-2's scale (3.0x under xavier), which AdamW's
    # per-parameter normalisation absorbs; its branches and logits stay within 3x.
    ("gpt2", "norm_layer", "dyt"),
}
# DeepNorm's alpha-scaled identity path and a tied head: each position predicts its own token, an
# initial loss of 8-11 nats at V=65 (the probe's header line says so). DeepNet's own setting is an
# encoder-decoder; only this warning is expected of it.
EXPECTED_WARNING = {"deepnet": "initial loss"}


def _report(init: str, axis: str, option: str) -> ScaleReport:
    options: dict[str, Any] = {"init": {"name": init}, axis: {"name": option}}
    if init == "deepnet" or option == "deepnorm":
        options |= {"init": {"name": "deepnet"}, "norm": {"name": "deepnorm"}}
    spec = ModelSpec(**DEFAULT_MODEL, options=options).validate()
    torch.manual_seed(0)
    model = TransformerLM(spec)
    tokens = torch.randint(spec.vocab_size, (4, 64), generator=torch.Generator().manual_seed(1))
    return measure(model, lambda: F.cross_entropy(model(tokens).flatten(0, 1), tokens.roll(-1, 1).flatten()), 65)


def _geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def _scales(report: ScaleReport) -> dict[str, float]:
    """Each part's scale: the token signal, the logits, and per role the geometric mean over the blocks."""
    parts = {"stream": report.stream_rms, **report.branch_rms, "grad": report.grad_norms}
    return {"token": report.token_rms, "logits": report.logit_std} | {k: _geomean(v) for k, v in parts.items()}


def moved_beyond(flipped: ScaleReport, baseline: ScaleReport, factor: float = FACTOR) -> list[str]:
    """The parts whose scale the flip moved by more than ``factor``, either way."""
    a, b = _scales(flipped), _scales(baseline)
    return [f"{k} x{a[k] / b[k]:.3g}" for k in b if not 1 / factor <= a[k] / b[k] <= factor]


CASES = [
    pytest.param(init, axis, option, id=f"init={init}-{axis}={option}")
    for init in OPTIONS["init"]
    for axis in OPTIONS
    for option in OPTIONS[axis]
    if axis != "init" or option == init
    if not (option == "deepnorm" and init != "deepnet")  # a pair (the spec refuses one without the other)
]


@pytest.mark.parametrize(("init", "axis", "option"), CASES)
def test_a_flip_keeps_every_other_part_at_its_scale(init: str, axis: str, option: str) -> None:
    report = _report(init, axis, option)
    problems = [w for w in report.warnings() if not w.startswith(EXPECTED_WARNING.get(init, "\0"))]
    if axis in FLIPPED and option != DEFAULTS[axis]:
        problems += moved_beyond(report, _report(init, axis, DEFAULTS[axis]))
    if (init, axis, option) in KNOWN:
        assert problems, f"{init}/{axis}={option} is listed as a known pairing but keeps the contract: unlist it"
        return
    assert problems == []


def test_the_contract_catches_a_sinusoid_that_drowns_the_tokens() -> None:
    """The defect of issue 50: GPT-2's tokens (RMS 0.02) and the unit sinusoid (RMS 0.71)."""
    fair = _report("gpt2", "pos", "sinusoidal")
    assert fair.position_to_token is not None and 0.6 < fair.position_to_token < 0.8
    spec = ModelSpec(**DEFAULT_MODEL, options={"init": {"name": "gpt2"}, "pos": {"name": "sinusoidal"}}).validate()
    model = TransformerLM(spec)
    model.pos.amplitude = 1.0  # the table as Vaswani et al. write it, beside N(0, 0.02) tokens
    tokens = torch.randint(65, (4, 64), generator=torch.Generator().manual_seed(1))
    drowned = measure(model, lambda: F.cross_entropy(model(tokens).flatten(0, 1), tokens.roll(-1, 1).flatten()), 65)
    assert drowned.position_to_token is not None and drowned.position_to_token > 30
    assert any("position/token" in w for w in drowned.warnings())
    assert any(k.startswith("grad") for k in moved_beyond(drowned, _report("gpt2", "pos", "learned")))


def test_dyt_alpha_follows_its_input_scale() -> None:
    """Each DyT site starts with alpha * RMS(input) = alpha_init (the paper's alpha_0 for unit inputs):
    at GPT-2's tiny residual stream, alpha_0 alone would leave the logits ~60x smaller than LayerNorm's."""
    dyt, layernorm = _report("gpt2", "norm_layer", "dyt"), _report("gpt2", "norm_layer", "layernorm")
    assert 1 / FACTOR < dyt.logit_std / layernorm.logit_std < FACTOR
    spec = ModelSpec(**DEFAULT_MODEL, options={"init": {"name": "gpt2"}, "norm_layer": {"name": "dyt"}}).validate()
    model = TransformerLM(spec)
    first = model.blocks[0].attn.norm
    stream = model.pos.embed(model.tok_emb(torch.randint(65, (4, 64))))
    assert float(first.alpha.detach()) * float(stream.detach().pow(2).mean().sqrt()) == pytest.approx(0.5, rel=0.1)


def test_pytorch_init_starts_near_uniform_with_a_tied_head() -> None:
    """N(0, 1) tokens tied to the head gave an initial loss of 112.7 nats; the table now takes the
    head's own default scale (nn.Linear's)."""
    report = _report("pytorch", "init", "pytorch")
    assert report.loss < 2 * math.log(65)
    assert report.token_rms == pytest.approx((3 * 128) ** -0.5, rel=0.05)


def test_a_spec_stored_before_the_contract_builds_the_model_it_was_trained_as() -> None:
    """A checkpoint's spec without ``scale_contract`` (written before it) keeps the unit sinusoid and
    the unscaled learned table; one written now stores the contract and rebuilds with it."""
    new = ModelSpec(**DEFAULT_MODEL, scale_embeddings=True, options={"pos": {"name": "sinusoidal"}})
    assert TransformerLM(new).pos.amplitude == pytest.approx(new.token_rms)
    old = {k: v for k, v in new.as_dict().items() if k != "scale_contract"}
    assert TransformerLM(ModelSpec.from_dict(old)).pos.amplitude == 1.0
    assert (
        ModelSpec.from_dict(old).contract_changes_model()
        and not ModelSpec.from_dict(new.as_dict()).contract_changes_model()
    )
    learned = {**old, "options": {**old["options"], "pos": {"name": "learned"}}}
    assert TransformerLM(ModelSpec.from_dict(learned)).pos.embed_scale == 1.0
    assert TransformerLM(ModelSpec.from_dict({**learned, "scale_contract": True})).pos.embed_scale == 128**0.5


def test_resuming_a_run_the_contract_would_change_is_refused() -> None:
    from ablate.errors import ConfigError
    from ablate.run.plan import require_same_scales

    spec = ModelSpec(**DEFAULT_MODEL, options={"pos": {"name": "sinusoidal"}}).as_dict()
    old = {k: v for k, v in spec.items() if k != "scale_contract"}
    require_same_scales({"hyper_parameters": {"spec": spec}}, "new.ckpt")
    require_same_scales(
        {"hyper_parameters": {"spec": {**old, "options": {**old["options"], "pos": {"name": "rope"}}}}}, "rope.ckpt"
    )
    with pytest.raises(ConfigError, match="before the scale contract"):
        require_same_scales({"hyper_parameters": {"spec": old}}, "old.ckpt")
