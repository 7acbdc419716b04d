"""Tokenizers for language modelling behind one small interface: ``char`` (one id per character of
the corpus, as nanoGPT's shakespeare_char) and ``bpe`` (byte-level BPE with Hugging Face
``tokenizers``: every string is representable and decodes back exactly).
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import chain
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers, trainers

from ablate.errors import UserError

log = logging.getLogger(__name__)

# text goes to HF tokenizers in chunks of about this size: its Rust code works on several in
# parallel, and a large corpus is never one giant string inside Rust
_CHUNK_CHARS = 1 << 16
# chunks are encoded in batches of about this many characters: 64 chunks keep every core busy,
# while the batch's encodings stay around 100 MB
_BATCH_CHARS = 1 << 22


def iter_chunks(text: str, size: int = _CHUNK_CHARS) -> Iterator[str]:
    """Split ``text`` into consecutive pieces of about ``size`` characters, cut after a newline (close
    to what the BPE pre-tokenizer sees in the whole text); ``"".join(iter_chunks(t)) == t``."""
    start = 0
    while start < len(text):
        cut = text.find("\n", start + size)
        end = len(text) if cut < 0 else cut + 1
        yield text[start:end]
        start = end


class TokenizerStateError(UserError, ValueError):
    """A stored tokenizer (a checkpoint's) that is not one; the message names what is wrong."""


class Tokenizer(ABC):
    """Interface shared by all tokenizers."""

    FILENAME: ClassVar[str]  # its file name in a cache folder

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of distinct token ids; ids are ``0 .. vocab_size - 1``."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``."""

    @abstractmethod
    def decode(self, ids: Sequence[int]) -> str:
        """Text of token ids."""

    @abstractmethod
    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the tokenizer to one file."""

    @classmethod
    @abstractmethod
    def load(cls, path: str | os.PathLike[str]) -> Tokenizer:
        """Read a tokenizer written by :meth:`save`."""

    @classmethod
    @abstractmethod
    def fit(cls, texts: Iterable[str], vocab_size: int) -> Tokenizer:
        """Build the vocabulary from a stream of pieces of text; ``vocab_size`` is a target where it applies."""

    def encode_array(self, text: str) -> np.ndarray:
        """Token ids of ``text`` as an int64 array; subclasses make this fast for big corpora."""
        return np.asarray(self.encode(text), dtype=np.int64)

    def encode_stream(self, chunks: Iterable[str]) -> Iterator[tuple[np.ndarray, int]]:
        """Token ids of a stream of text chunks, in order, as ``(ids, bytes of text they encode)``."""
        for chunk in chunks:
            yield self.encode_array(chunk), len(chunk.encode("utf-8"))


class CharTokenizer(Tokenizer):
    """One token per Unicode character of a fixed vocabulary."""

    FILENAME = "char_vocab.json"

    def __init__(self, chars: Sequence[str]) -> None:
        not_one = next((c for c in chars if not isinstance(c, str) or len(c) != 1), None)
        if not_one is not None:
            raise ValueError(f"CharTokenizer needs single characters; {not_one!r} is not one")
        if len(set(chars)) != len(chars):
            twice = next(c for i, c in enumerate(chars) if c in chars[:i])
            raise ValueError(f"CharTokenizer needs distinct characters; {twice!r} is listed twice")
        self.chars: list[str] = list(chars)
        self._stoi = {c: i for i, c in enumerate(self.chars)}
        # Sorted code points + the id of each, for vectorised lookup in encode_array.
        codes = np.array([ord(c) for c in self.chars], dtype=np.int64)
        self._order = np.argsort(codes)
        self._sorted_codes = codes[self._order]

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """Vocabulary = sorted set of the characters of ``text``."""
        return cls(sorted(set(text)))

    @classmethod
    def fit(cls, texts: Iterable[str], vocab_size: int) -> CharTokenizer:
        """The sorted set of the characters of all pieces (``vocab_size`` is not used)."""
        return cls(sorted(set(chain.from_iterable(texts))))

    @property
    def vocab_size(self) -> int:
        return len(self.chars)

    def encode(self, text: str) -> list[int]:
        try:
            return [self._stoi[c] for c in text]
        except KeyError as err:
            raise ValueError(f"character {err.args[0]!r} is not in the vocabulary") from err

    def encode_array(self, text: str) -> np.ndarray:
        # A Python dict lookup per character is slow for 100+ MB corpora; UTF-32 gives one
        # code point per element, which a binary search maps to ids in bulk.
        codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4").astype(np.int64)
        if codes.size == 0:
            return np.zeros(0, dtype=np.int64)
        pos = np.searchsorted(self._sorted_codes, codes).clip(max=len(self._sorted_codes) - 1)
        unknown = self._sorted_codes[pos] != codes
        if unknown.any():
            raise ValueError(f"character {chr(codes[unknown.argmax()])!r} is not in the vocabulary")
        return self._order[pos]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(self.chars[int(i)] for i in ids)

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps({"type": "char", "chars": self.chars}, ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> CharTokenizer:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        chars = data.get("chars") if isinstance(data, dict) else None
        if not isinstance(chars, list):  # a string would pass as a sequence of characters
            raise ValueError(f'not a character vocabulary: expected {{"chars": [...]}}, found a {type(data).__name__}')
        return cls(chars)


class BPETokenizer(Tokenizer):
    """Byte-level BPE (GPT-2 style) backed by a Hugging Face ``tokenizers.Tokenizer``."""

    FILENAME = "tokenizer.json"
    MIN_VOCAB_SIZE = 256  # the byte alphabet: every string must stay representable

    def __init__(self, tokenizer: HFTokenizer) -> None:
        self.hf = tokenizer

    @classmethod
    def train(cls, text: str | Iterable[str], vocab_size: int = 2048) -> BPETokenizer:
        """Learn merges on ``text`` (a string, or a stream of pieces) up to ``vocab_size`` entries."""
        if vocab_size < cls.MIN_VOCAB_SIZE:
            raise ValueError(
                f"BPE vocab_size must be at least {cls.MIN_VOCAB_SIZE} (the byte alphabet), got {vocab_size}"
            )
        tok = HFTokenizer(models.BPE())
        # No normalizer and no prefix space: decode(encode(text)) must give text back exactly.
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
        )
        # The Rust trainer counts words over the pieces with all cores; it keeps the counts, not the text.
        tok.train_from_iterator(iter_chunks(text) if isinstance(text, str) else text, trainer=trainer)
        return cls(tok)

    @classmethod
    def fit(cls, texts: Iterable[str], vocab_size: int) -> BPETokenizer:
        return cls.train(texts, vocab_size)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.hf.encode(text).ids

    def encode_array(self, text: str) -> np.ndarray:
        parts = [ids for ids, _ in self.encode_stream(iter_chunks(text))]
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    def encode_stream(self, chunks: Iterable[str]) -> Iterator[tuple[np.ndarray, int]]:
        """Batches of about :data:`_BATCH_CHARS` characters, each encoded on every core by
        ``encode_batch_fast`` (which skips the character offsets, costly per token)."""
        batch: list[str] = []
        length = 0
        for chunk in chunks:
            batch.append(chunk)
            length += len(chunk)
            if length >= _BATCH_CHARS:
                yield self._encode_batch(batch)
                batch, length = [], 0
        if batch:
            yield self._encode_batch(batch)

    def _encode_batch(self, chunks: list[str]) -> tuple[np.ndarray, int]:
        encodings = self.hf.encode_batch_fast(chunks)
        ids = np.concatenate([np.asarray(e.ids, dtype=np.int64) for e in encodings])
        return ids, sum(len(c.encode("utf-8")) for c in chunks)

    def decode(self, ids: Sequence[int]) -> str:
        return self.hf.decode([int(i) for i in ids])

    def save(self, path: str | os.PathLike[str]) -> None:
        self.hf.save(str(path))

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> BPETokenizer:
        hf = HFTokenizer.from_file(str(path))
        if type(hf.model).__name__ != "BPE":
            raise ValueError(f"a {type(hf.model).__name__} tokenizer, not a BPE one")
        return cls(hf)


TOKENIZERS: dict[str, type[Tokenizer]] = {"char": CharTokenizer, "bpe": BPETokenizer}


def tokenizer_class(kind: str) -> type[Tokenizer]:
    """The tokenizer class for ``kind``; a ValueError lists the valid kinds."""
    try:
        return TOKENIZERS[kind]
    except KeyError:
        raise ValueError(f"unknown tokenizer {kind!r}; valid kinds: {', '.join(TOKENIZERS)}") from None


def build_tokenizer(
    kind: str, train_text: str | Iterable[str], vocab_size: int, cache_path: str | os.PathLike[str]
) -> Tokenizer:
    """Load the tokenizer stored at ``cache_path``, or fit it on ``train_text`` (a string or a stream
    of pieces) and store it there; ``vocab_size`` is ignored for ``char``."""
    cls = tokenizer_class(kind)
    cache_path = Path(cache_path)
    if cache_path.is_file():
        log.info("Loaded %s tokenizer from %s", kind, cache_path)
        return cls.load(cache_path)
    tokenizer = cls.fit(iter_chunks(train_text) if isinstance(train_text, str) else train_text, vocab_size)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    # Save to a temporary name and rename, so a killed run never leaves a truncated file
    # that the next run would trust.
    fd, tmp = tempfile.mkstemp(dir=cache_path.parent, prefix=f".{cache_path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        tokenizer.save(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; the cache may be shared between users
        os.replace(tmp, cache_path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    log.info("Trained %s tokenizer (vocab %d), saved to %s", kind, tokenizer.vocab_size, cache_path)
    return tokenizer


def tokenizer_to_dict(tokenizer: Tokenizer) -> dict[str, str]:
    """The tokenizer as plain strings, so a checkpoint can carry it and decode on its own."""
    kind = next(k for k, cls in TOKENIZERS.items() if isinstance(tokenizer, cls))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer"
        tokenizer.save(path)
        return {"kind": kind, "content": path.read_text(encoding="utf-8")}


def tokenizer_from_dict(state: Any, where: str = "the tokenizer") -> Tokenizer:
    """The tokenizer :func:`tokenizer_to_dict` stored; anything else: :class:`TokenizerStateError`."""
    if not isinstance(state, Mapping):
        raise TokenizerStateError(f"{where} is a {type(state).__name__}, not a mapping of its kind and content")
    kind, content = state.get("kind"), state.get("content")
    if not isinstance(kind, str) or kind not in TOKENIZERS:
        raise TokenizerStateError(f"{where} has kind={kind!r}, which is not a tokenizer kind ({', '.join(TOKENIZERS)})")
    if not isinstance(content, str):
        raise TokenizerStateError(
            f"{where} ({kind}) holds a {type(content).__name__} as its content, not its file's text"
        )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tokenizer"
        path.write_text(content, encoding="utf-8")
        try:
            return TOKENIZERS[kind].load(path)
        except Exception as err:  # JSONDecodeError, duplicate characters, the Rust parser's own exception, ...
            raise TokenizerStateError(
                f"{where} is not a {kind} tokenizer: {str(err)[:200] or type(err).__name__}"
            ) from None
