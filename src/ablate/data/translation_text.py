"""Parallel text read as lines, both sides in step, one batch at a time.

A :class:`LineSource` is one language of one split, read afresh on every pass, so a corpus of
millions of pairs is never held whole; :func:`check_aligned` (before anything is trained) and
:func:`paired_lines` refuse sides of different lengths.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Mapping, Sequence
from functools import partial
from itertools import islice, zip_longest
from pathlib import Path
from typing import IO, Any, NamedTuple

from ablate.data.sources import DataFormatError
from ablate.data.text_stream import open_binary, utf8_error

# lines per side encoded and written at a time: bounds the few KB per line HF's batch encoding
# keeps (~40 MB), while keeping all of its Rust threads busy
ENCODE_LINES = 10_000
COUNT_BYTES = 1 << 20  # bytes read at a time when counting lines


class TextSize(NamedTuple):
    """What :func:`count_lines` finds in a file: its lines and its (decompressed) bytes."""

    lines: int
    num_bytes: int


class MisalignedFilesError(DataFormatError):
    """The sides of a split have different numbers of lines; the message names every file and count."""


class LineSource(NamedTuple):
    """One language of one split: ``name`` (for messages), ``lines()`` (a fresh pass over its
    sentences) and ``size()`` (its :class:`TextSize`; None: not known beforehand, a Hub dataset)."""

    name: str
    lines: Callable[[], Iterator[str]]
    size: Callable[[], TextSize] | None = None


def iter_lines(path: Path) -> Iterator[str]:
    """One sentence per line, plain or gzipped UTF-8, stripped, streamed (not UTF-8: :class:`DataFormatError`)."""
    opener: Callable[..., IO[str]] = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt", encoding="utf-8") as f:
            yield from (line.strip() for line in f)
    except UnicodeDecodeError as err:
        raise DataFormatError(
            f"{path} is not valid UTF-8 (byte {err.object[err.start : err.start + 4]!r}): convert it, "
            f"e.g. `iconv -f latin1 -t utf-8 {path} > fixed.txt`"
        ) from None


def read_lines(path: Path) -> list[str]:
    """All the lines of a small file, as :func:`iter_lines` reads them."""
    return list(iter_lines(path))


def file_source(path: Path) -> LineSource:
    return LineSource(str(path), partial(iter_lines, path), partial(count_lines, path))


def count_lines(path: Path) -> TextSize:
    """The lines (universal newlines, as :func:`iter_lines` reads them) and bytes of a file, plain or
    gzipped, read in binary blocks, each checked to be UTF-8 before a BPE is trained on the others."""
    lines = size = 0
    last = b""
    with open_binary(path) as f:
        while block := f.read(COUNT_BYTES):
            if not block.endswith(b"\n"):
                block += f.readline()  # whole lines: neither a character nor a "\r\n" is cut in two
            try:
                block.decode("utf-8")
            except UnicodeDecodeError as err:
                raise utf8_error(path, block, err, size) from None
            lines += block.count(b"\n") + block.count(b"\r") - block.count(b"\r\n")
            size += len(block)
            last = block[-1:]
    if last not in (b"", b"\n", b"\r"):
        lines += 1  # the last line has no line end
    return TextSize(lines, size)


def check_aligned(what: str, sides: Mapping[str, LineSource]) -> dict[str, TextSize] | None:
    """Each side's :class:`TextSize`, checked to have as many lines (None: a side not countable)."""
    counters = [side.size for side in sides.values()]
    if any(count is None for count in counters):
        return None
    sizes = {lang: count() for lang, count in zip(sides, counters) if count is not None}
    empty = [side.name for lang, side in sides.items() if sizes[lang].lines == 0]
    if empty:  # named here: later it would look like a data.seq_len too small for every pair
        raise DataFormatError(f"{what}: {empty[0]} is empty (0 lines); each file holds one sentence per line")
    if len({size.lines for size in sizes.values()}) > 1:
        raise misaligned(what, sides, [size.lines for size in sizes.values()])
    return sizes


def misaligned(what: str, sides: Mapping[str, LineSource], counts: Sequence[int]) -> MisalignedFilesError:
    """The error for sides of ``what`` with different line ``counts``: every file and its count."""
    listed = ", ".join(f"{lang}: {side.name} ({n:,} lines)" for (lang, side), n in zip(sides.items(), counts))
    return MisalignedFilesError(
        f"{what} has different line counts per language: {listed}. Line i of each file must be the "
        "translation of line i of the other: fix the files (e.g. compare them with `wc -l`)"
    )


def hub_source(rows: Any, lang: str, name: str) -> LineSource:
    """One language of a Hub split, read ``ENCODE_LINES`` rows at a time, whitespace runs as one space."""

    def lines() -> Iterator[str]:
        nested = "translation" in rows.column_names
        for batch in rows.iter(batch_size=ENCODE_LINES):
            texts = (r[lang] for r in batch["translation"]) if nested else batch[lang]
            yield from (" ".join(t.split()) for t in texts)

    return LineSource(f"{name} [{lang}]", lines)


def paired_lines(what: str, sides: Mapping[str, LineSource]) -> Iterator[tuple[str, ...]]:
    """The sides' lines in step; sides of different lengths raise :class:`MisalignedFilesError`."""
    rows = zip_longest(*(side.lines() for side in sides.values()))
    for n, row in enumerate(rows):  # n: the rows before this one
        if None in row:  # a side has ended: count the others' remaining lines
            rest = [int(x is not None) for x in row]
            for more in rows:
                rest = [r + (x is not None) for r, x in zip(rest, more)]
            raise misaligned(what, sides, [n + r for r in rest])
        yield row


def chunks(rows: Iterator[tuple[str, ...]], size: int) -> Iterator[list[tuple[str, ...]]]:
    while chunk := list(islice(rows, size)):
        yield chunk


def head_lines(path: Path, n: int) -> list[str]:
    """The first ``n`` lines of a cached validation/test text (small: read whole)."""
    return path.read_text(encoding="utf-8").split("\n")[:n]


def find_file(folder: Path, stem: str) -> Path | None:
    """``folder/stem`` or ``folder/stem.gz``, whichever exists."""
    for name in (stem, f"{stem}.gz"):
        if (folder / name).is_file():
            return folder / name
    return None
