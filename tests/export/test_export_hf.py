"""scripts/export_hf.py: a task=lm checkpoint whose architecture is GPT-2 or Llama becomes a Hugging
Face model directory that ``transformers`` loads (offline, from the folder) and that computes our
logits (atol 1e-5 in fp32); every other architecture is refused by the option's name."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.data.tokenizers import CharTokenizer
from ablate.export.hf import ExportError, export_checkpoint, hf_architecture
from ablate.nn.spec import ModelSpec
from ablate.tasks.lm import LanguageModelTask
from helpers import forked_python
from helpers.checkpoints import save_task
from helpers.runs import HANG_TIMEOUT, REPO, TINY
from helpers.tiny_models import tiny_spec

transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.usefixtures("one_thread")

ATOL = 1e-5  # fp32 logits; ours and HF's differ by float rounding only (measured: 0 for GPT-2, ~4e-6 for Llama)
OPTIM = {"name": "adamw", "lr": 1e-3}


def save_checkpoint(path: Path, spec: ModelSpec, seed: int = 0) -> Path:
    """A checkpoint as train.py's look (Lightning's own writer, with the task, its hyper-parameters
    and the tokenizer), of a model whose every weight is random: default inits leave biases at 0
    and norm gains at 1, which would hide a mis-mapped bias or gain."""
    torch.manual_seed(seed)
    task = LanguageModelTask(spec.as_dict(), OPTIM)
    with torch.no_grad():
        for p in task.model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    task.tokenizer = CharTokenizer([chr(ord("!") + i) for i in range(spec.vocab_size)])
    return save_task(task, path)


def compare_with_transformers(ckpt: Path, out: Path, expected_class: str) -> object:
    """Load the export with transformers' own loader and compare its logits with the checkpoint's."""
    hf, loading = transformers.AutoModelForCausalLM.from_pretrained(
        out, local_files_only=True, output_loading_info=True
    )
    assert type(hf).__name__ == expected_class
    assert not any(loading.get(k) for k in ("missing_keys", "unexpected_keys", "mismatched_keys")), loading
    hf = hf.float().eval()
    ours = LanguageModelTask.load_from_checkpoint(str(ckpt), map_location="cpu").model.eval()
    idx = torch.randint(0, ours.spec.vocab_size, (3, ours.spec.max_len), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, got = ours(idx), hf(idx).logits
    assert got.shape == expected.shape
    assert expected.abs().max() > 0.1  # logits are not trivially small
    torch.testing.assert_close(got, expected, rtol=0, atol=ATOL)
    return hf


ROPE = dict(pos="rope", norm_layer="rmsnorm", act="swiglu")
CASES = {
    # name: (spec overrides, HF class, expected config entries)
    "gpt2_gelu_erf": (
        dict(act="gelu"),
        "GPT2LMHeadModel",
        {"activation_function": "gelu", "tie_word_embeddings": True},
    ),
    "gpt2_gelu_tanh": (
        dict(act="gelu_tanh", init="xavier"),
        "GPT2LMHeadModel",
        {"activation_function": "gelu_pytorch_tanh"},
    ),
    "gpt2_gqa_nobias_untied": (
        dict(act="relu", bias=False, norm_bias=False, n_kv_heads=2, tie_embeddings=False, norm_eps=1e-6),
        "GPT2LMHeadModel",
        {"activation_function": "relu", "tie_word_embeddings": False, "layer_norm_epsilon": 1e-6},
    ),
    "llama_gqa": (
        dict(**ROPE, bias=False, n_kv_heads=2),
        "LlamaForCausalLM",
        {"hidden_act": "silu", "num_key_value_heads": 2, "tie_word_embeddings": True, "attention_bias": False},
    ),
    "llama_bias_untied_theta": (
        dict(**ROPE, bias=True, n_kv_heads=1, tie_embeddings=False, norm_eps=1e-6, pos_options={"base": 500000.0}),
        "LlamaForCausalLM",
        {
            "num_key_value_heads": 1,
            "tie_word_embeddings": False,
            "attention_bias": True,
            "mlp_bias": True,
            "rms_norm_eps": 1e-6,
            "intermediate_size": 43,
        },
    ),
}


@pytest.mark.parametrize("name", CASES)
def test_export_loads_in_transformers_with_our_logits(name, tmp_path):
    overrides, cls, config = CASES[name]
    ckpt = save_checkpoint(tmp_path / "last.ckpt", tiny_spec(**overrides))
    out = tmp_path / "hf"
    info = export_checkpoint(ckpt, out, verify=False)  # the check here is independent of the export's own
    assert info["architecture"] == cls
    assert {"config.json", "model.safetensors"} <= {p.name for p in out.iterdir()}
    written = json.loads((out / "config.json").read_text())
    for key, value in config.items():
        assert written[key] == value, (key, written[key])
    if cls == "LlamaForCausalLM":
        theta = overrides.get("pos_options", {}).get("base", 10000.0)
        assert (written.get("rope_parameters") or written)["rope_theta"] == theta
    compare_with_transformers(ckpt, out, cls)


def test_the_export_prints_no_progress_bar(tmp_path, capfd):
    """transformers' tqdm bar "Writing model shards" (one shard) reached the console."""
    ckpt = save_checkpoint(tmp_path / "last.ckpt", tiny_spec())
    export_checkpoint(ckpt, tmp_path / "hf", verify=False)
    captured = capfd.readouterr()
    assert "Writing model shards" not in captured.err + captured.out


REFUSED = {
    # spec overrides -> the option the refusal must name
    "alibi": (dict(pos="alibi"), "pos=alibi has no GPT-2/Llama equivalent"),
    "sinusoidal": (dict(pos="sinusoidal"), "pos=sinusoidal"),
    "nope": (dict(pos="none"), "pos=none"),
    "post": (dict(norm="post"), "norm=post"),
    "sandwich": (dict(**ROPE, norm="sandwich"), "norm=sandwich"),
    "deepnorm": (dict(norm="deepnorm"), "norm=deepnorm"),
    "scalenorm": (dict(norm_layer="scalenorm"), "norm.layer=scalenorm"),
    "gpt2_rmsnorm": (dict(norm_layer="rmsnorm"), "norm.layer=rmsnorm: GPT-2 takes norm.layer=layernorm"),
    "llama_layernorm": (dict(pos="rope", act="swiglu"), "norm.layer=layernorm: Llama takes norm.layer=rmsnorm"),
    "gpt2_gated": (dict(act="swiglu"), "act=swiglu: GPT-2 takes act=gelu, gelu_tanh, relu, silu, relu2"),
    "llama_plain": (dict(pos="rope", norm_layer="rmsnorm", act="gelu"), "act=gelu: Llama takes act=swiglu, geglu"),
    "partial_rotary": (dict(**ROPE, pos_options={"fraction": 0.5}), "pos.fraction=0.5"),
    "scaled_embeddings": (dict(scale_embeddings=True), "model.scale_embeddings=true"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_unmappable_architectures_are_refused_by_name(name, tmp_path):
    overrides, message = REFUSED[name]
    ckpt = save_checkpoint(tmp_path / "last.ckpt", tiny_spec(**overrides))
    with pytest.raises(ExportError, match=message.replace(".", r"\.")):
        export_checkpoint(ckpt, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()  # nothing written


def test_every_option_that_prevents_it_is_named():
    with pytest.raises(ExportError) as err:
        hf_architecture(tiny_spec(norm="post", norm_layer="rmsnorm", act="geglu"))
    assert all(s in str(err.value) for s in ("norm=post", "norm.layer=rmsnorm", "act=geglu"))
    for init in ("pytorch", "xavier", "small"):  # init and attn do not matter
        assert hf_architecture(tiny_spec(init=init, attn="math", **ROPE)) == "llama"


def test_an_axis_without_an_export_entry_is_refused_never_dropped(monkeypatch):
    """A new axis the export does not know (no export entry in its row of AXES) is refused by name,
    whatever its option: the exported model would not be the one trained."""
    import dataclasses

    from ablate.export import hf as hf_export
    from ablate.nn.axes import ATTN, AXES

    assert hf_architecture(tiny_spec(**ROPE)) == "llama"
    monkeypatch.setattr(hf_export, "AXES", [dataclasses.replace(a, export=None) if a == ATTN else a for a in AXES])
    with pytest.raises(ExportError, match="attn=sdpa: the export does not know the axis attn"):
        hf_architecture(tiny_spec(**ROPE))


def test_a_wrong_mapping_is_caught_before_anything_is_written(tmp_path, monkeypatch):
    from ablate.export import hf as hf_export

    monkeypatch.setattr(hf_export, "rope_to_half_split", lambda rows, n_heads: rows)  # RoPE pairs left interleaved
    ckpt = save_checkpoint(tmp_path / "last.ckpt", tiny_spec(**ROPE))
    with pytest.raises(ExportError, match="differs from the model"):
        export_checkpoint(ckpt, tmp_path / "hf")  # verify=True by default
    assert not (tmp_path / "hf").exists()


def test_translation_checkpoints_are_refused(tmp_path):
    ckpt = tmp_path / "mt.ckpt"
    torch.save({"task": "translation", "hyper_parameters": {"spec": tiny_spec(encoder_layers=2).as_dict()}}, ckpt)
    with pytest.raises(ExportError, match="task=translation"):
        export_checkpoint(ckpt, tmp_path / "hf")


def run_export(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return forked_python.run(
        [sys.executable, str(REPO / "scripts" / "export_hf.py"), *args],
        check=False,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


@pytest.mark.slow
def test_train_then_export_a_llama(run_train, tmp_path):
    """A real train.py run (pos=rope with the YAML's base, RMSNorm, SwiGLU, GQA, no biases) exported
    by the script, loaded by transformers; an ALiBi checkpoint is refused by the script by name."""
    run_train(
        *TINY,
        "logger=csv",
        "pos=rope",
        "norm.layer=rmsnorm",
        "act=swiglu",
        "model.bias=false",
        "attn.n_kv_heads=2",
        "eval.test_at_end=false",
    )
    ckpt = next((tmp_path / "logs" / "runs").iterdir()) / "checkpoints" / "last.ckpt"
    proc = run_export(tmp_path, f"ckpt_path={ckpt}", f"out={tmp_path / 'hf'}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    assert info["architecture"] == "LlamaForCausalLM" and info["max_logit_difference"] <= ATOL
    compare_with_transformers(ckpt, tmp_path / "hf", "LlamaForCausalLM")
    assert not list(tmp_path.glob("*.log"))
    # the tokenizer comes along: AutoTokenizer gives the ids the model was trained on
    from transformers import AutoTokenizer

    from ablate.tasks.lm_eval import load_lm_checkpoint

    ours = load_lm_checkpoint(ckpt, map_location="cpu").tokenizer
    text = "ROMEO:\nBut soft, what light through yonder window breaks?\n\n"
    assert AutoTokenizer.from_pretrained(tmp_path / "hf")(text)["input_ids"] == ours.encode(text)

    proc = run_export(tmp_path, f"ckpt_path={ckpt}", f"out={tmp_path / 'hf'}")  # a non-empty folder
    assert proc.returncode != 0 and "overwrite=true" in proc.stderr
    alibi = save_checkpoint(tmp_path / "alibi.ckpt", tiny_spec(pos="alibi"))
    proc = run_export(tmp_path, f"ckpt_path={alibi}", f"out={tmp_path / 'hf_alibi'}")
    assert proc.returncode != 0 and "pos=alibi has no GPT-2/Llama equivalent" in proc.stderr
    assert not (tmp_path / "hf_alibi").exists()


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_exported_tokenizer_gives_our_ids_and_text_back(kind, tmp_path):
    from transformers import AutoTokenizer

    from ablate.data.tokenizers import BPETokenizer, CharTokenizer
    from ablate.export.tokenizer import save_hf_tokenizer

    corpus = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n" * 20
    ours = CharTokenizer.from_text(corpus) if kind == "char" else BPETokenizer.train(corpus, 300)
    save_hf_tokenizer(ours, tmp_path, max_len=64)
    theirs = AutoTokenizer.from_pretrained(tmp_path)
    text = "Speak, speak.\n\n  First Citizen:\nAll"
    ids = theirs(text)["input_ids"]
    assert ids == ours.encode(text)
    assert theirs.decode(ids) == text


@pytest.mark.parametrize("name", ["gpt2_gelu_erf", "llama_gqa"])
def test_the_export_generates_to_its_full_context_in_transformers(name, tmp_path):
    """Issue 35 item 10: transformers' generate() on the export, with no length given, goes to the
    model's context (model.max_len; it stopped at transformers' default of 20 tokens, and GPT-2 raised
    IndexError past its table), token for token what generate.py's greedy decoding makes."""
    from ablate.tasks.generation import generate

    overrides, cls, _ = CASES[name]
    ckpt = save_checkpoint(tmp_path / "last.ckpt", tiny_spec(**overrides))
    info = export_checkpoint(ckpt, tmp_path / "hf", verify=False)
    assert info["max_length"] == 32 and "up to 32 tokens" in info["context"]
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", local_files_only=True).float().eval()
    ours = LanguageModelTask.load_from_checkpoint(str(ckpt), map_location="cpu").model.eval()
    prompt = torch.tensor([[5, 9, 2]])
    with torch.no_grad():
        got = hf.generate(prompt, do_sample=False, pad_token_id=0)
    assert got.shape == (1, ours.spec.max_len)
    assert torch.equal(got, generate(ours, prompt, ours.spec.max_len - 3, temperature=0))
