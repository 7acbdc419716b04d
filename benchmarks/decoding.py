"""Decoding throughput of a translation model: sentences per second, greedy and beam search.

    python scripts/benchmark_decoding.py                          # experiment=multi30k_small's model, random weights
    python scripts/benchmark_decoding.py --ckpt logs/runs/<run>/checkpoints/best.ckpt   # a trained model
    python scripts/benchmark_decoding.py --beams 1,5 --sentences 1000 --device cuda
    python scripts/benchmark_decoding.py --json -- data.max_train_pairs=2000 model.d_model=64   # overrides (tests)

Translates the first ``--sentences`` source sentences of the test split of the composed experiment's
corpus (``experiment=multi30k_small`` and the overrides after ``--``; for a checkpoint of another
corpus, name it there: ``-- data=iwslt14``)
with each beam size of ``--beams``, as the task's test does (``TranslationTask.translate_text``:
sentences batched by length, ``--max-tokens`` source tokens a batch; on a GPU under bf16 autocast,
as ``trainer=gpu`` runs it), after one untimed batch, and prints sentences/s and generated tokens/s.
Random weights are the worst case of a model's speed: their hypotheses run to the length limit
(``decode.max_len_a``/``max_len_b``), where a trained model's mostly end earlier.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from typing import Any

import torch

from ablate.tasks.decoding import DecodeConfig


def build(ckpt: str | None, overrides: list[str]) -> tuple[Any, list[str], DecodeConfig]:
    """The task (model and tokenizer), the test split's source sentences and the decode settings."""
    from hydra import compose, initialize_config_dir

    import ablate  # noqa: F401  (registers the config resolvers)
    from ablate.cli import conf_dir
    from ablate.run.assembly import build_datamodule, build_model
    from ablate.run.config import RunConfig
    from ablate.run.plan import preflight

    with initialize_config_dir(config_dir=str(conf_dir()), version_base="1.3"):
        composed = compose("train", overrides=["experiment=multi30k_small", *overrides])
    cfg = RunConfig.from_hydra(composed)
    if ckpt is not None:  # its model, its tokenizer, its decode settings; the composed corpus's sentences
        from ablate.tasks.checkpoints import load_task_checkpoint

        task: Any = load_task_checkpoint(ckpt, expected="translation", script="scripts/benchmark_decoding.py")
        return task, build_datamodule(cfg).sources("test"), task.decode_cfg
    checked = preflight(cfg)
    datamodule = build_datamodule(cfg)
    task = build_model(cfg, datamodule, checked.max_len)
    return task, datamodule.sources("test"), DecodeConfig.from_mapping(composed.get("decode"))


def measure(
    task: Any, sentences: list[str], beam: int, decode: DecodeConfig, max_tokens: int, bf16: bool
) -> dict[str, Any]:
    """Translate ``sentences`` with beam ``beam``: wall time, sentences/s, generated tokens/s."""
    cfg = DecodeConfig(**{**decode.__dict__, "beam_size": beam})
    device = next(task.model.parameters()).device
    autocast = torch.autocast("cuda", torch.bfloat16) if bf16 and device.type == "cuda" else contextlib.nullcontext()
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    with autocast:
        task.translate_text(sentences[: min(len(sentences), 16)], cfg, max_tokens)  # untimed: kernels, allocator
        sync()
        start = time.perf_counter()
        out = task.translate_text(sentences, cfg, max_tokens)
        sync()
    seconds = time.perf_counter() - start
    tokens = sum(len(task.tokenizer.encode(line)) for line in out)
    return {
        "beam": beam,
        "sentences": len(sentences),
        "seconds": seconds,
        "sentences_per_sec": len(sentences) / seconds,
        "generated_tokens_per_sec": tokens / seconds,
        "length_penalty": cfg.length_penalty,
    }


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ckpt", help="a translation checkpoint (default: the experiment's model, random weights)")
    parser.add_argument("--beams", default="1,5", help="beam sizes, comma-separated (1: greedy)")
    parser.add_argument("--sentences", type=int, default=1000, help="source sentences of the test split")
    parser.add_argument("--max-tokens", type=int, default=8000, help="source tokens per batch (data.eval_max_tokens)")
    parser.add_argument("--device", default="auto", help="auto (cuda when there is one), cpu or cuda")
    parser.add_argument("--no-bf16", action="store_true", help="fp32 on a GPU too (default there: bf16 autocast)")
    parser.add_argument("--json", action="store_true", help="one JSON line per beam size")
    parser.add_argument("overrides", nargs="*", help="config overrides (after --), as train.py takes them")
    args = parser.parse_args(argv)
    device = torch.device(("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device)
    task, sentences, decode = build(args.ckpt, args.overrides)
    task.to(device).eval()
    sentences = sentences[: args.sentences]
    results = []
    for beam in (int(b) for b in args.beams.split(",")):
        result = {**measure(task, sentences, beam, decode, args.max_tokens, not args.no_bf16), "device": str(device)}
        results.append(result)
        if args.json:
            print(json.dumps(result), flush=True)
        else:
            print(
                f"beam {beam}: {result['sentences']} sentences in {result['seconds']:.2f} s on {device}: "
                f"{result['sentences_per_sec']:.1f} sentences/s, {result['generated_tokens_per_sec']:,.0f} generated tokens/s",
                flush=True,
            )
    return results
