"""Per-unit losses of a test evaluation: what lets a verdict generalise to new text, not only new seeds.

Every test evaluation records, for each *unit* of the text it scored (a window, a sentence), the
summed NLL in nats, the tokens and the UTF-8 bytes in ``test_units.npz`` (per evaluation tag, with
a ``meta`` key of the exact text: units pair across runs only under equal keys), which
:mod:`ablate.analysis.crossed` turns into an interval over seeds *and* held-out text.

**The text unit of a verdict** (:func:`text_groups`): neighbouring windows of one passage are not
independent draws, so the unit is the **held-out block** when the split has several (finer units
would be pseudo-replicates, issue 43); finer units only where the test split is made of
independent passages (:data:`INDEPENDENT_PASSAGES`), cut into :data:`PASSAGE_GROUPS` groups;
otherwise the split is one unit. Pure numpy: read by the analysis without torch.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

FILENAME = "test_units.npz"
VERSION = 1
FIELDS = ("index", "nats", "tokens", "bytes", "block")
PASSAGE_GROUPS = 16  # text units of a test split made of independent passages
# corpora whose test split is a sequence of independent passages (corpus name -> what a passage is)
INDEPENDENT_PASSAGES = {
    "multi30k": "captions, each of another image",
    "wikitext2": "whole Wikipedia articles",
    "wikitext103": "whole Wikipedia articles",
}


@dataclass(frozen=True)
class Units:
    """One evaluation's units (see the module docstring), arrays of equal length sorted by index."""

    index: np.ndarray
    nats: np.ndarray
    tokens: np.ndarray
    bytes: np.ndarray
    block: np.ndarray
    text: str  # the key of the text and windowing scored
    corpus: str | None = None  # the corpus' name (meta), which says whether its units are independent passages

    def __len__(self) -> int:
        return len(self.index)

    def denominator(self, metric: str) -> np.ndarray:
        """What a metric divides the summed NLL by, per unit: bytes x ln 2 for ``*/bpb*``,
        tokens for ``*/loss*`` (nats per token)."""
        name = metric.split("/", 1)[-1].split("@", 1)[0]
        if name == "bpb":
            if not self.bytes.sum() > 0:
                raise ValueError(f"{metric}: the evaluation recorded no byte counts")
            return self.bytes.astype(float) * np.log(2.0)
        if name == "loss":
            return self.tokens.astype(float)
        raise ValueError(f"{metric}: per-unit values exist for loss and bpb metrics only")


def text_groups(units: Units) -> tuple[np.ndarray, str]:
    """Each unit's *text unit* (the module docstring) and what a text unit is: the held-out blocks
    when the split has two or more; :data:`PASSAGE_GROUPS` contiguous groups of a split made of
    independent passages (:data:`INDEPENDENT_PASSAGES`); else one unit, the whole passage."""
    blocks, block_index = np.unique(units.block, return_inverse=True)
    if len(blocks) >= 2:
        return block_index.astype(int), "held-out blocks"
    if units.corpus in INDEPENDENT_PASSAGES and len(units) >= 2:
        parts = min(PASSAGE_GROUPS, len(units))
        return (np.arange(len(units)) * parts) // len(units), f"groups of {INDEPENDENT_PASSAGES[units.corpus]}"
    return np.zeros(len(units), dtype=int), "one passage"


def metric_tag(metric: str) -> str:
    """``test/bpb@512`` -> ``@512``; ``test/loss`` -> ``""``."""
    return "@" + metric.split("@", 1)[1] if "@" in metric else ""


def write_units(path: str | os.PathLike[str], evaluations: dict[str, dict[str, Any]], meta: dict[str, Any]) -> Path:
    """Write ``evaluations`` (tag -> the fields of :data:`FIELDS` and ``text``) and ``meta`` atomically."""
    path = Path(path)
    arrays: dict[str, np.ndarray] = {}
    texts = {}
    for tag, fields in evaluations.items():
        order = np.argsort(np.asarray(fields["index"]), kind="stable")
        arrays[f"{tag}.index"] = np.asarray(fields["index"], dtype=np.int32)[order]
        arrays[f"{tag}.nats"] = np.asarray(fields["nats"], dtype=np.float32)[order]
        for name in ("tokens", "bytes"):
            arrays[f"{tag}.{name}"] = np.asarray(fields[name], dtype=np.int32)[order]
        arrays[f"{tag}.block"] = np.asarray(fields.get("block", np.zeros(len(order))), dtype=np.int16)[order]
        texts[tag] = str(fields["text"])
    arrays["meta"] = np.array(json.dumps({**meta, "version": VERSION, "text": texts}))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".npz", dir=path.parent)
    os.close(fd)
    try:
        np.savez_compressed(tmp, **arrays)  # type: ignore[arg-type]  # numpy's stub: allow_pickle in **kwds
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def read_units(path: str | os.PathLike[str]) -> tuple[dict[str, Units], dict[str, Any]]:
    """The evaluations of a units file (tag -> :class:`Units`) and its meta (else a ValueError)."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"]))
            texts = meta.get("text") or {}
            out = {}
            for tag, text in texts.items():
                fields = {name: data[f"{tag}.{name}"] for name in FIELDS}
                if len({len(v) for v in fields.values()}) != 1:
                    raise ValueError(f"evaluation {tag or 'test'} has arrays of different lengths")
                out[tag] = Units(**fields, text=str(text), corpus=meta.get("corpus"))
    except (OSError, KeyError, ValueError, TypeError, AttributeError) as err:  # zip, JSON or shape trouble
        raise ValueError(f"{path}: not a readable units file ({type(err).__name__}: {err})") from None
    return out, meta


def block_of(starts: np.ndarray | list[int], bounds: list[int] | tuple[int, ...] | None) -> np.ndarray:
    """The held-out block each unit starting at token ``starts`` lies in, for block boundaries
    ``bounds`` (token offsets, ``[0, end of block 0, ..., end]``); all 0 without blocks."""
    starts = np.asarray(starts)
    if not bounds or len(bounds) < 3:
        return np.zeros(len(starts), dtype=np.int16)
    return (np.searchsorted(np.asarray(bounds[1:-1]), starts, side="right")).astype(np.int16)
