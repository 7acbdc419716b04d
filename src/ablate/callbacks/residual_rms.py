"""The RMS of the residual stream after every block, logged on the grad-norm steps.

Why: Pre-LN (``x + f(LN(x))``) never normalises the stream, so its magnitude grows with depth
(Xiong et al. 2020, "On Layer Normalization in the Transformer Architecture", Lemma 2: linearly
with the layer index at initialisation), while Post-LN renormalises after every sub-layer.

Names (part of the interface): ``resid_rms/layer_03``, ``resid_rms/enc_layer_03`` /
``resid_rms/dec_layer_03``: ``sqrt(mean(x ** 2))`` over the non-padding positions of the block's
output. Hooks exist only during a logging step's forward and values are copied without blocking;
rank 0 only. Disabled under ``torch.compile`` (hooks around a compiled forward recompile it).
"""

from __future__ import annotations

import re
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn
from torch.utils.hooks import RemovableHandle

from ablate.callbacks.deferred import DeferredLogging
from ablate.callbacks.grad_norm import layer_label, split_stack

_BLOCK = re.compile(r"blocks\.(\d+)")


def block_name(module_name: str) -> str | None:
    """``model.blocks.3`` -> ``layer_03``, ``model.decoder.blocks.0`` -> ``dec_layer_00`` (the
    grad-norm naming); ``None`` for modules that are not Transformer blocks."""
    stack, name = split_stack(module_name)
    match = _BLOCK.fullmatch(name)
    return layer_label(stack, match.group(1)) if match else None


class ResidualRMSMonitor(DeferredLogging):
    """Logs ``resid_rms/<layer>`` at the steps :class:`ablate.callbacks.grad_norm.GradNormMonitor` logs at."""

    def __init__(self, every_n_steps: int = 10, dense_steps: int = 0) -> None:
        super().__init__(every_n_steps, dense_steps)
        self.handles: list[RemovableHandle] = []
        self._sums: dict[str, Tensor] = {}  # layer -> sum of squares (on the device)
        self._counts: dict[str, Tensor] = {}  # layer -> number of summed elements
        self._target_mask: Tensor | None = None
        self._disabled = False

    # ------------------------------------------------------------------ measuring

    def attach(self, module: nn.Module) -> None:
        """Hook every block of ``module`` (and, for an encoder-decoder, its target embedding)."""
        if self.handles:
            return
        model = getattr(module, "model", module)
        pad_id = getattr(model, "pad_id", None)
        target_embedding = getattr(model, "target_embedding", None)
        if pad_id is not None and target_embedding is not None:
            # the decoder's blocks get no target mask: record it from the ids the target
            # embedding sees (the last call before the decoder blocks is the target's)
            self.handles.append(target_embedding.register_forward_pre_hook(self._record_mask(pad_id)))
        for name, sub in module.named_modules():
            layer = block_name(name)
            if layer is not None:
                self.handles.append(sub.register_forward_hook(self._measure(layer), with_kwargs=True))

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []
        self._target_mask = None

    def _record_mask(self, pad_id: int):
        def hook(module: nn.Module, args: tuple[Any, ...]) -> None:
            self._target_mask = args[0] != pad_id

        return hook

    def _measure(self, layer: str):
        decoder = layer.startswith("dec_")

        def hook(module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any], out: Tensor) -> None:
            x = out.detach().float()
            mask = self._target_mask if decoder else kwargs.get("key_padding")
            if mask is not None and mask.shape == x.shape[:2]:
                square_sum = (x.square().sum(-1) * mask).sum()
                count = mask.sum() * x.size(-1)
            else:  # no padding (LM windows): every position
                square_sum = x.square().sum()
                count = torch.full((), x.numel(), device=x.device)  # made on the device: no host-to-device copy
            if layer in self._sums:
                self._sums[layer] += square_sum
                self._counts[layer] += count
            else:
                self._sums[layer], self._counts[layer] = square_sum, count

        return hook

    def compute_tensor(self) -> tuple[list[str], Tensor] | None:
        """``(names, values)``: the RMS per layer since the last call, on the device (sums cleared), or None."""
        if not self._sums:
            return None
        layers = sorted(self._sums)
        sums = torch.stack([self._sums[k] for k in layers])
        counts = torch.stack([self._counts[k] for k in layers]).to(sums.dtype)
        values = (sums / counts.clamp_min(1)).sqrt()
        self._sums, self._counts = {}, {}
        return [f"resid_rms/{layer}" for layer in layers], values

    # ------------------------------------------------------------------ Lightning hooks

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # torch.compile's wrapper, by name: importing torch._dynamo just to check costs seconds
        compiled = any(type(m).__name__ == "OptimizedModule" for m in pl_module.modules())
        if compiled and not self._disabled:
            rank_zero_warn(
                "callbacks.residual_rms is off under model.compile=true: its hooks would recompile the model"
            )
        self._disabled = compiled

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        # every micro-batch of a logging step is measured (attach() is a no-op once hooked)
        if not self._disabled and trainer.is_global_zero and self.should_log(trainer.global_step):
            self.attach(pl_module)

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if not self.handles:
            return
        self.detach()  # before validation or the next step's forward
        computed = self.compute_tensor()
        if computed is not None:
            # straight to the loggers, at the step the grad norms of this batch are logged at
            self.deferred.put(trainer.global_step, *computed, trainer.loggers)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.detach()
        self._sums, self._counts = {}, {}
        super().on_train_end(trainer, pl_module)
