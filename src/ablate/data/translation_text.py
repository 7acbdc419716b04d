"""Parallel text read as lines, both sides in step, one batch at a time.

A :class:`LineSource` is one language of one split (a local file, plain or gzipped, or a column of
a Hugging Face dataset), read afresh on every pass: the joint BPE learns in one pass over the
training text and the ids are written in a second, so a corpus of millions of pairs is never held
whole. :func:`paired_lines` reads the two sides of a split in step and refuses sides that end at
different lines.
"""

from __future__ import annotations

import gzip
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from itertools import islice, zip_longest
from pathlib import Path
from typing import IO, Any, NamedTuple

from ablate.data.sources import DataFormatError

ENCODE_LINES = 10_000
"""Lines per side read, encoded and written at a time. HF's batch encoding keeps a few KB per line
(its Encoding objects) until the batch is written, so this bounds that memory (~40 MB); a few
thousand lines per call already keep all of its Rust threads busy."""


class LineSource(NamedTuple):
    """One language of one split: ``name`` (a path, for messages) and ``lines()``, which reads the
    sentences afresh each time (the BPE learns in one pass over the training text, the ids are
    written in a second), one at a time."""

    name: str
    lines: Callable[[], Iterator[str]]


def iter_lines(path: Path) -> Iterator[str]:
    """One sentence per line, plain or gzipped UTF-8, surrounding whitespace removed; streamed, so a
    file of millions of lines is never held whole. A file that is not UTF-8 raises
    :class:`DataFormatError` naming it (not a pathless ``UnicodeDecodeError``)."""
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
    """All the lines of a small file, as :func:`iter_lines` reads them (``eval.py``'s source and
    reference files)."""
    return list(iter_lines(path))


def file_source(path: Path) -> LineSource:
    return LineSource(str(path), partial(iter_lines, path))


def hub_source(rows: Any, lang: str, name: str) -> LineSource:
    """One language of a Hub split (``datasets.Dataset``), read ``ENCODE_LINES`` rows at a time
    rather than as a whole column; runs of whitespace become one space."""

    def lines() -> Iterator[str]:
        nested = "translation" in rows.column_names
        for batch in rows.iter(batch_size=ENCODE_LINES):
            texts = (r[lang] for r in batch["translation"]) if nested else batch[lang]
            yield from (" ".join(t.split()) for t in texts)

    return LineSource(f"{name} [{lang}]", lines)


def paired_lines(what: str, sides: Mapping[str, LineSource]) -> Iterator[tuple[str, ...]]:
    """The sides' lines in step. A side that ends before the other raises a ``ValueError`` naming
    every file and its line count (counted to the end: a misaligned corpus is an error, not a
    shorter one)."""
    rows = zip_longest(*(side.lines() for side in sides.values()))
    for n, row in enumerate(rows):  # n: the rows before this one
        if None in row:  # a side has ended: count the others' remaining lines
            rest = [int(x is not None) for x in row]
            for more in rows:
                rest = [r + (x is not None) for r, x in zip(rest, more)]
            counts = ", ".join(f"{lang}: {s.name} ({n + r:,} lines)" for (lang, s), r in zip(sides.items(), rest))
            raise ValueError(f"{what} has different line counts per language: {counts}")
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
