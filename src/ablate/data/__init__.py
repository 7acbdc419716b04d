"""Data: corpus sources, tokenizers and Lightning data modules for language modelling."""

from ablate.data.lm_data import TextFiles, TinyShakespeare, WikiText2, WikiText103
from ablate.data.lm_datamodule import LMDataModule
from ablate.data.lm_windows import TokenWindows
from ablate.data.sources import DataNotFoundError
from ablate.data.tokenizers import BPETokenizer, CharTokenizer, Tokenizer, build_tokenizer

__all__ = [
    "BPETokenizer",
    "CharTokenizer",
    "DataNotFoundError",
    "LMDataModule",
    "TextFiles",
    "TinyShakespeare",
    "TokenWindows",
    "Tokenizer",
    "WikiText2",
    "WikiText103",
    "build_tokenizer",
]
