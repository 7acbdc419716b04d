"""A checkpoint's tokenizer, checked before any script decodes or encodes with it: the kind is known,
its content parses (a mapping of distinct characters, a BPE file) and its size is the model's
vocabulary (:mod:`ablate.checkpoints.parts` checks the checkpoint's other parts)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ablate.checkpoints.parts import PartError
from ablate.data.tokenizers import Tokenizer, TokenizerStateError, tokenizer_from_dict


def check_tokenizer(checkpoint: Mapping[str, Any], vocab_size: int | None, path: str | os.PathLike[str]) -> None:
    """The tokenizer a checkpoint carries (none: an older checkpoint; the scripts that need one say
    so) is a valid one of a known kind, with exactly the model's ``vocab_size`` tokens: a shorter one
    would decode ids it does not have, a longer one encode ids the model has no embedding for."""
    if "tokenizer" not in checkpoint:
        return
    tokenizer = load_tokenizer(checkpoint["tokenizer"], path)
    if vocab_size is not None and tokenizer.vocab_size != vocab_size:
        raise PartError(
            f"{path}: its {checkpoint['tokenizer']['kind']} tokenizer has {tokenizer.vocab_size} tokens, but its model's "
            f"vocabulary has {vocab_size}: the ids would not mean what the model learned (the file was altered); refused"
        )


def load_tokenizer(state: Any, path: str | os.PathLike[str]) -> Tokenizer:
    """A checkpoint's stored tokenizer, or :class:`PartError` naming the file and what is wrong."""
    try:
        return tokenizer_from_dict(state, f"{path}: its tokenizer")
    except TokenizerStateError as err:
        raise PartError(f"{err}; refused") from None
