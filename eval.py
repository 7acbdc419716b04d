"""Evaluate a checkpoint; what is measured depends on the task it was trained for.

Translation: sacreBLEU (with its signature) on the corpus' test or validation split, or on any
source/reference files; the hypotheses are written to a file.

    python eval.py ckpt_path=logs/runs/<run>/checkpoints/best.ckpt
    python eval.py ckpt_path=... split=val beam_size=4
    python eval.py ckpt_path=... src_file=test.de ref_file=test.en output=test.hyp

Language model: loss and perplexity (token-weighted mean NLL, exp of it) on the corpus' test or
validation split, or on any text file (tokenised with the checkpoint's tokenizer), at one or more
lengths in non-overlapping windows: the same code as train.py's ``eval.seq_lens``
(:func:`ablate.tasks.lm_eval.evaluate_lengths`).

    python eval.py ckpt_path=logs/runs/<run>/checkpoints/last.ckpt seq_lens=[128,256,512]
    python eval.py ckpt_path=... split=val
    python eval.py ckpt_path=... text_file=my_text.txt seq_lens=[256]
"""

import json
import tempfile
import time
from pathlib import Path

import hydra
import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf

from ablate import cli
from ablate.data.translation_text import read_lines
from ablate.resume import CheckpointError
from ablate.tasks import checkpoint_task
from ablate.tasks.translation import (
    corpus_bleu,
    decode_config,
    load_translation_checkpoint,
    pick_device,
)

CONF = Path(__file__).resolve().parent / "conf"
# options of one task only: given with a checkpoint of the other task, they are refused by name
TRANSLATION_ONLY = ("src_file", "ref_file", "output", "beam_size", "length_penalty", "max_len_a", "max_len_b")
LM_ONLY = ("text_file", "seq_lens")


def sentences(cfg: DictConfig, task) -> tuple[list[str], list[str] | None, Path]:
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
    data_cfg.update(data_dir=cfg.paths.data_dir, cache_dir=cfg.paths.cache_dir)
    data_cfg.update(OmegaConf.to_container(cfg.data, resolve=True))
    dm = instantiate(OmegaConf.create(data_cfg))
    dm.setup()
    return dm.sources(cfg.split), dm.references(cfg.split), ckpt.parent.parent / "translations" / f"{cfg.split}.hyp"


def evaluate_translation(cfg: DictConfig) -> None:
    task = load_translation_checkpoint(cfg.ckpt_path, cfg.device)
    decode = decode_config(task, cfg)
    src, refs, default_out = sentences(cfg, task)
    start = time.perf_counter()
    hyps = task.translate_text(src, decode, max_tokens=cfg.batch_tokens)
    seconds = time.perf_counter() - start
    out = Path(cfg.output) if cfg.output else default_out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    result = {"sentences": len(hyps), "hypotheses": str(out), "decode": decode.__dict__, "seconds": round(seconds, 1)}
    if refs is not None:
        score, signature = corpus_bleu(hyps, refs, task.task_cfg.get("bleu_tokenize", "13a"))
        result.update(bleu=round(score, 2), signature=signature)
        print(f"BLEU = {score:.2f}  {signature}")
    print(json.dumps(result))


def eval_lengths(cfg: DictConfig) -> list[int] | None:
    """``seq_lens`` as a list of positive lengths (a single number is a list of one), or None."""
    lengths = cfg.seq_lens
    if lengths is None:
        return None
    lengths = list(lengths) if isinstance(lengths, (list, ListConfig)) else [lengths]
    if not lengths or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths):
        raise SystemExit(f"seq_lens={cfg.seq_lens}: give positive lengths, e.g. seq_lens=[128,256,512]")
    return lengths


def lm_data_config(cfg: DictConfig, task) -> dict:
    """The checkpoint's data config (task=lm checkpoints carry it), or ``conf/data/<default_data>``
    for older checkpoints, with the current data/cache folders and the ``data`` overrides applied."""
    data_cfg = dict(task.hparams.get("data") or {})
    if not data_cfg:
        path = CONF / "data" / f"{cfg.default_data}.yaml"
        if not path.is_file():
            raise SystemExit(f"default_data={cfg.default_data}: no {path}")
        print(
            f"{cfg.ckpt_path} carries no data config (an older checkpoint): evaluating on data={cfg.default_data} "
            f"(conf/data/{cfg.default_data}.yaml; another corpus: default_data=<name>, or text_file=...)"
        )
        data_cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    data_cfg.update(data_dir=cfg.paths.data_dir, cache_dir=cfg.paths.cache_dir)
    data_cfg.update(OmegaConf.to_container(cfg.data, resolve=True))
    return data_cfg


def lm_datamodule(cfg: DictConfig, task, work_dir: str):
    """The data to evaluate on (the checkpoint's corpus or ``text_file``) and its description."""
    from ablate.tasks.lm_eval import TextFileData, tokenizer_mismatch

    stored = dict(task.hparams.get("data") or {})
    overrides = OmegaConf.to_container(cfg.data, resolve=True)
    # the checkpoint's evaluation length: its data config's, else what its model was built for
    length = overrides.get("eval_seq_len") or stored.get("eval_seq_len") or stored.get("seq_len") or task.spec.max_len
    if cfg.text_file:
        if task.tokenizer is None:
            raise SystemExit(
                f"{cfg.ckpt_path} carries no tokenizer (saved by an older version?): cannot tokenise "
                f"text_file={cfg.text_file}"
            )
        if not Path(cfg.text_file).is_file():
            raise SystemExit(f"text_file={cfg.text_file}: no such file")
        batch = overrides.get("eval_batch_size") or max(1, cfg.batch_tokens // length)
        dm = TextFileData(cfg.text_file, task.tokenizer, work_dir, seq_len=length, eval_batch_size=batch)
        return dm, {"text_file": str(cfg.text_file)}
    data_cfg = lm_data_config(cfg, task)
    data_cfg["eval_seq_len"] = data_cfg.get("eval_seq_len") or length
    if not overrides.get("eval_batch_size"):  # tokens per batch; not the (global) training batch
        data_cfg["eval_batch_size"] = max(1, cfg.batch_tokens // data_cfg["eval_seq_len"])
    try:
        dm = instantiate(OmegaConf.create(data_cfg))
    except Exception as err:
        raise SystemExit(f"cannot build the data module of {data_cfg.get('_target_')}: {err}") from None
    if not hasattr(dm, "use_eval_length"):
        raise SystemExit(f"{data_cfg.get('_target_')} is not a language-modelling corpus")
    dm.prepare_data()
    dm.setup("validate" if cfg.split == "val" else "test")
    problem = tokenizer_mismatch(task.tokenizer, dm.tokenizer, task.spec.vocab_size)
    if problem:
        raise SystemExit(
            f"{cfg.ckpt_path}: {problem}; the token ids would not mean what the model learned. "
            "Evaluate on the checkpoint's own corpus and tokenizer settings, or give text_file=..."
        )
    return dm, {"split": cfg.split, "corpus": dm.name}


def evaluate_lm(cfg: DictConfig) -> None:
    from ablate.tasks.lm_eval import evaluate_lengths, load_lm_checkpoint

    if cfg.split not in ("val", "test"):
        raise SystemExit(f"split={cfg.split}; valid options: val, test")
    lengths = eval_lengths(cfg)
    device = pick_device(cfg.device)
    task = load_lm_checkpoint(cfg.ckpt_path, map_location=device)
    split = "test" if cfg.text_file else cfg.split  # a text file is served as either split
    with tempfile.TemporaryDirectory(prefix="ablate-eval-") as work_dir:
        try:
            dm, source = lm_datamodule(cfg, task, work_dir)
            lengths = lengths or [dm.eval_seq_len]
            trainer = L.Trainer(
                accelerator="gpu" if device.type == "cuda" else "cpu",
                devices=[device.index] if device.index is not None else 1,
                logger=False,
                enable_checkpointing=False,
                enable_progress_bar=False,
                enable_model_summary=False,
            )
            start = time.perf_counter()
            metrics, info = evaluate_lengths(trainer, task, dm, lengths, split)
        except (OSError, ValueError) as err:  # a missing corpus, an unknown character, a too long window, ...
            raise SystemExit(f"eval.py: {err}") from None
    seconds = time.perf_counter() - start
    results = {}
    for length in lengths:
        entry = dict(info[str(length)])
        if "skipped" not in entry:
            entry.update(loss=metrics[f"{split}/loss@{length}"], ppl=metrics[f"{split}/ppl@{length}"])
            print(f"seq_len={length}: loss = {entry['loss']:.4f}  ppl = {entry['ppl']:.3f}  ({entry['tokens']} tokens)")
        else:
            print(f"seq_len={length}: skipped ({entry['skipped']})")
        results[str(length)] = entry
    print(json.dumps({**source, "lengths": results, "seconds": round(seconds, 1)}))


def refuse_other_task_options(cfg: DictConfig, options: tuple[str, ...], task: str, other: str) -> None:
    given = [k for k in options if cfg.get(k) is not None]
    if given:
        raise SystemExit(
            f"{cfg.ckpt_path} holds a task={task} checkpoint; {', '.join(given)} apply to task={other} checkpoints only"
        )


@hydra.main(version_base="1.3", config_path="conf", config_name="eval")
@cli.task
def main(cfg: DictConfig) -> None:
    if not Path(cfg.ckpt_path).is_file():
        raise SystemExit(f"ckpt_path={cfg.ckpt_path}: no such checkpoint file")
    try:
        task = checkpoint_task(cfg.ckpt_path)
    except CheckpointError as err:
        raise SystemExit(str(err)) from None
    if task == "translation":
        refuse_other_task_options(cfg, LM_ONLY, "translation", "lm")
        evaluate_translation(cfg)
    elif task == "lm":
        refuse_other_task_options(cfg, TRANSLATION_ONLY, "lm", "translation")
        evaluate_lm(cfg)
    else:
        raise SystemExit(f"{cfg.ckpt_path} holds a task={task} checkpoint; eval.py takes task=translation and task=lm")


if __name__ == "__main__":
    cli.entry_point(main)
