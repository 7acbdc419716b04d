"""What every task shares: its checkpoints carry the tokenizer, and it trains with the configured
optimiser and per-step learning-rate schedule (:mod:`ablate.optim`)."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, cast

import lightning as L
import torch
from lightning.pytorch.core.optimizer import LightningOptimizer
from lightning.pytorch.strategies import FSDPStrategy
from lightning.pytorch.utilities.types import OptimizerLRSchedulerConfig
from omegaconf import DictConfig, OmegaConf
from torch import Tensor, nn

from ablate.data.tokenizers import Tokenizer, tokenizer_from_dict, tokenizer_to_dict
from ablate.eval_units import FILENAME as UNITS_FILE
from ablate.eval_units import block_of, write_units
from ablate.metrics import finite_or_none
from ablate.nn.spec import ModelSpec
from ablate.optim import build_optimizer, build_schedule, clip_gradients, unscale_once
from ablate.tasks.config_checks import TaskChecks

log = logging.getLogger(__name__)


class TaskModule(L.LightningModule, TaskChecks):
    """Base of the task modules: a subclass's constructor calls :meth:`build_model`."""

    tokenizer: Tokenizer | None = None
    # set by each subclass's __init__; declared here so that they are not nn.Module's untyped attributes
    model: nn.Module
    optim_cfg: dict[str, Any]
    spec: ModelSpec
    forward_fn: Callable[..., Any]

    def build_model(
        self, spec: Mapping[str, Any], optim: Mapping[str, Any], model: Callable[[ModelSpec], nn.Module], compile: bool
    ) -> None:
        """Save the subclass's arguments as the checkpoint's hyper-parameters; set the spec and model."""
        caller = inspect.currentframe()
        self.save_hyperparameters(logger=False, frame=caller.f_back if caller else None)  # the subclass's arguments
        self.spec = ModelSpec.from_dict(spec)
        self.optim_cfg = dict(optim)
        self.model = model(self.spec)
        self.set_forward(compile)
        self.tokenizer = None  # set by train.py; saved in checkpoints

    def set_forward(self, compile: bool) -> None:
        """``forward_fn``: the model, or ``torch.compile`` of it; not a registered submodule, so the
        weights are saved once, as ``model.*``, and a run resumes with compile on or off."""
        object.__setattr__(self, "forward_fn", torch.compile(self.model) if compile else self.model)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        checkpoint["task"] = self.task_name
        # a checkpoint carries its tokenizer, so generate.py / eval.py need nothing but the file
        if self.tokenizer is not None:
            checkpoint["tokenizer"] = tokenizer_to_dict(self.tokenizer)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        # earlier versions also saved the weights under forward_fn.* (forward_fn._orig_mod.* when compiled)
        state = checkpoint.get("state_dict") or {}
        for key in [k for k in state if k.startswith("forward_fn.")]:
            del state[key]
        if "tokenizer" in checkpoint:
            self.tokenizer = tokenizer_from_dict(checkpoint["tokenizer"])

    # --- per-unit test losses (ablate.eval_units) ---------------------------------------------

    test_units: dict[str, dict[str, Any]]  # eval tag -> the last test evaluation's units (UnitRecorder.gathered)

    def write_test_units(self, trainer: L.Trainer, datamodule: Any, path: str | Path | None = None) -> Path | None:
        """Write the per-unit test losses to ``path`` (default ``<run dir>/test_units.npz``), warning if unwritable."""
        units = getattr(self, "test_units", None)
        if not units or trainer.global_rank != 0:
            return None
        target = Path(path) if path is not None else Path(trainer.default_root_dir) / UNITS_FILE
        meta = {
            "task": self.task_name,
            "corpus": getattr(datamodule, "name", None),
            "split": "test",
            "layout": next((u.get("layout") for u in units.values() if u.get("layout")), None),
        }
        try:
            return write_units(target, units, meta)
        except OSError as err:
            log.warning("per-unit test losses not written (%s): %s", target, err)
            return None

    # --- the task interface train.py uses (it names no task) ---------------------------------

    def evaluate_after_fit(
        self, trainer: L.Trainer, datamodule: Any, evaluation: Mapping[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """``(metrics, extra status entries)`` of the evaluation after training (default: the test split)."""
        if not evaluation.get("test_at_end", True):
            return {}, {}
        self.test_units = {}
        trainer.test(self, datamodule=datamodule, verbose=False)
        self.write_test_units(trainer, datamodule)  # each unit's loss: <run dir>/test_units.npz
        return {k: finite_or_none(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")}, {}

    def tokens_in_batch(self, batch: Any) -> int:
        """Tokens a training batch puts through the model (padding included); default: the input ids'."""
        return int(batch[0].numel())

    def train_loss(self, batch: Any) -> tuple[Tensor, Tensor]:
        """``(loss, nll)`` of one training batch: the (label-smoothed) loss and the plain NLL, detached."""
        raise NotImplementedError

    def log_training_step(self, loss: Tensor, nll: Tensor, **extra: Tensor) -> None:
        """Log a training step's ``train/loss``, ``train/ppl``, ``train/lr`` and ``extra``
        (``train/<key>``): under DDP the mean over ranks, in one all-reduce.

        Without a host synchronisation, so the CPU can queue the next step: the learning rate is
        logged as a CPU tensor (not copied to the device each step), and no value is ``prog_bar``
        (Lightning would turn it into a Python number after each batch; the progress displays read
        ``train/loss`` at their own cadence, :mod:`ablate.callbacks.progress`)."""
        values = self.trainer.strategy.reduce(torch.stack([loss.detach(), nll, *extra.values()]), reduce_op="mean")
        self.log("train/loss", values[0])
        self.log("train/ppl", values[1].exp())
        lr = cast(LightningOptimizer, self.optimizers()).param_groups[0]["lr"]  # this step's rate
        self.log("train/lr", lr if isinstance(lr, Tensor) else torch.tensor(lr, dtype=torch.float32))
        for name, value in zip(extra, values[2:]):
            self.log(f"train/{name}", value)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: int | float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip the gradients (``optim.grad_clip``) the way the precision and the strategy need.

        Lightning's own clipping refuses, under any mixed precision, an optimiser that unscales inside
        its step (fused AdamW), although bf16 has nothing to unscale: every ``trainer=gpu`` run crashed
        on its first step (issue 31). Here bf16 and fp32 clip directly, fp16 unscales first
        (:func:`ablate.optim.unscale_once`), FSDP clips through its root module; the numbers are
        Lightning's."""
        if not gradient_clip_val:
            return
        trainer = self.trainer
        plugin = trainer.precision_plugin
        unscale_once(getattr(plugin, "scaler", None), optimizer)
        root = trainer.strategy.model if isinstance(trainer.strategy, FSDPStrategy) else None
        algorithm = str(getattr(gradient_clip_algorithm, "value", gradient_clip_algorithm or "norm"))
        clip_gradients(list(plugin.main_params(optimizer)), float(gradient_clip_val), algorithm, root)

    def configure_optimizers(self) -> OptimizerLRSchedulerConfig:
        optimizer = build_optimizer(self.model, self.optim_cfg)
        # the schedule's horizon: max_steps, or what the epochs amount to when only they bound training
        max_steps = self.trainer.max_steps if self.trainer.max_steps > 0 else self.trainer.estimated_stepping_batches
        scheduler = build_schedule(optimizer, self.optim_cfg, int(max_steps))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}


def pick_device(name: str = "auto") -> torch.device:
    """``auto``: the GPU when there is one, else the CPU; otherwise the named device."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def config_dict(node: Any) -> dict[str, Any]:
    """A config node (resolved) as a plain dict; ``{}`` for None."""
    if node is None:
        return {}
    if hasattr(node, "as_dict"):  # a typed section (ablate.run.config)
        return cast(dict[str, Any], node.as_dict())
    if isinstance(node, DictConfig):
        return cast(dict[str, Any], OmegaConf.to_container(node, resolve=True))
    return dict(node)


class UnitRecorder:
    """Collects one test evaluation's per-unit losses (:mod:`ablate.eval_units`): each unit's summed
    NLL, tokens and bytes under its number in the split. A language model's windows are numbered
    from the test loader's (deterministic) batch sampler; a translation batch carries its own."""

    def __init__(self, batches: list[list[int]] | None, text: Mapping[str, Any]) -> None:
        self.batches, self.text = batches, dict(text)
        self.rows: list[tuple[Tensor, Tensor, Tensor, Tensor]] = []

    @classmethod
    def for_test(cls, trainer: L.Trainer) -> UnitRecorder | None:
        """A recorder for the test evaluation ``trainer`` is about to run (None: no ``unit_text``)."""
        describe = getattr(getattr(trainer, "datamodule", None), "unit_text", None)
        if describe is None:
            return None
        loaders = trainer.test_dataloaders
        loader = loaders[0] if isinstance(loaders, (list, tuple)) else loaders
        sampler = getattr(loader, "batch_sampler", None)
        batches = [list(b) for b in sampler] if sampler is not None else None
        return cls(batches, describe("test"))

    def record(self, batch_idx: int, per_token: Tensor, targets: Tensor, byte_table: Tensor | None) -> None:
        """A language model's batch ``batch_idx``: per-token NLL and targets, (windows, positions)."""
        if self.batches is None or batch_idx >= len(self.batches) or len(self.batches[batch_idx]) != len(targets):
            return  # not the order the sampler gave: no record rather than a misattributed one
        index = torch.as_tensor(self.batches[batch_idx])
        tokens = torch.full((len(targets),), targets.shape[1])
        nbytes = byte_table[targets].sum(-1) if byte_table is not None else torch.zeros(len(targets))
        self.add(index, per_token.detach().double().sum(-1), tokens, nbytes)

    def add(self, index: Tensor, nats: Tensor, tokens: Tensor, nbytes: Tensor) -> None:
        """Units ``index`` with their summed NLL, tokens and bytes."""
        self.rows.append((index.cpu(), nats.detach().cpu(), tokens.cpu(), nbytes.cpu()))

    def gathered(self) -> dict[str, Any]:
        """All ranks' units (each once), their blocks and the text key (:func:`ablate.eval_units.write_units`)."""
        parts = [[torch.cat(col).tolist() for col in zip(*self.rows)] if self.rows else [[], [], [], []]]
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, parts[0])
            parts = gathered
        seen: dict[int, tuple[float, int, int]] = {}
        for index, nats, tokens, nbytes in parts:
            for i, n, t, b in zip(index, nats, tokens, nbytes):
                seen.setdefault(int(i), (float(n), int(t), int(b)))
        order = sorted(seen)
        stride = int(self.text.get("stride") or 0)
        starts = [i * stride for i in order] if stride else [0] * len(order)
        return {
            "index": order,
            "nats": [seen[i][0] for i in order],
            "tokens": [seen[i][1] for i in order],
            "bytes": [seen[i][2] for i in order],
            "block": block_of(starts, self.text.get("bounds")),
            "text": self.text["text"],
            "layout": self.text.get("layout"),
        }
