"""Our decoder-only LM as a Hugging Face ``transformers`` model, where the architecture is one: two
targets, each an exact re-parametrisation (the same logits up to float rounding).

* **GPT-2** (``GPT2LMHeadModel``): ``pos=learned norm=pre norm.layer=layernorm`` with a plain FFN
  (``gelu_tanh`` -> ``gelu_pytorch_tanh``, bit-equal where ``gelu_new`` is not). GPT-2 always has
  biases: ``model.bias=false`` is exported as zero biases; grouped-query attention with each
  key/value head repeated for the query heads it serves.
* **Llama** (``LlamaForCausalLM``): ``pos=rope norm=pre norm.layer=rmsnorm`` with a gated FFN
  (``swiglu`` -> ``silu``; ``glu``/``bilinear`` run in transformers, maybe not in other runtimes).
  Our RoPE rotates interleaved pairs (2i, 2i+1) (:class:`ablate.nn.positional.Rotary`), HF Llama
  (i, i + head_dim/2) (``rotate_half``) at the same frequency: the rows of W_q and W_k are permuted
  within each head, [0, 2, 4, ..., 1, 3, 5, ...], which leaves every score q.k unchanged.

Anything else that does not map is refused by name (:func:`hf_architecture`); :func:`load_gpt2_weights`
is the reverse GPT-2 mapping.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor

from ablate.errors import UserError
from ablate.nn.axes import ACT, AXES, Axis
from ablate.nn.ffn import hidden_width
from ablate.nn.spec import ModelSpec
from ablate.nn.transformer import TransformerLM

TARGETS = {"learned": "gpt2", "rope": "llama"}  # decided by the position scheme
NAMES = {"gpt2": "GPT-2", "llama": "Llama"}
TOLERANCE = 1e-5  # export_model's verification: the largest logit difference, as a fraction of the largest logit


class ExportError(UserError, ValueError):
    """The checkpoint has no Hugging Face equivalent; the message names the options."""


def hf_architecture(spec: ModelSpec) -> str:
    """``gpt2`` or ``llama``: the HF architecture ``spec`` maps onto exactly; :class:`ExportError`
    naming every option its axis' export entry (:data:`ablate.nn.axes.AXES`) does not list (an axis
    without an entry is refused, never dropped)."""
    if spec.encoder_layers:
        raise ExportError(
            "task=translation (an encoder-decoder) has no GPT-2/Llama equivalent; only decoder-only "
            "task=lm checkpoints export"
        )
    target = TARGETS.get(spec.choice("pos"))
    if target is None:
        raise ExportError(
            f"pos={spec.choice('pos')} has no GPT-2/Llama equivalent (GPT-2: pos=learned, Llama: pos=rope)"
        )
    name, problems = NAMES[target], []
    for axis in AXES:
        chosen = spec.choice(axis.name)
        if axis.export is None:
            problems.append(f"{axis.label}={chosen}: the export does not know the axis {axis.name} (no export entry)")
            continue
        supported = axis.export[target]
        if supported is not None and chosen not in supported:
            problems.append(f"{axis.label}={chosen}: {name} takes {axis.label}={', '.join(supported)}")
    fraction = spec.option("pos").options().get("fraction", 1.0)
    if target == "llama" and float(fraction) != 1.0:
        problems.append(f"pos.fraction={fraction}: Llama rotates every feature of a head (pos.fraction=1.0)")
    if spec.scale_embeddings:
        problems.append(f"model.scale_embeddings=true: {name} does not scale embeddings by sqrt(d_model)")
    if problems:
        raise ExportError(f"no {name} equivalent (chosen by pos={spec.choice('pos')}): " + "; ".join(problems))
    return target


def _ffn_width(spec: ModelSpec) -> int:
    match_params = spec.option("act").options().get("match_params", True)
    return hidden_width(spec.choice("act"), spec.d_ff, match_params)


def _hf_name(spec: ModelSpec, target: str, axis: Axis) -> str:
    """What the target calls the option chosen on ``axis`` (``act=gelu_tanh``: ``gelu_pytorch_tanh``)."""
    return cast(Mapping[str, str], axis.export and axis.export[target])[spec.choice(axis.name)]


def hf_config(spec: ModelSpec) -> Any:
    """The ``transformers`` config of the architecture ``spec`` maps onto."""
    import transformers

    # no special tokens: our models were trained without any
    common: dict[str, Any] = {"vocab_size": spec.vocab_size, "tie_word_embeddings": bool(spec.tie_embeddings)}
    common.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if hf_architecture(spec) == "gpt2":
        return transformers.GPT2Config(
            n_layer=spec.n_layers,
            n_embd=spec.d_model,
            n_head=spec.n_heads,
            n_inner=_ffn_width(spec),
            n_positions=spec.max_len,
            activation_function=_hf_name(spec, "gpt2", ACT),
            layer_norm_epsilon=spec.option("norm_layer").options()["eps"],
            resid_pdrop=spec.dropout,
            embd_pdrop=spec.dropout,
            attn_pdrop=spec.dropout,
            **common,
        )
    theta = float(spec.option("pos").options()["base"])
    rope: dict[str, Any]  # the keyword depends on the transformers version
    if "rope_parameters" in inspect.signature(transformers.LlamaConfig.__init__).parameters:  # transformers >= 5
        rope = {"rope_parameters": {"rope_type": "default", "rope_theta": theta}}
    else:
        rope = {"rope_theta": theta}
    return transformers.LlamaConfig(
        num_hidden_layers=spec.n_layers,
        hidden_size=spec.d_model,
        num_attention_heads=spec.n_heads,
        num_key_value_heads=spec.n_kv_heads or spec.n_heads,
        head_dim=spec.head_dim,
        intermediate_size=_ffn_width(spec),
        hidden_act=_hf_name(spec, "llama", ACT),
        max_position_embeddings=spec.max_len,
        rms_norm_eps=spec.option("norm_layer").options()["eps"],
        attention_bias=spec.bias,
        mlp_bias=spec.bias,
        attention_dropout=spec.dropout,
        **common,
        **rope,
    )


# --- GPT-2 -------------------------------------------------------------------------------------


def gpt2_key_pairs(n_layers: int) -> list[tuple[str, str, bool]]:
    """``(our key, HF key, transposed)`` of every GPT-2 tensor. HF's ``Conv1D`` stores its weight
    as (in, out), the transpose of ``nn.Linear``'s (out, in)."""
    pairs = [("tok_emb.weight", "transformer.wte.weight", False), ("pos.weight", "transformer.wpe.weight", False)]
    for i in range(n_layers):
        b, h = f"blocks.{i}.", f"transformer.h.{i}."
        for ours, theirs, transposed in (
            ("attn.norm", "ln_1", False),
            ("attn.sublayer.qkv", "attn.c_attn", True),
            ("attn.sublayer.out_proj", "attn.c_proj", True),
            ("ffn.norm", "ln_2", False),
            ("ffn.sublayer.fc_in", "mlp.c_fc", True),
            ("ffn.sublayer.fc_out", "mlp.c_proj", True),
        ):
            pairs += [
                (f"{b}{ours}.weight", f"{h}{theirs}.weight", transposed),
                (f"{b}{ours}.bias", f"{h}{theirs}.bias", False),
            ]
    pairs += [
        ("final_norm.weight", "transformer.ln_f.weight", False),
        ("final_norm.bias", "transformer.ln_f.bias", False),
        ("head.weight", "lm_head.weight", False),
    ]
    return pairs


def _repeat_kv(rows: Tensor, n_kv: int, groups: int) -> Tensor:
    """Key or value rows of ``n_kv`` heads (or their bias) with each head repeated ``groups``
    times: query head h reads kv head h // groups, as in :func:`ablate.nn.attention.math_attention`."""
    return rows.reshape(n_kv, -1, *rows.shape[1:]).repeat_interleave(groups, dim=0).flatten(0, 1)


def gpt2_state_dict(model: TransformerLM) -> dict[str, Tensor]:
    """``GPT2LMHeadModel``'s state dict of our ``model`` (see :func:`hf_architecture`): zero biases
    where we have none, full K/V heads."""
    spec = model.spec
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    n_kv = spec.n_kv_heads or spec.n_heads
    for i, block in enumerate(model.blocks):
        for sub in ("attn", "ffn"):
            for name, lin in (
                (n, m)
                for n, m in block.get_submodule(f"{sub}.sublayer").named_children()
                if isinstance(m, torch.nn.Linear)
            ):
                key = f"blocks.{i}.{sub}.sublayer.{name}.bias"
                sd.setdefault(key, torch.zeros(lin.out_features))
            sd.setdefault(f"blocks.{i}.{sub}.norm.bias", torch.zeros(spec.d_model))
        if n_kv != spec.n_heads:
            kv_dim = n_kv * spec.head_dim
            for suffix in ("weight", "bias"):
                key = f"blocks.{i}.attn.sublayer.qkv.{suffix}"
                q, k, v = sd[key].split((spec.d_model, kv_dim, kv_dim))
                groups = spec.n_heads // n_kv
                sd[key] = torch.cat((q, _repeat_kv(k, n_kv, groups), _repeat_kv(v, n_kv, groups)))
    sd.setdefault("final_norm.bias", torch.zeros(spec.d_model))
    return {
        theirs: (sd[ours].T if transposed else sd[ours]).contiguous()
        for ours, theirs, transposed in gpt2_key_pairs(spec.n_layers)
    }


def load_gpt2_weights(model: TransformerLM, hf_state: dict[str, Tensor]) -> None:
    """Copy a ``GPT2LMHeadModel``'s state dict into our ``model`` (same layout: pre-LN, learned
    positions, biases, full multi-head attention), strictly: every tensor of ours is set."""
    ours = {}
    for key, theirs, transposed in gpt2_key_pairs(model.spec.n_layers):
        if key == "head.weight" and model.spec.tie_embeddings:
            continue  # it is tok_emb.weight
        ours[key] = (hf_state[theirs].T if transposed else hf_state[theirs]).clone()
    missing, unexpected = model.load_state_dict(ours, strict=False)
    expected_missing = ["head.weight"] if model.spec.tie_embeddings else []
    if missing != expected_missing or unexpected:
        raise ExportError(f"GPT-2 weights do not fit this model: missing {missing}, unexpected {unexpected}")


# --- Llama -------------------------------------------------------------------------------------


def rope_to_half_split(rows: Tensor, n_heads: int) -> Tensor:
    """Query/key projection rows (or biases) of ``n_heads`` heads, reordered within each head
    from our interleaved RoPE pairs (2i, 2i+1) to HF's half split (i, i + head_dim/2)."""
    per_head = rows.reshape(n_heads, -1, *rows.shape[1:])
    head_dim = per_head.size(1)
    order = torch.cat((torch.arange(0, head_dim, 2), torch.arange(1, head_dim, 2)))
    return per_head[:, order].flatten(0, 1)


def llama_state_dict(model: TransformerLM) -> dict[str, Tensor]:
    """``LlamaForCausalLM``'s state dict of our ``model`` (see :func:`hf_architecture`)."""
    spec = model.spec
    sd = {k: v.detach() for k, v in model.state_dict().items()}
    n_kv = spec.n_kv_heads or spec.n_heads
    kv_dim = n_kv * spec.head_dim
    out = {
        "model.embed_tokens.weight": sd["tok_emb.weight"],
        "model.norm.weight": sd["final_norm.weight"],
        "lm_head.weight": sd["head.weight"],
    }
    for i in range(spec.n_layers):
        b, h = f"blocks.{i}.", f"model.layers.{i}."
        out[h + "input_layernorm.weight"] = sd[b + "attn.norm.weight"]
        out[h + "post_attention_layernorm.weight"] = sd[b + "ffn.norm.weight"]
        for suffix in ("weight", "bias") if spec.bias else ("weight",):
            q, k, v = sd[f"{b}attn.sublayer.qkv.{suffix}"].split((spec.d_model, kv_dim, kv_dim))
            out[f"{h}self_attn.q_proj.{suffix}"] = rope_to_half_split(q, spec.n_heads)
            out[f"{h}self_attn.k_proj.{suffix}"] = rope_to_half_split(k, n_kv)
            out[f"{h}self_attn.v_proj.{suffix}"] = v
            out[f"{h}self_attn.o_proj.{suffix}"] = sd[f"{b}attn.sublayer.out_proj.{suffix}"]
            gate, up = sd[f"{b}ffn.sublayer.fc_in.{suffix}"].chunk(2)  # first half is the gate
            out[f"{h}mlp.gate_proj.{suffix}"], out[f"{h}mlp.up_proj.{suffix}"] = gate, up
            out[f"{h}mlp.down_proj.{suffix}"] = sd[f"{b}ffn.sublayer.fc_out.{suffix}"]
    return {k: v.contiguous() for k, v in out.items()}


# --- export ------------------------------------------------------------------------------------


def to_hf(model: TransformerLM) -> Any:
    """A ``transformers`` model (GPT-2 or Llama, fp32, eval mode) computing what ``model`` computes."""
    import transformers

    config = hf_config(model.spec)  # refuses what does not map
    cls: type[transformers.PreTrainedModel]
    if isinstance(config, transformers.GPT2Config):
        cls, state = transformers.GPT2LMHeadModel, gpt2_state_dict(model)
    else:
        cls, state = transformers.LlamaForCausalLM, llama_state_dict(model)
    hf = cls(config).float().eval()
    missing, unexpected = hf.load_state_dict(state, strict=False)
    if missing or unexpected:  # a layout this module does not know (another transformers version?)
        raise ExportError(
            f"{cls.__name__} does not take the mapped weights: missing {missing}, unexpected {unexpected}"
        )
    return hf


def export_model(model: TransformerLM, out: str | os.PathLike[str], verify: bool = True) -> dict[str, Any]:
    """Write ``model`` as a Hugging Face model directory; with ``verify``, refused first when its logits
    on random tokens differ from ours by more than :data:`TOLERANCE` x the largest |logit| (at least 1;
    float rounding stays ~1e-7 of it). Returns what was written."""
    hf = to_hf(model)
    info: dict[str, Any] = {"architecture": type(hf).__name__, "out": str(out)}
    if verify:  # the largest |logit difference| on random tokens, against the largest |logit| of ours
        from ablate.tasks.lm_eval import random_logits

        idx, ours = random_logits(model)
        with torch.no_grad():
            diff, scale = (hf(idx).logits - ours).abs().max().item(), ours.abs().max().item()
        if not diff <= TOLERANCE * max(1.0, scale):
            raise ExportError(
                f"the exported {type(hf).__name__} differs from the model: max |logit difference| "
                f"{diff:.3g} with logits up to {scale:.3g} (tolerance {TOLERANCE:g} of that)"
            )
        info["max_logit_difference"] = diff
    # transformers' generate() stops at the model's context by default (its own default is 20 tokens), which
    # is as far as it can go: GPT-2's position table has max_len rows (IndexError past them), and a Llama
    # past its training length attends to every token, where generate.py keeps the last max_len (nanoGPT)
    context = model.spec.max_len
    hf.generation_config.max_length = context
    info["max_length"] = context
    info["context"] = (
        f"transformers generates up to {context} tokens with it, prompt included (generation_config.json "
        f"max_length={context}, the model's context: "
        + (
            f"its learned position table has {context} rows); generate.py goes further by keeping the last "
            f"{context} tokens, which transformers' GPT-2 cannot"
            if info["architecture"] == "GPT2LMHeadModel"
            else f"its training length); past it transformers attends to every token, generate.py to the last {context}"
        )
    )
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # a "Writing model shards" bar for one file: the script names what it wrote
    try:
        hf.save_pretrained(out)
    finally:
        hf_logging.enable_progress_bar()
    return info


def export_checkpoint(
    ckpt_path: str | os.PathLike[str], out: str | os.PathLike[str], verify: bool = True
) -> dict[str, Any]:
    """Export the model of a ``task=lm`` checkpoint (see :func:`export_model`); the architecture
    options that do not map are refused by name before anything is written."""
    from ablate.checkpoints.files import CheckpointError
    from ablate.checkpoints.paths import CheckpointFileMissing, require_file
    from ablate.tasks.checkpoints import checkpoint_task, inspect_checked
    from ablate.tasks.lm_eval import load_lm_checkpoint

    try:
        require_file(ckpt_path)
    except CheckpointFileMissing as err:
        raise ExportError(str(err)) from None
    try:
        task_name = checkpoint_task(Path(ckpt_path))  # it reads Path(path) anyway
        spec = ModelSpec.from_dict(inspect_checked(ckpt_path)["hyper_parameters"]["spec"])
    except CheckpointError as err:
        raise ExportError(str(err)) from None
    if task_name != "lm":
        raise ExportError(
            f"task={task_name}: {ckpt_path} is not a decoder-only language model; only task=lm "
            "checkpoints have a GPT-2/Llama equivalent"
        )
    hf_architecture(spec)  # refuse before loading the weights
    task = load_lm_checkpoint(ckpt_path, map_location="cpu", script="scripts/export_hf.py")
    info = export_model(task.model, out, verify=verify)
    if task.tokenizer is not None:  # AutoTokenizer.from_pretrained(out) gives the ids the model was trained on
        from ablate.export.tokenizer import save_hf_tokenizer

        save_hf_tokenizer(task.tokenizer, out, max_len=task.spec.max_len)
        info["tokenizer"] = type(task.tokenizer).__name__
    (Path(out) / "ablate_export.json").write_text(
        json.dumps({"checkpoint": str(Path(ckpt_path).resolve()), "spec": task.spec.as_dict(), **info}, indent=2) + "\n"
    )
    return info
