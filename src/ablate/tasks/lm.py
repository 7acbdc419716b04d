"""Decoder-only language modelling as a LightningModule.

Metric names (the interface): ``train/loss``, ``train/ppl``, ``val/loss``, ``val/ppl``, ``test/loss``,
``test/ppl`` (exp of the split's mean NLL per token), and ``test/loss@<len>``, ``test/ppl@<len>``.
``val/bpb``, ``test/bpb`` (and ``@<len>``): bits per byte of the UTF-8 text, comparable across
tokenizers: the summed NLL over ln 2 times the bytes the predicted tokens cover
(:func:`token_byte_lengths`); logged when the task knows its tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import lightning as L
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info
from omegaconf import DictConfig
from torch import Tensor
from torchmetrics import MeanMetric, SumMetric

from ablate.data.tokenizers import Tokenizer
from ablate.errors import ConfigError
from ablate.metrics import finite_or_none
from ablate.nn.spec import ModelSpec
from ablate.nn.transformer import TransformerLM
from ablate.optim import used_optim_config
from ablate.tasks.base import TaskModule, UnitRecorder, config_dict
from ablate.tasks.config_checks import LanguageModelChecks


def token_byte_lengths(tokenizer: Tokenizer) -> np.ndarray:
    """UTF-8 bytes of the text each token id stands for (an int array over the vocabulary). A
    byte-level BPE token spells its bytes one character each (GPT-2's ``bytes_to_unicode``), so its
    length counts them, also for part of a multi-byte character; anything else: its decoded text's."""
    from ablate.data.tokenizers import BPETokenizer, CharTokenizer

    if isinstance(tokenizer, CharTokenizer):
        return np.array([len(c.encode("utf-8")) for c in tokenizer.chars], dtype=np.int64)
    if isinstance(tokenizer, BPETokenizer):
        from tokenizers import pre_tokenizers

        alphabet = set(pre_tokenizers.ByteLevel.alphabet())
        lengths = []
        for i in range(tokenizer.vocab_size):
            token = tokenizer.hf.id_to_token(i) or ""
            lengths.append(
                len(token) if token and set(token) <= alphabet else len(tokenizer.decode([i]).encode("utf-8"))
            )
        return np.array(lengths, dtype=np.int64)
    return np.array([len(tokenizer.decode([i]).encode("utf-8")) for i in range(tokenizer.vocab_size)], dtype=np.int64)


class LanguageModelTask(LanguageModelChecks, TaskModule):
    """Next-token prediction with cross-entropy (optionally label-smoothed for training)."""

    model: TransformerLM

    def __init__(
        self,
        spec: Mapping[str, Any],
        optim: Mapping[str, Any],
        data: Mapping[str, Any] | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        # spec + optim rebuild the model from a checkpoint; data finds its corpus again (eval.py)
        self.build_model(spec, optim, TransformerLM, compile)
        self.eval_nll = MeanMetric()  # token-weighted mean NLL; synced across ranks by torchmetrics
        self.eval_tokens = SumMetric()  # tokens predicted in the evaluation (all ranks)
        self.eval_nats = SumMetric()  # summed NLL of those tokens, and the UTF-8 bytes they cover (bpb)
        self.eval_bytes = SumMetric()
        self._byte_table: tuple[int, Tensor] | None = None  # (id of the tokenizer, bytes per token id)
        self.eval_tokens_seen = 0  # ... in the last one
        self.eval_tag = ""  # appended to the eval metric names: "@512" -> test/ppl@512 (train.py)
        self._units: UnitRecorder | None = None  # during a test evaluation: each window's loss
        self.test_units: dict[str, dict[str, Any]] = {}  # eval tag -> the last test evaluation's windows

    def evaluate_after_fit(
        self, trainer: L.Trainer, datamodule: Any, evaluation: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The test split, then each length of ``eval.seq_lens`` (:func:`evaluate_lengths`)."""
        metrics, extra = super().evaluate_after_fit(trainer, datamodule, evaluation)
        if evaluation.get("seq_lens"):
            length_metrics, extra["eval_lengths"] = evaluate_lengths(
                trainer, self, datamodule, list(evaluation["seq_lens"])
            )
            metrics.update(length_metrics)
            self.write_test_units(trainer, datamodule)  # with each length's windows
        return metrics, extra

    def forward(self, idx: Tensor) -> Tensor:
        return self.forward_fn(idx)

    def _nll(self, logits: Tensor, targets: Tensor, label_smoothing: float = 0.0) -> Tensor:
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), label_smoothing=label_smoothing)

    def train_loss(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        x, y = batch
        logits = self(x)
        smoothing = self.optim_cfg.get("label_smoothing", 0.0)
        loss = self._nll(logits, y, smoothing)
        # perplexity is defined on the true NLL; with label smoothing the training loss is not it
        return loss, loss.detach() if not smoothing else self._nll(logits.detach(), y)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        loss, nll = self.train_loss(batch)
        self.log_training_step(loss, nll)
        return loss

    def token_bytes(self) -> Tensor | None:
        """Bytes per token id (:func:`token_byte_lengths`) on the model's device, or None without a tokenizer."""
        if self.tokenizer is None:
            return None
        if self._byte_table is None or self._byte_table[0] != id(self.tokenizer):
            self._byte_table = (id(self.tokenizer), torch.as_tensor(token_byte_lengths(self.tokenizer)))
        table = self._byte_table[1]
        if table.device != self.device:
            table = table.to(self.device)
            self._byte_table = (self._byte_table[0], table)
        return table

    def _eval_step(self, batch: tuple[Tensor, Tensor], batch_idx: int = 0) -> None:
        x, y = batch
        per_token = F.cross_entropy(self(x).flatten(0, 1), y.flatten(), reduction="none").view_as(y)
        nll = per_token.mean()
        self.eval_nll.update(nll, weight=y.numel())
        self.eval_tokens.update(y.numel())
        table = self.token_bytes()
        if table is not None:
            self.eval_nats.update(nll.detach().double() * y.numel())
            self.eval_bytes.update(table[y].sum())
        if self._units is not None:  # the test split: each window's loss under its number (ablate.eval_units)
            self._units.record(batch_idx, per_token, y, table)

    def _eval_epoch_end(self, split: str) -> None:
        self.log_dict(self.eval_metrics(split), prog_bar=split == "val", sync_dist=False)
        if self._units is not None:
            self.test_units[self.eval_tag] = self._units.gathered()
            self._units = None

    def eval_metrics(self, split: str) -> dict[str, Tensor]:
        """The evaluation's ``<split>/loss``, ``/ppl`` and ``/bpb`` (tagged), its accumulators reset."""
        loss = self.eval_nll.compute()
        self.eval_tokens_seen = int(self.eval_tokens.compute())
        tag = self.eval_tag
        metrics = {f"{split}/loss{tag}": loss, f"{split}/ppl{tag}": loss.exp()}
        if self.token_bytes() is not None:
            nbytes = self.eval_bytes.compute()
            if nbytes > 0:  # bits per byte: summed nats / (ln 2 x bytes of the predicted tokens' text)
                metrics[f"{split}/bpb{tag}"] = (self.eval_nats.compute() / (math.log(2) * nbytes)).float()
        for metric in (self.eval_nll, self.eval_tokens, self.eval_nats, self.eval_bytes):
            metric.reset()
        return metrics

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, batch_idx)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def on_test_epoch_start(self) -> None:
        self._units = UnitRecorder.for_test(self.trainer)

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch, batch_idx)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")


EVAL_SPLITS = ("val", "test")


def evaluate_lengths(
    trainer: L.Trainer, task: LanguageModelTask, datamodule: Any, lengths: list[int], split: str = "test"
) -> tuple[dict[str, float | None], dict[str, Any]]:
    """``<split>/loss@L``, ``<split>/ppl@L`` (and ``bpb@L``) for each length L: the split cut into
    non-overlapping windows of L tokens (Press et al. 2022's "nonoverlapping inference"), the tokens
    per eval batch constant. With ``pos=learned`` a length beyond the position table is skipped
    with a note (its rows would be untrained). Returns the metrics and, per length, the tokens
    evaluated or why it was skipped."""
    if split not in EVAL_SPLITS:
        raise ValueError(f"split={split!r}; valid options: {', '.join(EVAL_SPLITS)}")
    run = trainer.test if split == "test" else trainer.validate
    metrics: dict[str, float | None] = {}
    info: dict[str, Any] = {}
    spec = task.spec
    limit = task.model.pos.max_positions  # a position table's size (pos=learned); None: it extrapolates
    for length in lengths:
        if limit is not None and length > limit:
            reason = (
                f"pos={spec.choice('pos')} has {limit} positions (model.max_len, fixed when the model was trained) and no "
                f"rows beyond them; lengths past training need positions that extrapolate: train with pos=rope, "
                f"alibi, sinusoidal or none (python train.py pos=rope), or with model.max_len={length} (rows "
                "untrained beyond the training length)"
            )
            info[str(length)] = {"skipped": reason}
            rank_zero_info(f"{split}/ppl@{length} skipped: {reason}")
            continue
        datamodule.use_eval_length(length)
        task.eval_tag = f"@{length}"
        try:
            run(task, datamodule=datamodule, verbose=False)
        finally:
            task.eval_tag = ""
        for key in (f"{split}/loss@{length}", f"{split}/ppl@{length}", f"{split}/bpb@{length}"):
            if key in trainer.callback_metrics or not key.startswith(f"{split}/bpb"):
                metrics[key] = finite_or_none(trainer.callback_metrics.get(key))
        info[str(length)] = {"tokens": task.eval_tokens_seen}
    return metrics, info


def build_lm(cfg: DictConfig, datamodule: Any, spec: ModelSpec) -> LanguageModelTask:
    """The ``lm`` task of a run: any corpus but a parallel one."""
    from ablate.data.translation_datamodule import TranslationDataModule

    if isinstance(datamodule, TranslationDataModule):
        raise ConfigError(f"data={type(datamodule).__name__} is a parallel corpus: train it with task=translation")
    return LanguageModelTask(
        spec.as_dict(),
        used_optim_config(config_dict(cfg.optim)),
        data=config_dict(cfg.data),
        compile=cfg.model.get("compile", False),
    )
