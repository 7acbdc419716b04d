"""Real checkpoints of tiny models for the tests of what loads a checkpoint (Lightning's own writer,
with the task, its hyper-parameters and the tokenizer, as train.py's look; no training), and the
hostile variants of them: a crafted stored config, a wrong shape, a removed key, NaN weights."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import torch

from ablate.data.tokenizers import CharTokenizer
from helpers.tiny_models import tiny_spec

OPTIM = {"name": "adamw", "lr": 1e-3}
CHARS = [chr(c) for c in range(32, 127)] + ["\n"]  # printable ASCII and newline


def quiet_trainer(**kwargs: Any) -> L.Trainer:
    """A CPU Trainer that writes and prints nothing of its own: no logger, checkpoints, bar or summary."""
    return L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        **kwargs,
    )


def save_task(task: L.LightningModule, path: Path) -> Path:
    """``task`` saved as train.py saves it: Lightning's own writer, hyper-parameters and tokenizer included."""
    trainer = quiet_trainer()
    trainer.strategy.connect(task)
    trainer.save_checkpoint(path)
    return path


def lm_checkpoint(path: Path, data: dict[str, Any] | None = None, **spec: Any) -> Path:
    """A ``task=lm`` checkpoint of a tiny model with a character tokenizer (printable ASCII)."""
    from ablate.tasks.lm import LanguageModelTask

    torch.manual_seed(0)
    tokenizer = CharTokenizer(CHARS)
    task = LanguageModelTask(tiny_spec(vocab_size=tokenizer.vocab_size, **spec).as_dict(), OPTIM, data=data)
    task.tokenizer = tokenizer
    return save_task(task, path)


def translation_checkpoint(path: Path, data: dict[str, Any] | None = None) -> Path:
    """A ``task=translation`` checkpoint of a tiny encoder-decoder."""
    from ablate.tasks.translation import TranslationTask

    torch.manual_seed(0)
    tokenizer = CharTokenizer(CHARS)
    spec = tiny_spec(vocab_size=tokenizer.vocab_size, encoder_layers=1, pos="sinusoidal", norm="post")
    task = TranslationTask(spec.as_dict(), OPTIM, decode={"beam_size": 1}, data=data)
    task.tokenizer = tokenizer
    return save_task(task, path)


def rewrite(source: Path, out: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """A copy of ``source`` with ``change`` applied to its contents (what a tampering user does)."""
    checkpoint = torch.load(source, map_location="cpu", weights_only=True)
    change(checkpoint)
    torch.save(checkpoint, out)
    return out


class _RunsCode:
    """Unpickled without restriction, it runs a shell command: what ``torch.load(weights_only=False)`` of a crafted file does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def code_running_data_config(tmp_path: Path) -> tuple[dict[str, Any], list[Path]]:
    """Issue 32's stored data config: ``instantiate`` of it writes a file and ``torch.load`` s a second
    file without restriction (which runs its code). Returns it and the files it would create."""
    written, loaded = tmp_path / "WRITTEN_BY_CHECKPOINT", tmp_path / "RAN_FROM_PICKLE"
    pickle_file = tmp_path / "payload.pt"
    torch.save(_RunsCode(loaded), pickle_file)
    config = {
        "_target_": "builtins.dict",
        "a": {
            "_target_": "pathlib.Path.write_text",
            "_args_": [{"_target_": "pathlib.Path", "_args_": [str(written)]}, "owned"],
        },
        "b": {"_target_": "torch.load", "f": str(pickle_file), "weights_only": False},
    }
    return config, [written, loaded]
