"""What every task shares: its checkpoints carry the tokenizer, and it trains with the configured
optimiser and per-step learning-rate schedule (:mod:`ablate.optim`)."""

from __future__ import annotations

from typing import Any

import lightning as L
from torch import Tensor

from ablate.data.tokenizers import Tokenizer, tokenizer_from_dict, tokenizer_to_dict
from ablate.optim import build_optimizer, build_schedule


class TaskModule(L.LightningModule):
    """Base of the task modules. A subclass sets ``self.model`` (the network) and ``self.optim_cfg``
    (the ``optim`` config as a dict); ``train.py`` sets :attr:`tokenizer`."""

    tokenizer: Tokenizer | None = None
    task_name: str = ""  # the ``task.name`` it implements; stored in checkpoints (ablate.tasks.checkpoint_task)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["task"] = self.task_name
        # a checkpoint carries its tokenizer, so generate.py / eval.py need nothing but the file
        if self.tokenizer is not None:
            checkpoint["tokenizer"] = tokenizer_to_dict(self.tokenizer)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if "tokenizer" in checkpoint:
            self.tokenizer = tokenizer_from_dict(checkpoint["tokenizer"])

    def train_loss(self, batch: Any) -> tuple[Tensor, Tensor]:
        """``(loss, nll)`` of one training batch: the loss to minimise (label-smoothed per
        ``optim.label_smoothing``) and the plain NLL, detached, for ``train/ppl``.
        ``training_step`` and ``scripts/grad_norm_at_init.py`` both use it."""
        raise NotImplementedError

    def configure_optimizers(self) -> dict[str, Any]:
        optimizer = build_optimizer(self.model, self.optim_cfg)
        # the schedule's horizon: max_steps, or what the epochs amount to when only they bound training
        max_steps = self.trainer.max_steps if self.trainer.max_steps > 0 else self.trainer.estimated_stepping_batches
        scheduler = build_schedule(optimizer, self.optim_cfg, int(max_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
