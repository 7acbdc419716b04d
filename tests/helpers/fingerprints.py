"""Numerical fingerprints of freshly built models: what a refactoring of the model code must not move.

For every registered option of every architecture axis (varied alone from the tiny default spec,
decoder-only and encoder-decoder), a few combinations that exercise the fused Q/K/V and GLU
matrices, the default experiment's model, the translation default and the GPT-2 small shape:

* the initial ``state_dict`` after ``torch.manual_seed(0)`` and the build: its names and shapes,
  a float64 checksum of its values and the checksum's scale (the same sum over absolute values);
* the loss of one forward/backward pass on a fixed batch (train mode, so dropout is exercised)
  and the checksum and scale of the gradients.

Those numbers hold on every machine within a tolerance relative to the scale: another CPU's kernels
(another vendor's BLAS path, another vector ISA) round the last bits differently, and sums over
thousands of such values cancel, so the checksum alone is no yardstick. Bit for bit, a machine can
only be held to what that same machine computed: ``machines`` holds sha256 hashes of the tensors' bytes
per machine, compared only where the CPU model (name, family, model, stepping), the vector ISA and
torch are exactly the recorded ones (``tests/nn/test_fingerprints.py``).

First recorded on main 780a50a, before the one-Stack refactoring; re-recorded (``--all``) for the
scale contract of issue 50, which moved the numbers on purpose: the default init became xavier, the
sinusoid's amplitude the token signal's RMS, ``init=pytorch``'s tables nn.Linear's scale and DyT's
alpha its input's (``docs/architecture.md``, "The scale contract"). ``cd tests && python -m helpers.fingerprints`` adds (or
replaces) this machine's hashes in ``tests/nn/fingerprints.json``, after checking that its numbers
agree with the recorded ones within the tolerance; ``--all`` rewrites the whole file (only ever from
code whose numerics are known to be unchanged). A recording whose CPU model is unknown (``null``)
matches no machine.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from helpers.tiny_models import OPTIONS, TINY  # read from the table of axes

TESTS = Path(__file__).resolve().parents[1]  # this file is tests/helpers/fingerprints.py
FIXTURE = TESTS / "nn" / "fingerprints.json"
CONF = TESTS.parent / "conf"
PAD = 0  # the translation models' padding id in these batches


def _variants() -> list[tuple[str, dict[str, Any]]]:
    cases: list[tuple[str, dict[str, Any]]] = []
    for field, values in OPTIONS.items():  # every axis of the table, a new one included (recorded once it is)
        for value in values:
            over: dict[str, Any] = {field: value}
            if value == "deepnorm" or value == "deepnet":
                over.update(norm="deepnorm", init="deepnet")  # a pair (config.validate)
            cases.append((f"{field}={value}", over))
    combos = {  # fused matrices with unequal parts (GQA) under the schemes that split them
        "xavier+swiglu+gqa": dict(init="xavier", act="swiglu", n_kv_heads=2),
        "deepnet+swiglu+gqa": dict(norm="deepnorm", init="deepnet", act="swiglu", n_kv_heads=2),
        "small+swiglu": dict(init="small", act="swiglu"),
        "rope_half+rmsnorm+nobias": dict(pos="rope", pos_options={"fraction": 0.5}, norm_layer="rmsnorm", bias=False),
        "dyt_alpha+sandwich": dict(norm_layer="dyt", norm_options={"alpha_init": 0.8}, norm="sandwich"),
        "untied+scaled+dropout": dict(tie_embeddings=False, scale_embeddings=True, dropout=0.1),
    }
    return cases + list(combos.items())


@contextmanager
def _one_thread() -> Iterator[None]:
    """Fingerprints do not depend on the thread count of the process that computes them."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _digest(tensors: list[torch.Tensor]) -> tuple[str, float, float]:
    """sha256 of the tensors' bytes; a float64 checksum (position-weighted sums) and its scale (the
    same sum of absolute values), for a comparison with a tolerance relative to the scale."""
    h = hashlib.sha256()
    checksum = scale = 0.0
    for i, t in enumerate(tensors):
        t = t.detach().contiguous().cpu()
        h.update(str(t.dtype).encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        checksum += (i + 1) * t.double().sum().item()
        scale += (i + 1) * t.double().abs().sum().item()
    return h.hexdigest(), checksum, scale


def fingerprint(build: Callable[[], torch.nn.Module], step: Callable[[torch.nn.Module], torch.Tensor]) -> dict:
    with _one_thread():
        torch.manual_seed(0)
        model = build()
        state = model.state_dict()
        state_sha, state_sum, state_scale = _digest(list(state.values()))
        layout = [[name, list(t.shape)] for name, t in state.items()]
        model.train()
        torch.manual_seed(1)
        loss = step(model)
        loss.backward()
        named = [(n, p) for n, p in model.named_parameters()]
        grads = [p.grad if p.grad is not None else torch.zeros(0) for _, p in named]
        grad_sha, grad_sum, grad_scale = _digest(grads)
    return {
        "layout": layout,
        "state_sha256": state_sha,
        "state_sum": state_sum,
        "state_scale": state_scale,
        "loss": loss.item().hex(),
        "grad_sha256": grad_sha,
        "grad_sum": grad_sum,
        "grad_scale": grad_scale,
    }


def lm_step(vocab: int, batch: int = 2, length: int = 17) -> Callable[[torch.nn.Module], torch.Tensor]:
    def step(model: torch.nn.Module) -> torch.Tensor:
        tokens = torch.randint(0, vocab, (batch, length))
        logits = model(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    return step


def seq2seq_step(vocab: int) -> Callable[[torch.nn.Module], torch.Tensor]:
    def step(model: torch.nn.Module) -> torch.Tensor:
        src = torch.randint(1, vocab, (2, 9))
        src[1, 6:] = PAD  # a padded source row
        tgt = torch.randint(1, vocab, (2, 8))
        tgt[0, 6:] = PAD
        logits = model(src, tgt[:, :-1], src != PAD)
        return F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=PAD)

    return step


def composed_spec(overrides: list[str], vocab_size: int, max_len: int) -> Any:
    from hydra import compose, initialize_config_dir

    from ablate.run.config import RunConfig

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="train", overrides=overrides)
    return RunConfig.from_hydra(cfg).model_spec(vocab_size=vocab_size, max_len=max_len)


def cases(include_large: bool = True) -> dict[str, tuple[Callable[[], torch.nn.Module], Callable]]:
    """name -> (build, step): every fingerprinted model."""
    from ablate.nn.seq2seq import EncoderDecoder
    from ablate.nn.spec import ModelSpec
    from ablate.nn.transformer import TransformerLM

    def lm(spec: ModelSpec) -> Callable[[], torch.nn.Module]:
        return lambda: TransformerLM(spec)

    def s2s(spec: ModelSpec) -> Callable[[], torch.nn.Module]:
        return lambda: EncoderDecoder(spec, pad_id=PAD)

    out: dict[str, tuple[Callable[[], torch.nn.Module], Callable]] = {}
    for name, over in _variants():
        spec = ModelSpec.from_flat({**TINY, **over}).validate()
        out[f"lm/{name}"] = (lm(spec), lm_step(TINY["vocab_size"]))
        out[f"seq2seq/{name}"] = (
            s2s(ModelSpec.from_flat({**TINY, "encoder_layers": 2, **over}).validate()),
            seq2seq_step(50),
        )
    for tie in ("decoder", "none"):
        spec = ModelSpec(**{**TINY, "encoder_layers": 3, "n_layers": 2, "tie_embeddings": tie}).validate()
        out[f"seq2seq/tie={tie}"] = (s2s(spec), seq2seq_step(50))
    # the default experiment (Tiny Shakespeare characters: 65 of them, windows of 128)
    default = composed_spec([], vocab_size=65, max_len=128)
    out["default"] = (lm(default), lm_step(65, batch=2, length=33))
    translation = composed_spec(["task=translation"], vocab_size=8000, max_len=256)
    out["translation_default"] = (s2s(translation), seq2seq_step(8000))
    if include_large:
        gpt2 = composed_spec(["model=gpt2_small", "pos=learned"], vocab_size=50257, max_len=1024)
        out["gpt2_small"] = (lm(gpt2), lm_step(50257, batch=1, length=9))
    return out


LARGE = ("gpt2_small",)
HASHED = ("state_sha256", "loss", "grad_sha256")  # what a machine's recording holds, compared bit for bit
# Tolerances of the machine-independent comparison. Another CPU's kernels move the gradient checksum
# by about 2e-8 of its scale (AMD EPYC against the recording machine, every model): 1e-6 is 50 times
# that, and far below what any change of the model code moves (a different init or op order: 1e-3+).
SUM_TOLERANCE = 1e-6  # of the checksum's scale
LOSS_TOLERANCE = 1e-5  # relative


def this_machine() -> dict[str, Any]:
    """What decides the bits a CPU computes: the CPU model, the vector ISA torch dispatches to, torch
    (with its bundled BLAS and oneDNN) and the architecture."""
    import platform

    return {
        "cpu_model": cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "torch": str(torch.__version__),
        "machine": platform.machine(),
    }


def cpu_model() -> str | None:
    """The CPU's name with its family, model and stepping (``/proc/cpuinfo``); None where unknown.
    The name alone can hide different parts (a VM reports "AMD EPYC" for several generations)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return None
    first = text.split("\n\n")[0]
    fields = dict(line.split(":", 1) for line in first.splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    name = fields.get("model name")
    if not name:
        return None
    return f"{name} (family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}, stepping {fields.get('stepping', '?')})"


def exact_hashes(recorded: dict[str, Any], machine: dict[str, Any]) -> dict[str, dict[str, str]] | None:
    """The hashes recorded on exactly this machine, or None: then only the tolerance applies."""
    if machine.get("cpu_model") is None:
        return None
    for entry in recorded.get("machines", []):
        if entry["recorded_on"] == machine:
            return entry["hashes"]
    return None


def within_tolerance(got: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """What differs beyond the tolerance between a fingerprint and its record (empty: none)."""
    wrong = []
    for part in ("state", "grad"):
        limit = SUM_TOLERANCE * max(expected[f"{part}_scale"], 1e-30)
        if not abs(got[f"{part}_sum"] - expected[f"{part}_sum"]) <= limit:
            wrong.append(f"{part}_sum {got[f'{part}_sum']!r} != {expected[f'{part}_sum']!r} (limit {limit:.3g})")
    loss, want = float.fromhex(got["loss"]), float.fromhex(expected["loss"])
    if not math.isclose(loss, want, rel_tol=LOSS_TOLERANCE):
        wrong.append(f"loss {loss!r} != {want!r}")
    return wrong


def layout_names(fp: dict[str, Any]) -> list[str]:
    return [f"{name} {'x'.join(map(str, shape))}" for name, shape in fp["layout"]]


def record_all() -> dict[str, Any]:
    """The whole fixture from this code on this machine."""
    fps = {name: fingerprint(build, step) for name, (build, step) in cases().items()}
    layouts: dict[str, list] = {}  # the names and shapes once per distinct layout: most variants share one
    models: dict[str, dict[str, Any]] = {}
    for name, fp in fps.items():
        key = hashlib.sha256(json.dumps(fp["layout"]).encode()).hexdigest()[:16]
        layouts[key] = layout_names(fp)
        models[name] = {k: v for k, v in fp.items() if k not in ("layout", "state_sha256", "grad_sha256")}
        models[name]["layout"] = key
    hashes = {name: {k: fp[k] for k in HASHED} for name, fp in fps.items()}
    return {"layouts": layouts, "models": models, "machines": [{"recorded_on": this_machine(), "hashes": hashes}]}


def add_this_machine(recorded: dict[str, Any]) -> dict[str, Any]:
    """The fixture with this machine's hashes added, refused where a number is outside the tolerance."""
    hashes = {}
    for name, (build, step) in cases().items():
        if name not in recorded["models"]:
            continue
        fp = fingerprint(build, step)
        wrong = within_tolerance(fp, recorded["models"][name])
        if wrong:
            raise SystemExit(f"{name}: {'; '.join(wrong)}: this code computes other numbers; nothing written")
        hashes[name] = {k: fp[k] for k in HASHED}
    machine = this_machine()
    others = [m for m in recorded.get("machines", []) if m["recorded_on"] != machine]
    return {**recorded, "machines": [*others, {"recorded_on": machine, "hashes": hashes}]}


def write(fixture: dict[str, Any]) -> None:
    FIXTURE.write_text(json.dumps(fixture, indent=1, sort_keys=True) + "\n")
    print(f"wrote {FIXTURE} ({FIXTURE.stat().st_size} bytes)")


if __name__ == "__main__":
    import sys

    write(record_all() if "--all" in sys.argv[1:] else add_this_machine(json.loads(FIXTURE.read_text())))
