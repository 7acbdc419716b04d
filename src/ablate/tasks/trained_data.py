"""What a checkpoint was trained on: a resume, or an evaluation of the checkpoint's own corpus, on
other data is refused. A checkpoint records each split's content fingerprint
(:meth:`ablate.data.corpus.CachedCorpus.content_fingerprint`) and its tokenizer, compared with the
current data's before anything is trained; a deliberate change is allowed by name:
``resume_allow_changes=[data.content]`` (the text), ``[data.vocabulary]`` (the tokenizer).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from typing import Any

from ablate.checkpoints.files import inspect_checkpoint
from ablate.config.identity import change_allowed
from ablate.data.stored_tokenizer import load_tokenizer
from ablate.data.tokenizers import tokenizer_to_dict
from ablate.errors import UserError

CONTENT = "data.content"  # resume_allow_changes entry: the text of a split changed
VOCABULARY = "data.vocabulary"  # resume_allow_changes entry: the tokenizer changed


class DataChangedError(UserError, ValueError):
    """The data a run would read is not the data its checkpoint was trained on."""


def stored_content(checkpoint: Mapping[str, Any], datamodule: Any) -> dict[str, str]:
    """Split -> the fingerprint the checkpoint recorded for ``datamodule``'s class (``{}``: none)."""
    state = checkpoint.get(type(datamodule).__qualname__)
    content = state.get("content") if isinstance(state, Mapping) else None
    if not isinstance(content, Mapping):
        return {}
    return {str(k): v for k, v in content.items() if isinstance(v, str)}


def differences(
    checkpoint: Mapping[str, Any], datamodule: Any, path: str | os.PathLike[str], splits: Iterable[str] | None = None
) -> dict[str, tuple[str, str]]:
    """``key -> (checkpoint, now)`` of each split (``data.content.<split>``) and tokenizer that differs."""
    found: dict[str, tuple[str, str]] = {}
    stored = stored_content(checkpoint, datamodule)
    describe = getattr(datamodule, "content_fingerprint", None)
    current = describe() if stored and describe is not None else {}
    for split in splits if splits is not None else sorted(stored):
        if split in stored and split in current and stored[split] != current[split]:
            found[f"{CONTENT}.{split}"] = (stored[split][:16], current[split][:16])
    saved, tokenizer = checkpoint.get("tokenizer"), getattr(datamodule, "tokenizer", None)
    if saved is not None and tokenizer is not None:
        now = tokenizer_to_dict(tokenizer)
        if dict(saved) != now:
            found[VOCABULARY] = (
                _describe(load_tokenizer(saved, path).vocab_size, saved),
                _describe(tokenizer.vocab_size, now),
            )
    return found


def _describe(size: int, state: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(f"{state['kind']}\n{state['content']}".encode()).hexdigest()[:16]
    return f"{state['kind']} tokenizer of {size} tokens, {digest}"


def check_resumed_data(ckpt_path: str | os.PathLike[str], datamodule: Any, allow: Iterable[str]) -> list[str]:
    """Refuse to resume ``ckpt_path`` on other data, unless ``allow``ed; returns the allowed differences."""
    checkpoint = inspect_checkpoint(ckpt_path, weights=False)
    diffs = differences(checkpoint, datamodule, ckpt_path)
    refused = {k: v for k, v in diffs.items() if not change_allowed(k, allow)}
    trained = ((checkpoint.get("hyper_parameters") or {}).get("spec") or {}).get("vocab_size")
    now = getattr(datamodule, "vocab_size", None)
    if VOCABULARY in diffs and not refused and trained is not None and now is not None and trained != now:
        raise DataChangedError(
            f"cannot resume {ckpt_path} on this data: its tokenizer has {now} tokens, the checkpoint's model "
            f"{trained} (data.vocabulary: checkpoint {diffs[VOCABULARY][0]}, now {diffs[VOCABULARY][1]}); no "
            "resume_allow_changes makes the weights fit. Resume on the data it was trained on, or start a new run"
        )
    if refused:
        lines = "\n".join(f"  {k}: checkpoint {old}, now {new}" for k, (old, new) in refused.items())
        keys = sorted({CONTENT if k.startswith(CONTENT) else k for k in refused})
        raise DataChangedError(
            f"refusing to resume {ckpt_path}: the data this run reads is not the data it was trained on:\n{lines}\n"
            "The files changed since the checkpoint was written (or the tokenizer maps the text to other ids), so "
            "the run would go on as neither run. Resume on the data it was trained on, start a new run, or, if the "
            f"change is deliberate, allow it explicitly: '+resume_allow_changes=[{','.join(keys)}]'"
        )
    return [f"{k}: {old} -> {new}" for k, (old, new) in diffs.items()]


# data keys eval.py may override without choosing other text: how it is batched and windowed
NEUTRAL_DATA_KEYS = frozenset(
    {
        "eval_seq_len",
        "eval_batch_size",
        "seq_len",
        "batch_size",
        "micro_batch_size",
        "num_workers",
        "pin_memory",
        "max_tokens",
        "max_sentences",
        "eval_max_tokens",
        "max_eval_pairs",
    }
)


def check_evaluated_data(
    ckpt_path: str | os.PathLike[str], datamodule: Any, split: str, overrides: Iterable[str] = ()
) -> None:
    """``eval.py`` on the checkpoint's own corpus: refuse a ``split`` whose text changed since the
    checkpoint recorded it, naming ``text_file=`` / ``src_file=``; ``overrides`` (the ``data`` keys
    given to eval.py) that choose other text are the user's choice, not checked."""
    if set(overrides) - NEUTRAL_DATA_KEYS:
        return
    diffs = differences(inspect_checkpoint(ckpt_path, weights=False), datamodule, ckpt_path, splits=[split])
    diffs.pop(VOCABULARY, None)  # the evaluations compare the tokenizers themselves, with their own message
    if diffs:
        (old, new), name = next(iter(diffs.values())), getattr(datamodule, "name", "the corpus")
        raise DataChangedError(
            f"{ckpt_path}: the {split} split of {name} is not the text this checkpoint recorded (its tokens: checkpoint "
            f"{old}, now {new}): the files changed since it was trained. To evaluate it on other text on purpose, "
            "give that text as a file (text_file=... for a language model, src_file=... ref_file=... for translation)"
        )
