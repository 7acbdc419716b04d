"""Decoder-only language modelling as a LightningModule.

Metric names are part of the interface (dashboards and ``scripts/`` read them):
``train/loss``, ``train/ppl``, ``val/loss``, ``val/ppl``, ``test/loss``, ``test/ppl``.
Validation perplexity is exp of the mean NLL over all tokens of the split, not a mean of
per-batch perplexities. Length extrapolation (``eval.seq_lens``) logs ``test/loss@<len>`` and
``test/ppl@<len>``: the test metrics with :attr:`LanguageModelTask.eval_tag` appended.
"""

from __future__ import annotations

from typing import Any, Mapping

import lightning as L

import torch
import torch.nn.functional as F
from torch import Tensor
from omegaconf import DictConfig, open_dict
from torchmetrics import MeanMetric, SumMetric

from ablate.config import ConfigError, ModelSpec
from ablate.data.tokenizers import Tokenizer
from ablate.nn.transformer import TransformerLM
from ablate.tasks.base import TaskModule


class LanguageModelTask(TaskModule):
    """Next-token prediction with cross-entropy (optionally label-smoothed for training)."""

    task_name = "lm"

    def __init__(self, spec: Mapping[str, Any], optim: Mapping[str, Any], data: Mapping[str, Any] | None = None,
                 compile: bool = False) -> None:
        super().__init__()
        # spec + optim rebuild the model from a checkpoint; data finds its corpus again (eval.py)
        self.save_hyperparameters()
        self.spec = ModelSpec(**spec)
        self.optim_cfg = dict(optim)
        self.model = TransformerLM(self.spec)
        self.forward_fn = torch.compile(self.model) if compile else self.model
        self.eval_nll = MeanMetric()  # token-weighted mean NLL; synced across ranks by torchmetrics
        self.eval_tokens = SumMetric()  # tokens predicted in the evaluation (all ranks)
        self.eval_tokens_seen = 0  # ... in the last one
        self.eval_tag = ""  # appended to the eval metric names: "@512" -> test/ppl@512 (train.py)
        self.tokenizer: Tokenizer | None = None  # set by train.py; saved in checkpoints

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        """``eval.seq_len`` is the validation/test length: copied into ``data.eval_seq_len`` (which
        also still works on its own); ``eval.seq_lens`` must be a list of positive lengths."""
        evaluation = cfg.get("eval") or {}
        length, lengths = evaluation.get("seq_len"), evaluation.get("seq_lens")
        if (length or lengths) and "eval_seq_len" not in cfg.data:
            raise ConfigError("eval.seq_len / eval.seq_lens need an LM data config (data.eval_seq_len); "
                              f"data={cfg.data.get('_target_')} has none")
        listed = lengths is not None and not isinstance(lengths, (str, int))
        if lengths is not None and not (listed and all(isinstance(n, int) and n > 0 for n in lengths)):
            raise ConfigError(f"eval.seq_lens={lengths}: give a list of positive lengths, e.g. eval.seq_lens=[256,512,1024]")
        if length is None:
            return
        current = cfg.data.get("eval_seq_len")
        if current not in (None, length):
            raise ConfigError(f"eval.seq_len={length} but data.eval_seq_len={current}: set only one of them")
        with open_dict(cfg):
            cfg.data.eval_seq_len = length

    def evaluate_after_fit(self, trainer: L.Trainer, datamodule: Any, cfg: DictConfig) -> tuple[dict[str, Any], dict[str, Any]]:
        """The test split (``eval.test_at_end``), then ``test/loss@L``, ``test/ppl@L`` at each
        length of ``eval.seq_lens`` (:func:`ablate.tasks.lm_eval.evaluate_lengths`)."""
        from ablate.tasks.lm_eval import evaluate_lengths

        metrics, extra = super().evaluate_after_fit(trainer, datamodule, cfg)
        if cfg.eval.get("seq_lens"):
            length_metrics, extra["eval_lengths"] = evaluate_lengths(trainer, self, datamodule, list(cfg.eval.seq_lens))
            metrics.update(length_metrics)
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
        # under DDP: the global batch's values (the mean over ranks, which hold equal token
        # counts), not rank 0's share; one all-reduce of two scalars, nothing on one device
        loss_value, nll = self.trainer.strategy.reduce(torch.stack([loss.detach(), nll]), reduce_op="mean")
        self.log("train/loss", loss_value, prog_bar=True)
        self.log("train/ppl", nll.exp())
        self.log("train/lr", self.optimizers().param_groups[0]["lr"])  # the rate this step uses
        return loss

    def _eval_step(self, batch: tuple[Tensor, Tensor]) -> None:
        x, y = batch
        self.eval_nll.update(self._nll(self(x), y), weight=y.numel())
        self.eval_tokens.update(y.numel())

    def _eval_epoch_end(self, split: str) -> None:
        loss = self.eval_nll.compute()
        self.eval_tokens_seen = int(self.eval_tokens.compute())
        self.eval_nll.reset()
        self.eval_tokens.reset()
        tag = self.eval_tag
        self.log_dict({f"{split}/loss{tag}": loss, f"{split}/ppl{tag}": loss.exp()}, prog_bar=split == "val",
                      sync_dist=False)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")
