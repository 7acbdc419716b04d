"""Attention weights of a trained model for one input, and their heat maps.

The weights of eq. 1 of Vaswani et al. 2017, softmax(Q K^T / sqrt(d_k) + bias) masked, as the model
computes them: each kernel keeps its weights (:attr:`ablate.nn.attention.AttentionKernel.keep_weights`,
the explicit ``math`` path even under ``attn=sdpa``) through the ordinary forward pass, so norms,
rotary embeddings and ALiBi act exactly as in training, one map per *query* head. Nothing is
re-derived here. An LM gives (layers, heads, T, T); a translation model encoder self-, decoder
self- and cross-attention.
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import torch
from matplotlib import colormaps
from matplotlib.figure import Figure
from torch import Tensor, nn

from ablate.nn.attention import AttentionKernel

if TYPE_CHECKING:
    from ablate.nn.block import Block, Residual
    from ablate.nn.seq2seq import EncoderDecoder
    from ablate.nn.transformer import TransformerLM
    from ablate.tasks.lm import LanguageModelTask

# how a few invisible characters are drawn on the axes
VISIBLE = {"\n": "⏎", " ": "␣", "\t": "⇥", "": "∅"}
MAX_LABEL = 8


@contextmanager
def keep_attention_weights(kernels: Sequence[AttentionKernel]) -> Iterator[None]:
    """Make ``kernels`` keep their weights for the duration; flags restored and weights dropped after."""
    before = [k.keep_weights for k in kernels]
    try:
        for kernel in kernels:
            kernel.keep_weights, kernel.weights = True, None
        yield
    finally:
        for kernel, flag in zip(kernels, before):
            kernel.keep_weights, kernel.weights = flag, None


def _run(model: nn.Module, kernels: Sequence[AttentionKernel], forward) -> list[Tensor]:
    """Run ``forward()`` in eval mode without gradients and return each kernel's weights."""
    was_training = model.training
    model.eval()  # no attention dropout: the weights are the ones the model uses at inference
    try:
        with keep_attention_weights(kernels), torch.no_grad():
            forward()
            weights = cast("list[Tensor]", [k.weights for k in kernels])  # kept by the forward pass
    finally:
        model.train(was_training)
    return weights


def _kernel(residual: Residual | None) -> AttentionKernel:
    """The kernel of the attention module that a block's residual wraps."""
    assert residual is not None
    return cast(AttentionKernel, residual.sublayer.kernel)


def lm_attention(model: TransformerLM, ids: Tensor) -> Tensor:
    """Attention weights of a TransformerLM for (T,) ids: (layers, query heads, T, T)."""
    kernels = [_kernel(block.attn) for block in cast("Iterable[Block]", model.blocks)]
    weights = _run(model, kernels, lambda: model(ids[None]))
    return torch.stack([w[0] for w in weights]).float()


def translation_attention(model: EncoderDecoder, src: Tensor, tgt_in: Tensor) -> dict[str, Tensor]:
    """Encoder self-, decoder self- and cross-attention weights for one sentence pair."""
    encoder, decoder = cast("Iterable[Block]", model.encoder.blocks), cast("Iterable[Block]", model.decoder.blocks)
    groups = {
        "encoder self-attention": [_kernel(b.attn) for b in encoder],
        "decoder self-attention": [_kernel(b.attn) for b in decoder],
        "decoder cross-attention": [_kernel(b.cross_attn) for b in decoder],
    }
    kernels = [k for group in groups.values() for k in group]
    weights = iter(_run(model, kernels, lambda: model(src[None], tgt_in[None])))
    return {name: torch.stack([next(weights)[0] for _ in group]).float() for name, group in groups.items()}


def token_labels(tokenizer, ids: Sequence[int], specials: dict[int, str] | None = None) -> list[str]:
    """One readable label per token, whitespace drawn visibly and long pieces shortened."""
    labels = []
    for i in ids:
        if specials and i in specials:
            labels.append(specials[i])
            continue
        text = tokenizer.decode([i])
        text = VISIBLE.get(text, "".join(_visible(c) for c in text))
        labels.append(text if len(text) <= MAX_LABEL else text[: MAX_LABEL - 1] + "…")
    return labels


def _visible(char: str) -> str:
    """A character as drawn on an axis: control characters (untrained models emit them) as ``\\x0c``."""
    if char in VISIBLE:
        return VISIBLE[char]
    return f"\\x{ord(char):02x}" if unicodedata.category(char).startswith("C") else char


def attention_figure(weights: Tensor, query_labels: list[str], key_labels: list[str], title: str) -> Figure:
    """Heat maps, rows = layers, columns = heads, queries down and keys across, one 0-1 colour scale."""
    n_layers, n_heads, n_q, n_k = weights.shape
    # about 0.16 inch per token, so that the labels fit; cross-attention panels are not square
    width, height = (min(4.0, max(1.8, 0.16 * n)) for n in (n_k, n_q))
    fig = Figure(figsize=(width * n_heads + 1.4, height * n_layers + 1.0), layout="constrained")
    axes = fig.subplots(n_layers, n_heads, squeeze=False)
    image = None
    tick_step = max(1, math.ceil(max(n_q, n_k) / 48))  # every token while they fit, else every k-th
    fontsize = 7 if max(n_q, n_k) <= 24 else 5
    # masked pairs (the future, padding) have weight exactly 0: grey, so the mask stands out from
    # merely small weights
    cmap = colormaps["viridis"].with_extremes(bad="#d9d9d9")
    for layer in range(n_layers):
        for head in range(n_heads):
            ax = axes[layer, head]
            values = weights[layer, head].numpy()
            image = ax.imshow(
                np.ma.masked_equal(values, 0.0), vmin=0.0, vmax=1.0, cmap=cmap, interpolation="nearest", aspect="auto"
            )
            ax.set_xticks(range(0, n_k, tick_step), key_labels[::tick_step], fontsize=fontsize, rotation=90)
            ax.set_yticks(range(0, n_q, tick_step), query_labels[::tick_step], fontsize=fontsize)
            if layer == 0:
                ax.set_title(f"head {head}", fontsize="medium")
            if head == 0:
                ax.set_ylabel(f"layer {layer}\nquery token")
            if layer == n_layers - 1:
                ax.set_xlabel("key token (attended to)")
    assert image is not None  # at least one panel
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.6, label="attention weight (grey: masked, exactly 0)")
    fig.suptitle(title)
    return fig


def checkpoint_label(ckpt_path: str | Path) -> str:
    """``<run dir>/best.ckpt`` for ``.../<run dir>/checkpoints/best.ckpt``, else parent folder and name."""
    ckpt = Path(ckpt_path)
    run = ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent
    return f"{run.name}/{ckpt.name}" if run.name else ckpt.name


def map_title(kind: str, model: str, ckpt_path: str | Path, width: int = 90) -> str:
    """``Attention weights (<kind>): <model>`` over the run and checkpoint, broken after commas."""
    run, _, name = checkpoint_label(ckpt_path).rpartition("/")
    where = f"run {run}, checkpoint {name}" if run else f"checkpoint {name}"
    lines = [""]
    for piece in re.split(r"(?<=,)", where):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return f"Attention weights ({kind}): {model}\n" + "\n".join(line.strip() for line in lines)


def save_figure(fig: Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130, bbox_inches="tight")
    return path


@dataclass
class AttentionMap:
    """One grid to draw: the weights of one kind of attention and the tokens on its axes."""

    name: str  # "self-attention", "encoder self-attention", ...
    weights: Tensor  # (layers, heads, queries, keys)
    query_labels: list[str]
    key_labels: list[str]


def describe(spec) -> str:
    """``pos=rope, norm=pre, attn=sdpa, 4 heads (2 kv)``: what the maps' title says about the model."""
    kv = f" ({spec.n_kv_heads} kv)" if spec.n_kv_heads and spec.n_kv_heads != spec.n_heads else ""
    return f"pos={spec.choice('pos')}, norm={spec.choice('norm')}, attn={spec.choice('attn')}, {spec.n_layers} layers x {spec.n_heads} heads{kv}"


def lm_maps(ckpt_path: str | Path, text: str, target: str | None, max_tokens: int) -> tuple[list[AttentionMap], str]:
    """The self-attention maps of a language model for ``text`` (a ``target`` is refused)."""
    from ablate.tasks.checkpoints import load_task_checkpoint

    if target is not None:
        raise ValueError(f"target= applies to translation checkpoints; {ckpt_path} holds a task=lm model")

    task = cast("LanguageModelTask", load_task_checkpoint(ckpt_path, "lm", "attention_maps.py"))
    if task.tokenizer is None:
        raise ValueError(f"{ckpt_path} carries no tokenizer (saved by an older version?); cannot encode the text")
    ids = task.tokenizer.encode(text)[: min(max_tokens, task.spec.max_len)]
    if not ids:
        raise ValueError("text= is empty: give the input to look at, e.g. text='ROMEO: But soft'")
    labels = token_labels(task.tokenizer, ids)
    weights = lm_attention(task.model, torch.tensor(ids))
    return [AttentionMap("self-attention", weights, labels, labels)], describe(task.spec)


def translation_maps(
    ckpt_path: str | Path, text: str, target: str | None, max_tokens: int
) -> tuple[list[AttentionMap], str]:
    """Maps of a translation model for ``text`` and decoder input ``<s> target`` (default: its own translation)."""
    from ablate.data.translation_tokens import BOS, EOS, PAD, encode_lines
    from ablate.tasks.translation import load_translation_checkpoint

    task = load_translation_checkpoint(ckpt_path, "cpu")
    assert task.tokenizer is not None  # load_translation_checkpoint refuses a checkpoint without one
    limit = min(max_tokens, task.spec.max_len) - 1
    src = encode_lines(task.tokenizer, [text])[0][:limit] + [EOS]
    if target is None:
        hyp = task.translate(torch.tensor([src]))[0]
        tgt = [i for i in hyp if i not in (PAD, EOS)]
    else:
        tgt = encode_lines(task.tokenizer, [target])[0]
    tgt_in = [BOS] + tgt[:limit]
    specials = {BOS: "<s>", EOS: "</s>", PAD: "<pad>"}
    src_labels, tgt_labels = token_labels(task.tokenizer, src, specials), token_labels(task.tokenizer, tgt_in, specials)
    weights = translation_attention(task.model, torch.tensor(src), torch.tensor(tgt_in))
    labels = {
        "encoder self-attention": (src_labels, src_labels),
        "decoder self-attention": (tgt_labels, tgt_labels),
        "decoder cross-attention": (tgt_labels, src_labels),
    }
    return [AttentionMap(name, w, *labels[name]) for name, w in weights.items()], describe(task.spec)


def checkpoint_maps(
    ckpt_path: str | Path, text: str, target: str | None = None, max_tokens: int = 64
) -> tuple[list[AttentionMap], str]:
    """The attention maps of a checkpoint (LM or translation) for one input, and a model description."""
    if not Path(ckpt_path).is_file():
        raise FileNotFoundError(f"ckpt_path={ckpt_path}: no such file (a job's checkpoints/best.ckpt or last.ckpt)")
    from ablate.tasks.checkpoints import checkpoint_task

    task = checkpoint_task(ckpt_path)
    if task not in ATTENTION_MAPS:
        raise ValueError(f"{ckpt_path} holds a task={task} checkpoint, which has no attention maps to draw")
    return ATTENTION_MAPS[task](ckpt_path, text, target, max_tokens)


# What ``scripts/attention_maps.py`` draws for a checkpoint of each task: ``(ckpt_path, text, target,
# max_tokens) -> (maps, description)``. Kept here, by task name, so that the task registry
# (:mod:`ablate.tasks`) names no analysis code; a task added elsewhere adds its entry.
MapsOfCheckpoint = Callable[[str | Path, str, str | None, int], tuple[list[AttentionMap], str]]
ATTENTION_MAPS: dict[str, MapsOfCheckpoint] = {"lm": lm_maps, "translation": translation_maps}
