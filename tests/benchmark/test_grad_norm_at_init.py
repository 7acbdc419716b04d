"""experiments/xiong2020_prenorm/grad_norm_at_init.py (:mod:`experiments.xiong2020_prenorm.grad_norm_at_init`; Xiong et al. 2020, Fig. 3): its per-layer values equal a hand
computation, and at a small size it shows the paper's effect: at initialisation the FFN gradient
norm grows with the layer index in Post-LN and does not in Pre-LN, in the encoder and the decoder.

Size: 6+6 layers, d=32, FFN 64, no dropout, 4 batches x 2 seeds of <= 512 tokens (Multi30k, a
500-entry BPE on 2,000 pairs). The effect needs depth; at this size it holds with a clear margin
(log-slope per layer ~ +0.1 to +0.3 for Post-LN, <= 0 for Pre-LN)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from hydra.utils import instantiate

from ablate.run.assembly import build_model
from ablate.run.config import RunConfig
from ablate.run.plan import check_config
from experiments.xiong2020_prenorm import grad_norm_at_init as gn
from helpers.runs import SHARED_DATA

MULTI30K = SHARED_DATA / "multi30k"
LAYERS = 6


def overrides(cache: Path) -> list[str]:
    return [
        "task=translation",
        "data=multi30k",
        f"model.encoder_layers={LAYERS}",
        f"model.decoder_layers={LAYERS}",
        "model.d_model=32",
        "model.n_heads=4",
        "model.d_ff=64",
        "model.dropout=0",
        "data.vocab_size=500",
        "data.max_train_pairs=2000",
        "data.max_eval_pairs=50",
        "data.max_tokens=512",
        f"paths.data_dir={SHARED_DATA}",
        f"paths.cache_dir={cache}",
    ]


@pytest.fixture(scope="module")
def measured(tmp_path_factory) -> tuple[dict, Path, list[str]]:
    if not (MULTI30K / "train.de.gz").exists():
        pytest.skip(f"Multi30k is not at {MULTI30K}")
    tmp = tmp_path_factory.mktemp("gn")
    args = overrides(tmp / "cache")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = gn.main(
            [
                *args,
                "norm=post,pre",
                "--batches",
                "4",
                "--repeats",
                "2",
                "--slots",
                "ffn",
                "attn",
                "--out",
                str(tmp / "out"),
            ]
        )
    finally:
        torch.set_num_threads(threads)
    return result, tmp / "out", args


def test_writes_json_and_png(measured):
    result, out, _ = measured
    saved = json.loads((out / "grad_norm_at_init.json").read_text())
    assert saved["norms"] == ["post", "pre"] and saved["batches"] == 4 and saved["seeds"] == [1337, 1338]
    stats = saved["summary"]["post"]["dec_layer_05/ffn"]
    assert stats["n"] == 8 and stats["std"] > 0  # 4 batches x 2 seeds, and they differ
    assert len(saved["per_batch"]["pre"]) == 2 and len(saved["per_batch"]["pre"][0]) == 4
    png = (out / "grad_norm_at_init.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_values_equal_a_hand_computation(measured):
    """Batch 2 of seed 0, Post-LN: rebuild the model with that seed, compute the label-smoothed
    loss with F.cross_entropy and each layer's norm over its parameters by name. The second batch
    also catches gradients accumulated across batches."""
    result, _, args = measured
    cfg = gn.compose_config(args, "post")
    dm = instantiate(cfg.data, seed=cfg.seed)
    dm.setup("fit")
    batch = gn.first_batches(dm, 2)[1]
    L.seed_everything(cfg.seed)
    task = build_model(RunConfig.of(cfg), dm, check_config(cfg).max_len)  # as train.py builds it
    src, tgt_in, tgt_out = batch[0], batch[1], batch[2]
    logits = task.model(src, tgt_in, src != 0)
    F.cross_entropy(logits.flatten(0, 1), tgt_out.flatten(), ignore_index=0, label_smoothing=0.1).backward()
    params = dict(task.named_parameters())
    got = result["per_batch"]["post"][0][1]
    for stack, short in (("encoder", "enc"), ("decoder", "dec")):
        for i in range(LAYERS):
            for slot in ("ffn", "attn") + (("cross_attn",) if stack == "decoder" else ()):
                prefix = f"model.{stack}.blocks.{i}.{slot}.sublayer."
                grads = [p.grad for name, p in params.items() if name.startswith(prefix)]
                assert grads, prefix
                expected = math.sqrt(sum(float(g.pow(2).sum()) for g in grads))
                assert got[f"{short}_layer_{i:02d}/{slot}"] == pytest.approx(expected, rel=1e-4), prefix


def log_slope(values: list[float]) -> float:
    """Least-squares slope of log(value) against the layer index: growth factor per layer."""
    x = range(len(values))
    y = [math.log(v) for v in values]
    mx, my = sum(x) / len(y), sum(y) / len(y)
    return sum((a - mx) * (b - my) for a, b in zip(x, y)) / sum((a - mx) ** 2 for a in x)


def test_post_ln_grows_with_depth_and_pre_ln_does_not(measured):
    result, _, _ = measured
    for stack in ("enc", "dec"):
        _, post, _ = gn.layer_curve(result["summary"]["post"], stack, "ffn")
        _, pre, _ = gn.layer_curve(result["summary"]["pre"], stack, "ffn")
        assert len(post) == len(pre) == LAYERS
        assert log_slope(post) > 0.05, (stack, post)  # Post-LN: larger gradients near the output
        assert post[-1] > 1.5 * post[0], (stack, post)
        assert log_slope(pre) < 0.02, (stack, pre)  # Pre-LN: flat (here slightly decreasing)
        assert pre[-1] < 1.2 * pre[0], (stack, pre)


def test_norm_list_from_override_or_flag():
    args, rest = gn.parse_args(["task=translation", "norm=post,pre", "--batches", "3"])
    assert args.norms == ["post", "pre"] and rest == ["task=translation"] and args.batches == 3
    args, rest = gn.parse_args(["--norms", "pre", "sandwich", "model.d_model=64"])
    assert args.norms == ["pre", "sandwich"] and rest == ["model.d_model=64"]
    with pytest.raises(SystemExit):
        gn.parse_args(["norm=post,pre", "--norms", "pre"])
    with pytest.raises(SystemExit):
        gn.parse_args(["--batches", "0"])


def test_language_model_has_one_stack(data_dir, tmp_path):
    """task=lm: groups layer_XX/..., one curve per norm (the decoder-only panel)."""
    overrides = [
        "model=tiny",
        "model.n_layers=3",
        "data.seq_len=16",
        "data.batch_size=2",
        f"paths.data_dir={data_dir}",
        f"paths.cache_dir={tmp_path / 'cache'}",
    ]
    result = gn.run(["post", "pre"], overrides, batches=1, repeats=1)
    for norm in ("post", "pre"):
        assert gn.stacks_of(result["summary"][norm]) == [""]
        x, mean, _ = gn.layer_curve(result["summary"][norm], "", "ffn")
        assert x == [1, 2, 3] and all(m > 0 for m in mean)
