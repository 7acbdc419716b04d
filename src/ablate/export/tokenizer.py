"""Write a run's tokenizer as a Hugging Face ``transformers`` tokenizer (``tokenizer.json`` +
``tokenizer_config.json``), so that ``AutoTokenizer.from_pretrained(out)`` gives our token ids.

``bpe`` is a ``tokenizers`` object already; ``char`` becomes a ``WordLevel`` vocabulary of the
characters, a pre-tokenizer splitting every character, and a ``Fuse`` decoder.
"""

from __future__ import annotations

import os
from pathlib import Path

from tokenizers import Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from ablate.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer


def hf_tokenizer(tokenizer: Tokenizer) -> HFTokenizer:
    """The ``tokenizers`` object that encodes and decodes exactly as ``tokenizer`` does."""
    if isinstance(tokenizer, BPETokenizer):
        return tokenizer.hf
    if isinstance(tokenizer, CharTokenizer):
        chars = HFTokenizer(models.WordLevel({c: i for i, c in enumerate(tokenizer.chars)}, unk_token=None))
        chars.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")  # every character
        chars.decoder = decoders.Fuse()
        return chars
    raise TypeError(f"no Hugging Face form for {type(tokenizer).__name__}")


def save_hf_tokenizer(tokenizer: Tokenizer, out: str | os.PathLike[str], max_len: int | None = None) -> None:
    """Write ``tokenizer`` into ``out`` for ``AutoTokenizer.from_pretrained`` (no special tokens:
    our models were trained without any)."""
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=hf_tokenizer(tokenizer),
        clean_up_tokenization_spaces=False,
        **({"model_max_length": max_len} if max_len else {}),
    )
    fast.save_pretrained(str(Path(out)))
