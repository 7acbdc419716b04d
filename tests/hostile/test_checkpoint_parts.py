"""Issue 41 items 3 and 8 (the fourth hostile round): every part of a checkpoint is checked before
use, and refused by name (exit code 2) in every entry point: its tokenizer (kind, content, size
against the model's vocabulary), its Lightning version, its training state (callback states, the
run's own state), its format (torch's legacy, non-zip format loads; it is not "corrupt"), and a
directory given as ``ckpt_path``. ``average_checkpoints.py`` refuses NaN weights and mismatched or
bogus tokenizers; ``export_hf.py`` a model and tokenizer that disagree."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.callbacks.averaging import AveragingError, average_checkpoints
from ablate.checkpoints.files import CheckpointError, require_resumable, resolve_ckpt_path
from ablate.checkpoints.paths import CheckpointFileMissing
from ablate.data.tokenizers import CharTokenizer, tokenizer_to_dict
from ablate.export.hf import ExportError, export_checkpoint
from ablate.tasks.checkpoints import inspect_checked, load_task_checkpoint
from helpers import forked_python
from helpers.checkpoints import CHARS, lm_checkpoint, rewrite, translation_checkpoint
from helpers.runs import HANG_TIMEOUT, REPO

pytestmark = pytest.mark.usefixtures("one_thread")


def _tokenizer(value):
    return lambda c: c.__setitem__("tokenizer", value)


def _char_content(chars) -> str:
    return json.dumps({"type": "char", "chars": chars})


# name -> (change, what the refusal says)
TOKENIZERS = {
    "bogus kind": (_tokenizer({"kind": "sentencepiece", "content": "x"}), r"kind='sentencepiece', which is not"),
    "garbage content": (_tokenizer({"kind": "char", "content": "\x00garbage{"}), r"is not a char tokenizer"),
    "bpe garbage": (_tokenizer({"kind": "bpe", "content": "not json"}), r"is not a bpe tokenizer"),
    "duplicate characters": (
        _tokenizer({"kind": "char", "content": _char_content(["a", "b", "a", *CHARS[3:]])}),
        r"'a' is listed twice",
    ),
    "string instead of a mapping": (_tokenizer("char"), r"its tokenizer is a str, not a mapping"),
    "chars a string": (_tokenizer({"kind": "char", "content": json.dumps({"chars": "abc"})}), r"not a character"),
    "shorter than the vocabulary": (
        _tokenizer(tokenizer_to_dict(CharTokenizer(list("abcdefghij")))),
        r"tokenizer has 10 tokens, but its model's vocabulary has 96",
    ),
    "longer than the vocabulary": (
        _tokenizer(tokenizer_to_dict(CharTokenizer([*CHARS, "一"]))),
        r"tokenizer has 97 tokens, but its model's vocabulary has 96",
    ),
}


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    return lm_checkpoint(tmp_path_factory.mktemp("parts") / "good.ckpt")


@pytest.mark.parametrize("name", TOKENIZERS)
def test_a_tampered_tokenizer_is_refused_by_every_loader(good, tmp_path, name):
    change, message = TOKENIZERS[name]
    path = rewrite(good, tmp_path / "tampered.ckpt", change)
    with pytest.raises(CheckpointError, match=message):
        inspect_checked(path)  # a resume, export_hf.py
    with pytest.raises(SystemExit, match=message):
        load_task_checkpoint(path, "lm", "generate.py")  # generate.py, eval.py, translate.py, attention_maps.py


def test_export_refuses_a_model_and_tokenizer_that_disagree(good, tmp_path):
    path = rewrite(good, tmp_path / "short.ckpt", TOKENIZERS["shorter than the vocabulary"][0])
    with pytest.raises(ExportError, match="tokenizer has 10 tokens, but its model's vocabulary has 96"):
        export_checkpoint(path, tmp_path / "hf")
    assert not (tmp_path / "hf").exists()


@pytest.mark.parametrize(
    ("version", "message"),
    [("0.5.0", r"says Lightning 0\.5\.0 wrote it"), ("garbage", r"'garbage' is not a version"), (None, "no Lightning")],
)
def test_a_lightning_version_lightning_cannot_migrate_is_refused(good, tmp_path, version, message):
    def change(c: dict) -> None:
        if version is None:
            del c["pytorch-lightning_version"]
        else:
            c["pytorch-lightning_version"] = version

    path = rewrite(good, tmp_path / "old.ckpt", change)
    with pytest.raises(CheckpointError, match=message):
        inspect_checked(path)
    with pytest.raises(SystemExit, match=message):  # not Lightning's KeyError from its 0.x migration
        load_task_checkpoint(path, "lm", "generate.py")


def test_a_checkpoint_in_torchs_legacy_format_loads_and_a_damaged_one_is_named(good, tmp_path):
    legacy = tmp_path / "legacy.ckpt"
    torch.save(torch.load(good, weights_only=True), legacy, _use_new_zipfile_serialization=False)
    inspect_checked(legacy)  # not "corrupt or truncated": it cannot be memory-mapped, so it is read whole
    assert load_task_checkpoint(legacy, "lm", "generate.py").tokenizer.vocab_size == len(CHARS)
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(legacy.read_bytes()[:5000])
    with pytest.raises(CheckpointError, match=r"corrupt or truncated \(5,000 bytes, not a zip archive"):
        inspect_checked(truncated)


def test_a_directory_as_ckpt_path_is_named_as_one(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(CheckpointFileMissing, match=r"checkpoints is a directory, not a checkpoint file: .*last\.ckpt"):
        resolve_ckpt_path(str(tmp_path / "checkpoints"), [])
    with pytest.raises(SystemExit, match="is a directory, not a checkpoint file"):
        load_task_checkpoint(tmp_path / "checkpoints", "lm", "generate.py")


# --- the training state a resume restores ------------------------------------------------------

MODEL_CHECKPOINT = "ModelCheckpoint{'monitor': 'val/loss', 'mode': 'min'}"


def resumable() -> dict:
    """What train.py's last.ckpt holds besides the weights, as Lightning and our callbacks store it."""
    from ablate.callbacks.checkpointing import collect_rng_states

    return {
        "global_step": 6,
        "epoch": 0,
        "pytorch-lightning_version": "2.6.6",
        "loops": {"fit_loop": {}},
        "optimizer_states": [{"state": {}, "param_groups": []}],
        "lr_schedulers": [{"last_epoch": 6}],
        "callbacks": {
            "ResumeState": {"rng": collect_rng_states(), "wandb_run_id": None, "run_identity": {"seed": 1}},
            MODEL_CHECKPOINT: {"best_model_score": torch.tensor(2.5), "best_model_path": "best.ckpt", "dirpath": "."},
            "DivergenceMonitor": {"initial_loss": 2.9, "first_bad_step": None, "first_bad_loss": None},
        },
    }


def _drop(key):
    return lambda c: c["callbacks"].pop(key)


def _replace(key, value):
    return lambda c: c["callbacks"].__setitem__(key, value)


STATES = {
    "best.ckpt state replaced": (_replace(MODEL_CHECKPOINT, {"x": 1}), r"has no best_model_score"),
    "best.ckpt state a string": (_replace(MODEL_CHECKPOINT, "garbage"), r"is a str, not a mapping"),
    "resume state removed": (_drop("ResumeState"), r"holds no ResumeState .* cannot be compared"),
    "resume state replaced": (_replace("ResumeState", {"foo": 1}), r"ResumeState has no rng"),
    "run identity removed": (lambda c: c["callbacks"]["ResumeState"].pop("run_identity"), r"has no run_identity"),
    "rng states damaged": (lambda c: c["callbacks"]["ResumeState"].__setitem__("rng", {"torch": 1}), r"rng is not"),
    "divergence state damaged": (
        lambda c: c["callbacks"]["DivergenceMonitor"].__setitem__("first_bad_step", "x"),
        r"DivergenceMonitor\.first_bad_step is a str",
    ),
    "optimiser states a string": (lambda c: c.__setitem__("optimizer_states", "x"), r"optimizer_states is a str"),
    "callbacks a list": (lambda c: c.__setitem__("callbacks", []), r"callback states are a list"),
}


@pytest.mark.parametrize("name", STATES)
def test_a_replaced_or_removed_training_state_is_refused_before_the_resume(name):
    checkpoint = resumable()
    require_resumable(checkpoint, "last.ckpt")  # what train.py writes resumes
    change, message = STATES[name]
    change(checkpoint)
    with pytest.raises(CheckpointError, match=message):
        require_resumable(checkpoint, "last.ckpt")


# --- average_checkpoints.py ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def two(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("average")
    a = lm_checkpoint(folder / "a.ckpt")
    return a, rewrite(a, folder / "b.ckpt", lambda c: c["state_dict"]["model.head.weight"].mul_(0.5))


def test_averaging_refuses_non_finite_weights(two, tmp_path):
    def nan(c: dict) -> None:
        c["state_dict"]["model.tok_emb.weight"][0, 0] = float("nan")

    bad = rewrite(two[1], tmp_path / "nan.ckpt", nan)
    average_checkpoints(list(two))  # two finite ones average
    with pytest.raises(AveragingError, match=r"nan\.ckpt: model\.tok_emb\.weight holds 1 NaN/inf value"):
        average_checkpoints([two[0], bad])


def test_averaging_refuses_mismatched_and_bogus_tokenizers(two, tmp_path):
    other = rewrite(two[1], tmp_path / "other.ckpt", _tokenizer(tokenizer_to_dict(CharTokenizer(CHARS[::-1]))))
    with pytest.raises(AveragingError, match="carry different tokenizers"):
        average_checkpoints([two[0], other])
    bogus = rewrite(two[1], tmp_path / "bogus.ckpt", TOKENIZERS["bogus kind"][0])
    with pytest.raises(AveragingError, match=r"kind='sentencepiece', which is not a tokenizer kind"):
        average_checkpoints([bogus, bogus])


# --- the entry points: exit code 2 and the message, no traceback -------------------------------


def run_script(script: str, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)
    return forked_python.run(
        [sys.executable, str(REPO / script), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


@pytest.mark.integration
@pytest.mark.parametrize(
    ("script", "damage", "message"),
    [
        ("generate.py", "shorter than the vocabulary", "tokenizer has 10 tokens"),
        ("generate.py", "longer than the vocabulary", "tokenizer has 97 tokens"),
        ("translate.py", "garbage content", "is not a char tokenizer"),
        ("scripts/export_hf.py", "shorter than the vocabulary", "tokenizer has 10 tokens"),
        ("scripts/average_checkpoints.py", "bogus kind", "kind='sentencepiece'"),
        ("scripts/attention_maps.py", "duplicate characters", "'a' is listed twice"),
        ("eval.py", "lightning 0.5.0", "says Lightning 0.5.0 wrote it"),
        ("scripts/export_hf.py", "lightning 0.5.0", "says Lightning 0.5.0 wrote it"),
    ],
)
def test_every_entry_point_refuses_a_damaged_part_with_exit_2(good, tmp_path, script, damage, message):
    source = translation_checkpoint(tmp_path / "mt.ckpt") if script == "translate.py" else good
    if damage == "lightning 0.5.0":
        change = lambda c: c.__setitem__("pytorch-lightning_version", "0.5.0")  # noqa: E731
    else:
        change = TOKENIZERS[damage][0]
    path = rewrite(source, tmp_path / "damaged.ckpt", change)
    args = {
        "scripts/export_hf.py": [f"out={tmp_path / 'hf'}"],
        "scripts/attention_maps.py": ["text=ROMEO"],
        "generate.py": ["max_new_tokens=3", "prompt='一'" if "longer" in damage else "prompt=ROMEO"],
    }.get(script, [])
    given = [f"ckpts=[{path},{path}]", f"out={tmp_path / 'avg.ckpt'}"] if "average" in script else [f"ckpt_path={path}"]
    proc = run_script(script, [*given, *args], tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "hf").exists() and not (tmp_path / "avg.ckpt").exists()
