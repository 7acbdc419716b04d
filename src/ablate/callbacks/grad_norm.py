"""Per-layer gradient norms, logged before clipping.

Names (part of the interface): ``grad_norm/total``, ``grad_norm/layer_03/attn`` (``attn_norm``,
``cross_attn``, ``ffn``, ``ffn_norm``, ``..._post_norm`` for sandwich), ``grad_norm/embed``,
``grad_norm/pos``, ``grad_norm/final_norm`` and ``grad_norm/head`` (an untied head only).
A logging step runs one fused ``torch._foreach_norm`` and one ``index_add_``, copied to the host
without blocking (:mod:`ablate.callbacks.deferred`); rank 0 only. Under fp16 the norms are of the
unscaled gradients (:func:`ablate.optim.unscale_once`).
"""

from __future__ import annotations

import re

import lightning as L
import torch

from ablate.callbacks.deferred import DeferredLogging
from ablate.optim import unscale_once

_BLOCK = re.compile(r"blocks\.(\d+)\.(\w+)\.(sublayer|norm|post_norm)\.")
_STACKS = {"encoder.": "enc_", "decoder.": "dec_"}


def split_stack(name: str) -> tuple[str, str]:
    """``(stack prefix, rest)`` of a parameter or module name: ``model.decoder.blocks.2.ffn`` ->
    ``("dec_", "blocks.2.ffn")``; ``("", ...)`` for a decoder-only LM."""
    name = name.removeprefix("model.")
    for prefix, short in _STACKS.items():
        if name.startswith(prefix):
            return short, name.removeprefix(prefix)
    return "", name


def layer_label(stack: str, index: int | str) -> str:
    """A block's logged name: ``layer_03``, ``enc_layer_03``, ``dec_layer_03`` (zero-padded: sorted by depth)."""
    return f"{stack}layer_{int(index):02d}"


def group_name(param_name: str) -> str:
    """Map a parameter name to its logged group, e.g. ``blocks.3.attn.sublayer.qkv.weight`` ->
    ``layer_03/attn``, ``blocks.3.ffn.norm.weight`` -> ``layer_03/ffn_norm``, ``tok_emb.weight``
    -> ``embed``. A translation model's ``encoder.``/``decoder.`` stacks get ``enc_``/``dec_``."""
    stack, name = split_stack(param_name)
    match = _BLOCK.match(name)
    if match:
        index, slot, part = match.groups()
        suffix = "" if part == "sublayer" else f"_{part}"
        return f"{layer_label(stack, index)}/{slot}{suffix}"
    top = name.split(".")[0]
    return stack + {"tok_emb": "embed"}.get(top, top)


class GradNormMonitor(DeferredLogging):
    """Logs gradient norms every ``every_n_steps`` steps, and at each of the first ``dense_steps`` (warmup)."""

    def __init__(self, every_n_steps: int = 10, dense_steps: int = 0) -> None:
        super().__init__(every_n_steps, dense_steps)
        self.names: list[str] = []
        self.params: list[torch.nn.Parameter] = []
        self.group_index: torch.Tensor | None = None  # group of each parameter (CPU)
        self._device_index: dict[torch.device, torch.Tensor] = {}  # group_index on each device used

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        seen: dict[int, str] = {}
        self.params = []
        for name, p in pl_module.named_parameters():
            if p.requires_grad and id(p) not in seen:
                seen[id(p)] = group_name(name)
                self.params.append(p)
        self.names = sorted(set(seen.values()))
        index = {n: i for i, n in enumerate(self.names)}
        self.group_index = torch.tensor([index[seen[id(p)]] for p in self.params])
        self._device_index = {}

    def compute_tensor(self) -> tuple[list[str], torch.Tensor] | None:
        """``(names, values)``: the group norms and the total on the device (no host sync), or None."""
        grads = [p.grad for p in self.params if p.grad is not None]
        if not grads:
            return None
        assert self.group_index is not None  # set with self.params
        device = grads[0].device
        squares = torch.stack(torch._foreach_norm(grads, 2, dtype=torch.float32)).square()
        present: range | list[int]
        if len(grads) == len(self.params):  # the usual case: every parameter has a gradient
            if device not in self._device_index:
                self._device_index[device] = self.group_index.to(device)
            index, present = self._device_index[device], range(len(self.names))
        else:  # frozen or unused parameters: only the groups that have gradients are logged
            have = torch.tensor([p.grad is not None for p in self.params])
            present = sorted(set(self.group_index[have].tolist()))  # on the CPU: no sync
            index = self.group_index[have].to(device)
        groups = torch.zeros(len(self.names) + 1, device=device)
        groups.index_add_(0, index, squares)
        groups[-1] = squares.sum()
        keep = list(present) + [len(self.names)]
        values = groups.sqrt() if len(keep) == len(self.names) + 1 else groups[keep].sqrt()
        return [f"grad_norm/{self.names[i]}" for i in present] + ["grad_norm/total"], values

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if not self.should_log(trainer.global_step) or not trainer.is_global_zero:
            return
        unscale_once(getattr(trainer.precision_plugin, "scaler", None), optimizer)  # fp16 + fused AdamW
        computed = self.compute_tensor()
        if computed is not None:
            # written straight to the loggers so the chosen steps are logged exactly,
            # independent of Trainer(log_every_n_steps); on a GPU once the copy has arrived
            self.deferred.put(trainer.global_step, *computed, trainer.loggers)
