"""Sequence classification with an encoder-only Transformer (``task=classify``).

The model (:class:`EncoderClassifier`) is one bidirectional :class:`~ablate.nn.stack.Stack`, as
BERT's encoder (Devlin et al. 2019, without its pre-training): padding is masked out of every key
set, and a linear layer classifies the mean of the hidden states over the real tokens. Every
architecture option applies as to the LM (DeepNorm takes DeepNet's encoder-only constants).

Metric names: ``train/loss`` (label-smoothed), ``train/ppl``, ``train/acc``, ``train/lr``,
``val/loss``, ``val/acc``, ``test/loss``, ``test/acc``; its data gives ``(tokens, labels)`` batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.nn.functional as F
from omegaconf import DictConfig
from torch import Tensor, nn
from torchmetrics import MeanMetric

from ablate.errors import ConfigError
from ablate.nn.embedding import TokenEmbedding
from ablate.nn.norms import calibrate_to_inputs, example_tokens
from ablate.nn.spec import ModelSpec
from ablate.nn.stack import Stack, StackConfig
from ablate.optim import used_optim_config
from ablate.tasks.base import TaskModule, config_dict
from ablate.tasks.config_checks import ClassificationChecks

PAD = 0


class EncoderClassifier(Stack):
    """Embedding, one bidirectional stack, mean pooling, a linear classifier: tokens -> logits."""

    tok_emb: TokenEmbedding

    def __init__(self, spec: ModelSpec, num_classes: int, pad_id: int = PAD) -> None:
        embedding = TokenEmbedding(spec.vocab_size, spec.d_model, spec.scale_embeddings)
        super().__init__(spec, StackConfig.encoder_only(spec.n_layers), embedding)
        self.spec, self.pad_id = spec, pad_id
        self.head = nn.Linear(spec.d_model, num_classes)
        spec.option("init").build().apply(self)
        calibrate_to_inputs(self, lambda: self(example_tokens(spec.vocab_size, min(spec.max_len, 64))))

    def forward(self, tokens: Tensor) -> Tensor:  # type: ignore[override]
        real = tokens != self.pad_id
        hidden = super().forward(self.tok_emb(tokens), key_padding=real)
        pooled = (hidden * real[..., None]).sum(1) / real.sum(1, keepdim=True).clamp_min(1)
        return self.head(pooled)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


class ClassificationTask(ClassificationChecks, TaskModule):
    """Cross-entropy over the classes of each sequence; accuracy on validation and test."""

    model: EncoderClassifier

    def __init__(
        self,
        spec: Mapping[str, Any],
        optim: Mapping[str, Any],
        num_classes: int,
        data: Mapping[str, Any] | None = None,
        compile: bool = False,
    ) -> None:
        super().__init__()
        self.build_model(spec, optim, lambda s: EncoderClassifier(s, num_classes), compile)
        self.eval_loss, self.eval_acc = MeanMetric(), MeanMetric()  # per sequence; synced across ranks

    def forward(self, tokens: Tensor) -> Tensor:
        return self.forward_fn(tokens)

    def _losses(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor, Tensor]:
        """The logits, the (label-smoothed) loss and the plain cross-entropy, detached (``train/ppl``)."""
        tokens, labels = batch
        logits = self(tokens)
        smoothing = self.optim_cfg.get("label_smoothing", 0.0) or 0.0
        loss = F.cross_entropy(logits, labels, label_smoothing=smoothing)
        return logits, loss, loss.detach() if not smoothing else F.cross_entropy(logits.detach(), labels)

    def train_loss(self, batch: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        return self._losses(batch)[1:]

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        logits, loss, nll = self._losses(batch)
        accuracy = (logits.detach().argmax(-1) == batch[1]).float().mean()
        self.log_training_step(loss, nll, acc=accuracy)
        return loss

    def _eval_step(self, batch: tuple[Tensor, Tensor]) -> None:
        tokens, labels = batch
        logits = self(tokens)
        self.eval_loss.update(F.cross_entropy(logits, labels), weight=labels.numel())
        self.eval_acc.update((logits.argmax(-1) == labels).float().mean(), weight=labels.numel())

    def _eval_epoch_end(self, split: str) -> None:
        metrics = {f"{split}/loss": self.eval_loss.compute(), f"{split}/acc": self.eval_acc.compute()}
        self.eval_loss.reset()
        self.eval_acc.reset()
        self.log_dict(metrics, prog_bar=split == "val", sync_dist=False)

    def validation_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_validation_epoch_end(self) -> None:
        self._eval_epoch_end("val")

    def test_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> None:
        self._eval_step(batch)

    def on_test_epoch_end(self) -> None:
        self._eval_epoch_end("test")


def build_classify(cfg: DictConfig, datamodule: Any, spec: ModelSpec) -> ClassificationTask:
    """The ``classify`` task of a run: a data module of labelled sequences (with ``num_classes``)."""
    num_classes = getattr(datamodule, "num_classes", None)
    if not isinstance(num_classes, int):
        raise ConfigError(
            f"task=classify needs labelled sequences (data=majority), got {type(datamodule).__name__}, "
            f"which has no num_classes"
        )
    return ClassificationTask(
        spec.as_dict(),
        used_optim_config(config_dict(cfg.optim)),
        num_classes=num_classes,
        data=config_dict(cfg.data),
        compile=cfg.model.get("compile", False),
    )
