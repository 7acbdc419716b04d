"""A corpus split as a stream of text chunks: what lets a corpus far larger than memory be tokenised.

A :class:`SplitText` can be read any number of times (the character vocabulary, the BPE merges
and the token file each take a pass), each pass a fresh iterator of chunks of about
:data:`CHUNK_BYTES` that end after a newline (as the BPE pre-tokenizer would cut the whole text),
so preparing a 40 GB corpus needs about as much memory as a 40 MB one.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from ablate.data.sources import DataFormatError
from ablate.data.tokenizers import iter_chunks

# big enough that the tokenizer's per-call overhead vanishes, small enough that a batch of chunks
# keeps every core busy (Tokenizer.encode_stream)
CHUNK_BYTES = 1 << 16


def open_binary(path: Path) -> BinaryIO:
    """``path`` opened for reading bytes, decompressed when it ends in ``.gz``."""
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")  # type: ignore[return-value]


def utf8_error(path: Path, block: bytes, err: UnicodeDecodeError, offset: int) -> DataFormatError:
    """The error for bytes of ``path`` that are not UTF-8 (``block`` starts at byte ``offset``)."""
    return DataFormatError(
        f"{path} is not valid UTF-8 (byte {block[err.start : err.start + 4]!r} at offset {offset + err.start:,}): "
        f"convert it, e.g. `iconv -f latin1 -t utf-8 {path} > fixed.txt`"
    )


def read_file_chunks(path: str | Path, size: int = CHUNK_BYTES) -> Iterator[str]:
    """The UTF-8 text of ``path`` (plain or ``.gz``) in chunks of at least ``size`` bytes ending a line."""
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
    """Rows of a dataset, one line each, joined into chunks of at least ``size`` characters, as a file's."""
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
    """One split's text, readable as chunks any number of times."""

    open: Callable[[], Iterator[str]]  # a fresh pass over the text
    num_bytes: int | None  # UTF-8 bytes when known beforehand (files), None for a stream (a Hub dataset)
    name: str  # where the text comes from, for messages

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
        """A pass over the first whole chunks, up to about ``max_bytes`` (a BPE's training sample)."""
        done = 0
        for chunk in self.open():
            if done >= max_bytes:
                return
            yield chunk
            done += len(chunk.encode("utf-8"))
