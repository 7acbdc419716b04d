"""Translation with the encoder-decoder Transformer as a LightningModule.

Metric names (part of the interface):

* ``train/loss`` (label-smoothed), ``train/ppl``, ``train/lr``, ``train/padding_fraction``;
  ``data/padding_fraction`` once at the start; ``val/loss``, ``val/ppl`` (unsmoothed, per token);
* ``val/bleu``: sacreBLEU of the detokenised output on a fixed sample of ``task.val_bleu_samples``
  validation sentences (all when ``null``), decoded with ``task.val_beam_size`` (greedy default);
* ``test/loss``, ``test/ppl``, ``test/bleu`` on the whole test split with the ``decode`` settings;
  the hypotheses go to ``<output_dir>/translations/test.hyp``.

The hyper-parameter ``bleu_signature`` and, with W&B, a table ``val/examples`` per validation.
Label smoothing (Szegedy et al. 2016; 0.1 in Vaswani et al. 2017) is PyTorch's, padding ignored.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig
from torch import Tensor
from torchmetrics import MeanMetric

from ablate.data.translation_batches import PairBatch
from ablate.data.translation_tokens import BOS, EOS, PAD, detokenize
from ablate.errors import ConfigError
from ablate.nn.seq2seq import EncoderDecoder
from ablate.nn.spec import ModelSpec
from ablate.optim import used_optim_config
from ablate.tasks.base import TaskModule, UnitRecorder, config_dict, pick_device
from ablate.tasks.config_checks import TRANSLATION_TASK_DEFAULTS, TranslationChecks
from ablate.tasks.decoding import DecodeConfig, SpecialIds, translate_tokens


def corpus_bleu(hypotheses: list[str], references: list[str], tokenize: str = "13a") -> tuple[float, str]:
    """sacreBLEU corpus BLEU of detokenised hypotheses against one reference each, and its signature."""
    from sacrebleu.metrics import BLEU

    bleu = BLEU(tokenize=tokenize)
    score = bleu.corpus_score(hypotheses, [references])
    return float(score.score), str(bleu.get_signature())


def _all_gather_dict(local: dict[int, str]) -> dict[int, str]:
    """Merge the index -> hypothesis maps of all ranks (no-op in a single process)."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return local
    parts: list[dict[int, str] | None] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(parts, local)
    return {index: hyp for part in parts for index, hyp in (part or {}).items()}


class TranslationTask(TranslationChecks, TaskModule):
    """Sequence-to-sequence training with label smoothing; BLEU evaluation with greedy/beam search."""

    model: EncoderDecoder

    def tokens_in_batch(self, batch: PairBatch) -> int:
        """Source and target positions, padding included: the encoder reads one, the decoder the other."""
        return int(batch.src.numel() + batch.tgt_in.numel())

    def __init__(
        self,
        spec: Mapping[str, Any],
        optim: Mapping[str, Any],
        decode: Mapping[str, Any] | None = None,
        task: Mapping[str, Any] | None = None,
        data: Mapping[str, Any] | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        # everything needed to rebuild the model, decode, and find the corpus again (eval.py) from a checkpoint
        self.build_model(spec, optim, lambda s: EncoderDecoder(s, pad_id=PAD), compile)
        self.task_cfg = {**TRANSLATION_TASK_DEFAULTS, **dict(task or {})}
        self.decode_cfg = DecodeConfig.from_mapping(decode)
        self.ids = SpecialIds(pad=PAD, bos=BOS, eos=EOS)
        self.eval_nll = MeanMetric()
        self._hyps: dict[int, str] = {}
        self._bleu_sample: set[int] | None = None
        self._signature_logged = False
        self._units: UnitRecorder | None = None  # during a test evaluation: each sentence's loss
        self.test_units: dict[str, dict[str, Any]] = {}  # "" -> the last test evaluation's sentences

    # --- model ------------------------------------------------------------------------

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        return self.forward_fn(src, tgt_in, src != PAD)

    @staticmethod
    def token_nll(logits: Tensor, target: Tensor, label_smoothing: float = 0.0, reduction: str = "mean") -> Tensor:
        """Cross-entropy over the real (non-pad) target tokens."""
        return F.cross_entropy(
            logits.flatten(0, 1).float(),
            target.flatten(),
            ignore_index=PAD,
            label_smoothing=label_smoothing,
            reduction=reduction,
        )

    def translate(self, src: Tensor, cfg: DecodeConfig | None = None) -> list[list[int]]:
        """Token ids of the translations of ``src`` (B, S) (right-padded ``tokens </s>``)."""
        return translate_tokens(self.model, src, src != PAD, self.ids, cfg or self.decode_cfg)

    def translate_text(
        self, sentences: list[str], cfg: DecodeConfig | None = None, max_tokens: int = 4000
    ) -> list[str]:
        """Detokenised translations of raw sentences, batched by length; order kept."""
        if self.tokenizer is None:
            raise RuntimeError("this model has no tokenizer (a checkpoint saved without one?)")
        from ablate.data.translation_tokens import encode_lines

        limit = self.spec.max_len - 1
        ids = [x[:limit] for x in encode_lines(self.tokenizer, sentences)]
        order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
        out: list[str] = [""] * len(ids)
        device = next(self.model.parameters()).device
        start = 0
        while start < len(order):
            end, width = start, 0
            while end < len(order) and (end - start + 1) * max(width, len(ids[order[end]]) + 1) <= max_tokens:
                width = max(width, len(ids[order[end]]) + 1)
                end += 1
            end = max(end, start + 1)
            rows = order[start:end]
            src = torch.full((len(rows), max(len(ids[i]) for i in rows) + 1), PAD, dtype=torch.long)
            for r, i in enumerate(rows):
                src[r, : len(ids[i])] = torch.tensor(ids[i], dtype=torch.long)
                src[r, len(ids[i])] = EOS
            for i, hyp in zip(rows, self.translate(src.to(device), cfg)):
                out[i] = detokenize(self.tokenizer, hyp)
            start = end
        return out

    # --- training ---------------------------------------------------------------------

    def train_loss(self, batch: PairBatch) -> tuple[Tensor, Tensor]:
        src, tgt_in, tgt_out = batch[0], batch[1], batch[2]
        logits = self(src, tgt_in)
        smoothing = self.optim_cfg.get("label_smoothing", 0.0) or 0.0
        loss = self.token_nll(logits, tgt_out, smoothing)
        return loss, loss.detach() if not smoothing else self.token_nll(logits.detach(), tgt_out)

    def training_step(self, batch: PairBatch, batch_idx: int) -> Tensor:
        src, tgt_out = batch[0], batch[2]
        loss, nll = self.train_loss(batch)
        src_real, tgt_real = (src != PAD).sum(), (tgt_out != PAD).sum()
        pad_frac = 1 - (src_real + tgt_real).float() / (src.numel() + tgt_out.numel())
        self.log_training_step(loss, nll, padding_fraction=pad_frac)
        return loss

    def on_fit_start(self) -> None:
        dm: Any = getattr(self.trainer, "datamodule", None)
        fraction = getattr(dm, "padding_fraction", {}).get("train")
        if fraction is not None and self.trainer.global_step == 0:
            for logger in self.loggers:
                logger.log_metrics({"data/padding_fraction": fraction}, step=0)
            if rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # set by Lightning at import
                print(
                    f"token batches: {len(dm.datasets['train'])} per epoch of <= {dm.max_tokens} tokens; "
                    f"padding {100 * fraction:.1f}% of positions"
                )

    # --- evaluation -------------------------------------------------------------------

    def _datamodule(self) -> Any:
        dm = getattr(self.trainer, "datamodule", None)
        if dm is None or not hasattr(dm, "references"):
            raise RuntimeError("translation evaluation needs a TranslationDataModule (references for BLEU)")
        return dm

    def _sample(self, n: int) -> set[int]:
        k = self.task_cfg.get("val_bleu_samples")
        if k is None or k >= n:
            return set(range(n))
        return set(random.Random(self.task_cfg.get("sample_seed", 0)).sample(range(n), int(k)))

    def _eval_step(self, batch: PairBatch, decode: set[int] | None, cfg: DecodeConfig) -> None:
        src, tgt_in, tgt_out, index = batch
        logits = self(src, tgt_in)
        n = (tgt_out != PAD).sum()
        per_token = self.token_nll(logits, tgt_out, reduction="none").view_as(tgt_out)  # 0 at padding
        self.eval_nll.update(per_token.sum() / n, weight=n)
        if self._units is not None:  # the test split: each sentence's loss under its number (ablate.eval_units)
            tokens = (tgt_out != PAD).sum(-1)
            self._units.add(index, per_token.detach().double().sum(-1), tokens, torch.zeros_like(tokens))
        rows = [r for r, i in enumerate(index.tolist()) if decode is None or i in decode]
        if not rows or self.tokenizer is None or self.trainer.sanity_checking:
            return
        sub = src[rows]
        sub = sub[:, : int((sub != PAD).sum(1).max())]
        for r, hyp in zip(rows, self.translate(sub, cfg)):
            self._hyps[int(index[r])] = detokenize(self.tokenizer, hyp)

    def _finish(self, split: str) -> None:
        loss = self.eval_nll.compute()
        self.eval_nll.reset()
        metrics = {f"{split}/loss": loss, f"{split}/ppl": loss.exp()}
        hyps = _all_gather_dict(self._hyps)
        self._hyps = {}
        if hyps and not self.trainer.sanity_checking:
            dm = self._datamodule()
            refs_all, srcs_all = dm.references(split), dm.sources(split)
            order = sorted(hyps)
            hyp_list, refs = [hyps[i] for i in order], [refs_all[i] for i in order]
            score, signature = corpus_bleu(hyp_list, refs, self.task_cfg.get("bleu_tokenize", "13a"))
            metrics[f"{split}/bleu"] = torch.tensor(score)
            if not self._signature_logged:
                for logger in self.loggers:
                    logger.log_hyperparams({"bleu_signature": signature})
                self._signature_logged = True
            if rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # set by Lightning at import
                self._log_examples(split, order, srcs_all, refs_all, hyps)
                if split == "test":
                    self._write_hypotheses(hyp_list, order, refs_all)
                    print(
                        f"test BLEU = {score:.2f} on {len(order)} sentences "
                        f"(beam {self.decode_cfg.beam_size}, length penalty {self.decode_cfg.length_penalty})  {signature}"
                    )
        self.log_dict(metrics, prog_bar=split == "val", sync_dist=False)

    def _log_examples(
        self, split: str, order: list[int], srcs: list[str], refs: list[str], hyps: dict[int, str]
    ) -> None:
        n = int(self.task_cfg.get("log_examples") or 0)
        wandb_loggers = [lg for lg in self.loggers if isinstance(lg, WandbLogger)]
        if not n or not wandb_loggers:
            return
        rows = [[srcs[i], refs[i], hyps[i]] for i in order[:n]]
        for lg in wandb_loggers:
            lg.log_text(
                key=f"{split}/examples", columns=["source", "reference", "hypothesis"], data=rows, step=self.global_step
            )

    def _write_hypotheses(self, hyp_list: list[str], order: list[int], refs_all: list[str]) -> None:
        root = getattr(self.trainer, "default_root_dir", None)
        if not root:
            return
        if order == list(range(len(refs_all))):  # the whole split was decoded
            folder = Path(root) / "translations"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "test.hyp").write_text("\n".join(hyp_list) + "\n", encoding="utf-8")

    def on_validation_epoch_start(self) -> None:
        if self._bleu_sample is None and not self.trainer.sanity_checking:
            self._bleu_sample = self._sample(len(self._datamodule().references("val")))

    def validation_step(self, batch: PairBatch, batch_idx: int) -> None:
        cfg = DecodeConfig.from_mapping(self.decode_cfg.__dict__, beam_size=self.task_cfg.get("val_beam_size"))
        self._eval_step(batch, self._bleu_sample or set(), cfg)

    def on_validation_epoch_end(self) -> None:
        self._finish("val")

    def on_test_epoch_start(self) -> None:
        self._units = UnitRecorder.for_test(self.trainer)

    def test_step(self, batch: PairBatch, batch_idx: int) -> None:
        self._eval_step(batch, None, self.decode_cfg)

    def on_test_epoch_end(self) -> None:
        self._finish("test")
        if self._units is not None:
            self.test_units[""] = self._units.gathered()
            self._units = None


def build_translation(cfg: DictConfig, datamodule: Any, spec: ModelSpec) -> TranslationTask:
    """The ``translation`` task of a run: a parallel corpus and a model with an encoder."""
    from ablate.data.translation_datamodule import TranslationDataModule

    if not isinstance(datamodule, TranslationDataModule):
        raise ConfigError(
            f"task=translation needs a parallel corpus (data=multi30k, iwslt14, iwslt2017, wmt14, parallel), "
            f"got {type(datamodule).__name__}"
        )
    if spec.encoder_layers <= 0:
        raise ConfigError(
            "task=translation needs an encoder: set model.encoder_layers and model.decoder_layers, or use "
            "model=translation_small, transformer_iwslt_de_en or transformer_base"
        )
    task_cfg = {k: v for k, v in config_dict(cfg.get("task")).items() if k != "name"}
    return TranslationTask(
        spec.as_dict(),
        used_optim_config(config_dict(cfg.optim)),
        decode=config_dict(cfg.get("decode")),
        task=task_cfg,
        data=config_dict(cfg.data),
        compile=cfg.model.get("compile", False),
    )


# --- checkpoints, for eval.py and translate.py ---------------------------------------------


def load_translation_checkpoint(path: str | Path, device: str = "auto", script: str = "eval.py") -> TranslationTask:
    """A trained :class:`TranslationTask` with its tokenizer, in eval mode on ``device``."""
    from ablate.tasks.checkpoints import load_task_checkpoint

    dev = pick_device(device)
    task = cast(TranslationTask, load_task_checkpoint(path, "translation", script, map_location=dev))
    if task.tokenizer is None:
        raise SystemExit(f"{path} carries no tokenizer; cannot translate text with it")
    return task.to(dev).eval()


def decode_config(task: TranslationTask, overrides: Mapping[str, Any]) -> DecodeConfig:
    """The checkpoint's ``decode`` settings with the non-null ``overrides`` applied."""
    keys = ("beam_size", "length_penalty", "max_len_a", "max_len_b", "use_cache")
    return DecodeConfig.from_mapping(task.decode_cfg.__dict__, **{k: overrides.get(k) for k in keys})
