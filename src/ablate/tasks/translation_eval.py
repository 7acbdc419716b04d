"""What ``eval.py`` does with a translation checkpoint: sacreBLEU (with its signature) on the
corpus' test or validation split, or on any source/reference files; the hypotheses go to a file."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

from omegaconf import DictConfig, OmegaConf

from ablate.config.locations import folder_problem
from ablate.data.registry import build_data_module
from ablate.data.translation_text import read_lines
from ablate.tasks.trained_data import check_evaluated_data
from ablate.tasks.translation import TranslationTask, corpus_bleu, decode_config, load_translation_checkpoint
from ablate.writes import inside


def sentences(cfg: DictConfig, task: TranslationTask) -> tuple[list[str], list[str] | None, Path]:
    """Sources, references (or None) and the default output path."""
    ckpt = Path(cfg.ckpt_path)
    if cfg.src_file:
        src = read_lines(Path(cfg.src_file))
        refs = read_lines(Path(cfg.ref_file)) if cfg.ref_file else None
        if refs is not None and len(refs) != len(src):
            raise SystemExit(f"{cfg.src_file} has {len(src)} lines but {cfg.ref_file} has {len(refs)}")
        return src, refs, Path(f"{cfg.src_file}.hyp")
    data_cfg = dict(task.hparams.get("data") or {})
    if not data_cfg:
        raise SystemExit(f"{ckpt} carries no data config: give src_file=... (and ref_file=...)")
    overrides = cast(dict[str, Any], OmegaConf.to_container(cfg.data, resolve=True))
    data_cfg.update(data_dir=cfg.paths.data_dir, cache_dir=cfg.paths.cache_dir)
    data_cfg.update(overrides)
    dm = build_data_module(data_cfg, str(ckpt))  # its _target_ is one of ablate's data modules, never imported by name
    dm.setup("test" if cfg.split == "test" else "validate")  # that split's pairs, no training pair
    check_evaluated_data(ckpt, dm, cfg.split, overrides)  # the text the checkpoint recorded, not an edited one
    # beside the checkpoint, named after it: never over the run's own translations/test.hyp
    return (
        dm.sources(cfg.split),
        dm.references(cfg.split),
        inside(ckpt.parent / f"{ckpt.stem}.{cfg.split}.hyp", ckpt.parent),
    )


def evaluate_checkpoint(cfg: DictConfig) -> None:
    """What ``eval.py`` does with a ``task=translation`` checkpoint: translate the corpus' ``split``
    (or ``src_file``), write the hypotheses, and score them with sacreBLEU when there are references."""
    task = load_translation_checkpoint(cfg.ckpt_path, cfg.device)
    decode = decode_config(task, cfg)
    src, refs, default_out = sentences(cfg, task)
    out = Path(cfg.output) if cfg.output else default_out
    problem = folder_problem(out.parent)  # before minutes of decoding, not after
    if problem:
        raise SystemExit(f"the hypotheses go to {out}, but {out.parent}: {problem}. Give output=<a writable file>")
    start = time.perf_counter()
    hyps = task.translate_text(src, decode, max_tokens=cfg.batch_tokens)
    seconds = time.perf_counter() - start
    result: dict[str, Any] = {
        "sentences": len(hyps),
        "hypotheses": str(out),
        "decode": decode.__dict__,
        "seconds": round(seconds, 1),
    }
    if refs is not None:  # the score first: a failed write of the hypotheses does not lose it
        score, signature = corpus_bleu(hyps, refs, task.task_cfg.get("bleu_tokenize", "13a"))
        result.update(bleu=round(score, 2), signature=signature)
        print(f"BLEU = {score:.2f}  {signature}", flush=True)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    except OSError as err:
        raise SystemExit(f"cannot write the hypotheses to {out}: {err.strerror or err}") from None
    print(json.dumps(result))
