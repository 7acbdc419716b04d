"""A corpus split as a stream of text chunks: what lets a corpus far larger than memory be tokenised.

A :class:`SplitText` says where one split's text comes from and can be read any number of times
(the character vocabulary, the BPE merges and the token file each take a pass), each pass a fresh
iterator of chunks of about :data:`CHUNK_BYTES` that end after a newline. Only one chunk (and
what the tokenizer makes of a batch of them) is in memory at a time, so preparing a 40 GB corpus
needs about as much memory as preparing a 40 MB one.

Chunks end after a newline so that the pieces look like what the BPE pre-tokenizer would see in
the whole text (a cut inside a word would split it into two tokens).
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ablate.data.sources import DataFormatError
from ablate.data.tokenizers import iter_chunks

CHUNK_BYTES = 1 << 16
"""About this many bytes per chunk: big enough that the tokenizer's per-call overhead vanishes,
small enough that a batch of them keeps every core busy (:meth:`Tokenizer.encode_stream`)."""


def open_binary(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes, decompressed when it ends in ``.gz``."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # type: ignore[return-value]


def utf8_error(path: Path, block: bytes, err: UnicodeDecodeError, offset: int) -> DataFormatError:
    """The error for bytes of ``path`` that are not UTF-8 (``block`` starts at byte ``offset``):
    it names the file, the bytes and where they are, and how to convert the file."""
    return DataFormatError(
        f"{path} is not valid UTF-8 (byte {block[err.start : err.start + 4]!r} at offset {offset + err.start:,}): "
        f"convert it, e.g. `iconv -f latin1 -t utf-8 {path} > fixed.txt`"
    )


def read_file_chunks(path: str | Path, size: int = CHUNK_BYTES) -> Iterator[str]:
    """The UTF-8 text of ``path`` (plain or ``.gz``) in chunks of at least ``size`` bytes that end
    after a newline (the last one where the file ends); ``"".join`` of them is the file's text.

    A byte sequence that is not UTF-8 raises :class:`DataFormatError` naming the file and the
    byte offset, at the chunk where it occurs.
    """
    path = Path(path)
    offset = 0
    with open_binary(path) as f:
        while block := f.read(size):
            if not block.endswith(b"\n"):
                block += f.readline()  # finish the line: a newline is never inside a UTF-8 character
            try:
                yield block.decode("utf-8")
            except UnicodeDecodeError as err:
                raise utf8_error(path, block, err, offset) from None
            offset += len(block)


def join_rows(rows: Iterable[str], size: int = CHUNK_BYTES) -> Iterator[str]:
    """Rows of a dataset (one line each, newline added where missing) joined into chunks of at
    least ``size`` characters: a Hub stream becomes the same kind of chunks as a file."""
    parts: list[str] = []
    length = 0
    for row in rows:
        line = row if row.endswith("\n") else row + "\n"
        parts.append(line)
        length += len(line)
        if length >= size:
            yield "".join(parts)
            parts, length = [], 0
    if parts:
        yield "".join(parts)


@dataclass(frozen=True)
class SplitText:
    """One split's text, readable as chunks any number of times.

    Attributes:
        open: a fresh pass over the text, as chunks ending after a newline.
        num_bytes: the size of the text in UTF-8 bytes when known beforehand (files; for progress,
            ETA and the disk-space estimate), None for a stream of unknown length (a Hub dataset).
        name: where the text comes from, for messages.
    """

    open: Callable[[], Iterator[str]]
    num_bytes: int | None
    name: str

    @classmethod
    def from_file(cls, path: str | Path) -> SplitText:
        """A text file on disk, streamed (a gzipped file's size is not known before reading it)."""
        path = Path(path)
        size = None if path.suffix == ".gz" else path.stat().st_size
        return cls(lambda: read_file_chunks(path), size, str(path))

    @classmethod
    def from_string(cls, text: str, name: str) -> SplitText:
        """Text already in memory (a small corpus split by characters, such as Tiny Shakespeare)."""
        return cls(lambda: iter_chunks(text, CHUNK_BYTES), len(text.encode("utf-8")), name)

    @classmethod
    def from_rows(cls, rows: Callable[[], Iterable[str]], name: str) -> SplitText:
        """A dataset's text column, one row per line (``rows()`` starts a new pass)."""
        return cls(lambda: join_rows(rows()), None, name)

    def limited(self, max_bytes: int) -> Iterator[str]:
        """A pass over the first chunks, up to about ``max_bytes`` (whole chunks: the sample that
        a BPE is trained on when the corpus is too big to count every word of)."""
        done = 0
        for chunk in self.open():
            if done >= max_bytes:
                return
            yield chunk
            done += len(chunk.encode("utf-8"))
