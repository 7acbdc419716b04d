"""The scale probe: each role's signal at initialisation, measured on one batch.

A flip must change one thing. Flipping ``pos``, ``norm.layer`` or ``act`` must not silently move
another part's scale: the token against the position signal, the residual stream, the branch
outputs, the logits, the gradients. A sinusoid of RMS 0.7 added to tokens of RMS 0.02 compares
signal-to-noise ratios, not encodings. :func:`measure` records these scales for any model built
from :class:`~ablate.nn.stack.Stack` (forward hooks, nothing changed). The run header prints
:meth:`ScaleReport.warnings` when one is far off, ``status.json`` keeps the report, and
``tests/nn/test_scale_contract.py`` holds every option of every axis, under every init, to it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import Tensor, nn

from ablate.nn.block import Block, Residual
from ablate.nn.embedding import TokenEmbedding
from ablate.nn.stack import Stack

POSITION_TO_TOKEN = (1 / 3, 3.0)  # an additive position signal within this factor of the tokens'
LOSS_OVER_LN_VOCAB = 2.0  # an initial loss above 2 ln V: the logits are far from uniform


def _rms(x: Tensor) -> float:
    return float(x.detach().float().pow(2).mean().sqrt())


@dataclass(frozen=True)
class ScaleReport:
    """The scales of one model at initialisation. ``position_rms`` is 0 for a scheme that acts
    inside attention (RoPE, ALiBi, NoPE); ``stream_rms`` is the residual stream entering each block
    and ``branch_rms[kind]`` each block's sub-layer output (``attn``, ``cross``, ``ffn``), in call
    order over the stacks; ``grad_norms`` each block's gradient norm."""

    token_rms: float
    position_rms: float
    stream_rms: list[float]
    branch_rms: dict[str, list[float]]
    logit_std: float
    loss: float
    vocab_size: int
    grad_norms: list[float]

    @property
    def position_to_token(self) -> float | None:
        """The additive position signal's RMS over the token signal's (None: no additive one)."""
        return self.position_rms / self.token_rms if self.position_rms > 0 and self.token_rms > 0 else None

    def warnings(self) -> list[str]:
        """What is far off: a position signal beyond 3x of the tokens', an initial loss above 2 ln V."""
        found = []
        ratio = self.position_to_token
        low, high = POSITION_TO_TOKEN
        if ratio is not None and not low <= ratio <= high:
            found.append(f"position/token signal {ratio:.2g}x (outside [{low:.2g}, {high:g}])")
        if not math.isfinite(self.loss) or self.loss > LOSS_OVER_LN_VOCAB * math.log(self.vocab_size):
            found.append(f"initial loss {self.loss:.3g} > 2 ln V = {2 * math.log(self.vocab_size):.3g}")
        return found

    def line(self) -> str:
        """One line for people: ``scale   tok 0.088  pos/tok 0.71  stream 0.12-0.3  logits 1.0  loss 4.7``."""
        ratio = self.position_to_token
        parts = [
            f"tok {self.token_rms:.2g}",
            f"pos/tok {ratio:.2g}" if ratio is not None else "pos in attention",
            f"stream {min(self.stream_rms):.2g}-{max(self.stream_rms):.2g}",
            f"logits {self.logit_std:.2g}",
            f"loss {self.loss:.3g} (ln V {math.log(self.vocab_size):.3g})",
        ]
        return "  ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "warnings": self.warnings()}


def measure(model: nn.Module, loss: Callable[[], Tensor], vocab_size: int) -> ScaleReport:
    """Run ``loss()`` (one forward pass of ``model`` on a batch) and its backward pass with hooks
    that record the scales, then leave the model as it was: no gradients kept, the RNG restored,
    its train/eval mode unchanged (eval during the pass: dropout off)."""
    seen: dict[str, list[float]] = {"token": [], "stream": [], "attn": [], "cross": [], "ffn": [], "logits": []}
    shapes: list[tuple[int, int]] = []  # (length, width) of the token signal
    hooks = []

    def record(kind: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple[Any, ...], output: Any) -> None:
            if isinstance(output, Tensor):
                seen[kind].append(float(output.detach().float().std()) if kind == "logits" else _rms(output))
                if kind == "token":
                    shapes.append((output.size(-2), output.size(-1)))

        return hook

    for module in model.modules():
        if isinstance(module, TokenEmbedding):
            hooks.append(module.register_forward_hook(record("token")))
        elif isinstance(module, Block):
            hooks.append(module.register_forward_pre_hook(lambda m, args: seen["stream"].append(_rms(args[0]))))
            for kind, residual in (("attn", module.attn), ("cross", module.cross_attn), ("ffn", module.ffn)):
                if isinstance(residual, Residual):
                    hooks.append(residual.sublayer.register_forward_hook(record(kind)))
    head = getattr(model, "head", None)
    if isinstance(head, nn.Module):
        hooks.append(head.register_forward_hook(record("logits")))
    training = model.training
    try:
        model.eval()
        with torch.random.fork_rng(devices=[]):
            value = loss()
            value.backward()
        blocks = [m for m in model.modules() if isinstance(m, Block)]
        grads = [
            math.sqrt(sum(float(p.grad.float().pow(2).sum()) for p in b.parameters() if p.grad is not None))
            for b in blocks
        ]
        stacks = [m for m in model.modules() if isinstance(m, Stack)]
        position = _position_rms(stacks[0], *shapes[0]) if stacks and shapes else 0.0
    finally:
        model.train(training)
        model.zero_grad(set_to_none=True)
        for hook in hooks:
            hook.remove()
    return ScaleReport(
        token_rms=seen["token"][0] if seen["token"] else 0.0,
        position_rms=position,
        stream_rms=seen["stream"],
        branch_rms={k: seen[k] for k in ("attn", "cross", "ffn") if seen[k]},
        logit_std=seen["logits"][-1] if seen["logits"] else float("nan"),
        loss=float(value.detach()),
        vocab_size=vocab_size,
        grad_norms=grads,
    )


def _position_rms(stack: Stack, length: int, width: int) -> float:
    """A stack's additive position signal over ``length`` positions (0: none)."""
    with torch.no_grad():
        zeros = torch.zeros(1, length, width, device=next(stack.parameters()).device)
        return _rms(stack.pos.embed(zeros))
