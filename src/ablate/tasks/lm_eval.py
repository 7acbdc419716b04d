"""Language-model evaluation at one or more lengths, shared by ``train.py`` (after training,
``eval.seq_lens``) and ``eval.py`` (from a checkpoint, on its corpus or on any text file): the
maths of :class:`ablate.tasks.lm.LanguageModelTask`'s test step over the non-overlapping windows
of :class:`ablate.data.lm_datamodule.LMDataModule` (:class:`TextFileData` for a text file).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, cast

import lightning as L
from omegaconf import DictConfig, ListConfig, OmegaConf

from ablate.config.locations import checkout_root, project_root
from ablate.data.lm_datamodule import LMDataModule
from ablate.data.lm_windows import token_dtype
from ablate.data.registry import StoredConfigError, build_data_module
from ablate.data.sources import DataFormatError, regular_file
from ablate.data.text_stream import SplitText
from ablate.data.token_files import write_tokens
from ablate.data.tokenizers import TOKENIZERS, Tokenizer
from ablate.tasks.base import pick_device
from ablate.tasks.lm import EVAL_SPLITS, LanguageModelTask, evaluate_lengths
from ablate.tasks.trained_data import check_evaluated_data
from ablate.writes import inside


class TextFileData(LMDataModule):
    """One UTF-8 text file as the validation and test split, tokenised with a checkpoint's tokenizer
    into ``work_dir/text_file.bin`` (``eval.py text_file=...``); the rest is :class:`LMDataModule`'s."""

    name = "text_file"

    def __init__(
        self,
        path: str | os.PathLike[str],
        tokenizer: Tokenizer,
        work_dir: str | os.PathLike[str],
        seq_len: int,
        eval_batch_size: int,
        num_workers: int = 0,
    ) -> None:
        kind = next(k for k, cls in TOKENIZERS.items() if isinstance(tokenizer, cls))
        super().__init__(
            data_dir=Path(path).parent,
            cache_dir=work_dir,
            tokenizer=kind,
            seq_len=seq_len,
            batch_size=eval_batch_size,
            eval_batch_size=eval_batch_size,
            num_workers=num_workers,
        )
        self.path = Path(path)
        self.tokenizer, self.vocab_size = tokenizer, tokenizer.vocab_size
        self.dtype = token_dtype(tokenizer.vocab_size)
        self.tokens_path = Path(work_dir) / "text_file.bin"
        self.num_tokens: int | None = None

    def prepare_data(self) -> None:
        if self.num_tokens is not None:
            return
        assert self.tokenizer is not None  # the checkpoint's, given to __init__
        text = SplitText.from_file(self.path)
        try:
            self.num_tokens = write_tokens(self.tokenizer, text, self.tokens_path, self.dtype, self.path.name)
        except DataFormatError:  # not UTF-8: the message names the file already
            raise
        except ValueError as err:  # a character outside the checkpoint's vocabulary
            raise ValueError(f"{self.path}: {err} of the checkpoint's tokenizer") from None

    def setup(self, stage: str | None = None) -> None:
        self.prepare_data()
        for split in EVAL_SPLITS:
            if split not in self.datasets:
                self.datasets[split] = self._windows(self.tokens_path, self.dtype, split)


def load_lm_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu", script: str = "eval.py") -> Any:
    """The :class:`~ablate.tasks.lm.LanguageModelTask` of a ``task=lm`` checkpoint, in eval mode and
    never compiled; a checkpoint of another task stops naming the script that takes it."""
    from ablate.tasks.checkpoints import load_task_checkpoint

    task = load_task_checkpoint(Path(path), "lm", script, map_location=map_location, compile=False).eval()
    check_finite_logits(task.model, path)
    return task


def random_logits(model: Any, batch: int = 2, length: int = 64, seed: int = 0) -> tuple[Any, Any]:
    """Random tokens (seeded) and ``model``'s logits on them, in eval mode: the probe of its numbers."""
    import torch

    spec = model.spec
    generator = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, spec.vocab_size, (batch, min(length, spec.max_len)), generator=generator)
    idx = idx.to(next(model.parameters()).device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return idx, model(idx)
    finally:
        model.train(was_training)


def check_finite_logits(model: Any, path: str | os.PathLike[str]) -> None:
    """Refuse (exit 2) a model whose weights are finite but whose logits are not (weights scaled x1e30
    overflow float32), before torch's "probability tensor contains inf/nan" or a NaN perplexity."""
    _, logits = random_logits(model, batch=1, length=16)
    if not bool(logits.isfinite().all()):
        largest = max(float(p.detach().abs().max()) for p in model.parameters())
        raise SystemExit(
            f"{path}: the model's logits on random tokens are not finite (inf/NaN), though its weights are (the "
            f"largest |weight| is {largest:.3g}): the weights are damaged or altered; not used"
        )


def tokenizer_mismatch(model_tokenizer: Tokenizer | None, data_tokenizer: Tokenizer, vocab_size: int) -> str | None:
    """Why the data's token ids would not mean what the model learned, or None: the stored tokenizer
    must be the data's (an older checkpoint, without one: the vocabulary size)."""
    from ablate.data.tokenizers import tokenizer_to_dict

    data = tokenizer_to_dict(data_tokenizer)
    if model_tokenizer is None:
        if data_tokenizer.vocab_size != vocab_size:
            return f"the data's {data['kind']} tokenizer has {data_tokenizer.vocab_size} tokens, the model {vocab_size}"
        return None
    model = tokenizer_to_dict(model_tokenizer)
    if model != data:
        return (
            f"the data's tokenizer ({data['kind']}, {data_tokenizer.vocab_size} tokens) is not the checkpoint's "
            f"({model['kind']}, {model_tokenizer.vocab_size} tokens)"
        )
    return None


# --- eval.py: a checkpoint's evaluation ------------------------------------------------------


def eval_lengths(cfg: DictConfig) -> list[int] | None:
    """``seq_lens`` as a list of positive lengths (a single number is a list of one), or None."""
    lengths = cfg.seq_lens
    if lengths is None:
        return None
    lengths = list(lengths) if isinstance(lengths, (list, ListConfig)) else [lengths]
    if not lengths or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in lengths):
        raise SystemExit(f"seq_lens={cfg.seq_lens}: give positive lengths, e.g. seq_lens=[128,256,512]")
    return lengths


def lm_data_config(cfg: DictConfig, task: LanguageModelTask) -> dict[str, Any]:
    """The checkpoint's data config (older ones: ``conf/data/<default_data>``), with the overrides."""
    data_cfg = dict(task.hparams.get("data") or {})
    if not data_cfg:
        path = (checkout_root() or project_root()) / "conf" / "data" / f"{cfg.default_data}.yaml"
        if not path.is_file():
            raise SystemExit(f"default_data={cfg.default_data}: no {path}")
        print(
            f"{cfg.ckpt_path} carries no data config (an older checkpoint): evaluating on data={cfg.default_data} "
            f"(conf/data/{cfg.default_data}.yaml; another corpus: default_data=<name>, or text_file=...)"
        )
        data_cfg = cast(dict[str, Any], OmegaConf.to_container(OmegaConf.load(path), resolve=False))
    data_cfg.update(data_dir=cfg.paths.data_dir, cache_dir=cfg.paths.cache_dir)
    data_cfg.update(cast(dict[str, Any], OmegaConf.to_container(cfg.data, resolve=True)))
    return data_cfg


def lm_datamodule(cfg: DictConfig, task: LanguageModelTask, work_dir: str) -> tuple[Any, dict[str, str]]:
    """The data to evaluate on (the checkpoint's corpus or ``text_file``) and its description."""
    stored = dict(task.hparams.get("data") or {})
    overrides = cast(dict[str, Any], OmegaConf.to_container(cfg.data, resolve=True))
    # the checkpoint's evaluation length: its data config's, else what its model was built for
    length = overrides.get("eval_seq_len") or stored.get("eval_seq_len") or stored.get("seq_len") or task.spec.max_len
    if cfg.text_file:
        if task.tokenizer is None:
            raise SystemExit(
                f"{cfg.ckpt_path} carries no tokenizer (saved by an older version?): cannot tokenise "
                f"text_file={cfg.text_file}"
            )
        if regular_file(Path(cfg.text_file), "text_file") is None:  # a directory or a pipe: named as such
            raise SystemExit(f"text_file={cfg.text_file}: no such file")
        batch = overrides.get("eval_batch_size") or max(1, cfg.batch_tokens // length)
        dm = TextFileData(cfg.text_file, task.tokenizer, work_dir, seq_len=length, eval_batch_size=batch)
        return dm, {"text_file": str(cfg.text_file)}
    data_cfg = lm_data_config(cfg, task)
    data_cfg["eval_seq_len"] = data_cfg.get("eval_seq_len") or length
    if not overrides.get("eval_batch_size"):  # tokens per batch; not the (global) training batch
        data_cfg["eval_batch_size"] = max(1, cfg.batch_tokens // data_cfg["eval_seq_len"])
    try:  # the stored _target_ is looked up among ablate's data modules, never imported by name
        dm = build_data_module(data_cfg, str(cfg.ckpt_path))
    except StoredConfigError:
        raise
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
    check_evaluated_data(cfg.ckpt_path, dm, cfg.split, overrides)  # the text the checkpoint recorded, not an edited one
    return dm, {"split": cfg.split, "corpus": dm.name}


def units_path(cfg: DictConfig) -> Path:
    """Where ``eval.py`` writes the per-window test losses: ``<ckpt>.test_units@<file or test>.npz``."""
    name = Path(str(cfg.text_file)).name if cfg.text_file else "test"
    ckpt = Path(str(cfg.ckpt_path)).absolute()
    return inside(ckpt.parent / f"{ckpt.stem}.test_units@{name}.npz", ckpt.parent)


def evaluate_checkpoint(cfg: DictConfig) -> None:
    """What ``eval.py`` does with a ``task=lm`` checkpoint: loss and perplexity at each of ``seq_lens``
    on the checkpoint's corpus (``split``) or on ``text_file``, printed and as one JSON line."""
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
            units = task.write_test_units(trainer, dm, units_path(cfg)) if split == "test" else None
        except (OSError, ValueError) as err:  # a missing corpus, an unknown character, a too long window, ...
            raise SystemExit(f"eval.py: {err}") from None
    seconds = time.perf_counter() - start
    if units is not None:
        print(f"per-window test losses: {units}")
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
