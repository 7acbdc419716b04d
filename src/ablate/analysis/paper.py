"""A paper's reported numbers, to put beside a sweep's (``scripts/summarize.py --paper FILE``).

An experiment that reproduces a paper ships them as ``experiments/<name>/paper.yaml``::

    source: "Xiong et al. 2020, On Layer Normalization in the Transformer Architecture, Table 1"
    metric: test/bleu            # the metric the numbers are (a name this repository logs)
    rows:                        # one row per configuration the paper reports
      - axes: {norm: post}       # config keys -> values, spelled as on the command line
        value: 34.5
      - axes: {norm: pre, optim.lr: 1e-3}
        value: 35.2
        note: "no warmup"        # optional, shown in the table
      - axes: {norm: post, optim.lr: 1e-3}
        value: diverged          # a value may be text

A row matches every configuration with its ``axes`` values (``1e-3`` = ``0.001``; keys the sweep
does not vary are looked up in the configs). As CSV: a column per axis key, ``value``, ``metric``
and optional ``source`` and ``note``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from ablate.analysis.job import Job, canonical

_RESERVED_CSV = ("value", "metric", "source", "note")


@dataclass
class PaperRow:
    axes: dict[str, str]
    value: float | str | None
    note: str = ""

    def matches(self, job: Job) -> bool:
        return all(job.value(key) == value for key, value in self.axes.items())


@dataclass
class PaperResults:
    metric: str
    source: str
    rows: list[PaperRow] = field(default_factory=list)

    def lookup(self, job: Job) -> PaperRow | None:
        """The first row that matches ``job``'s configuration, or None."""
        return next((row for row in self.rows if row.matches(job)), None)


def _value(raw: Any) -> float | str | None:
    if raw is None or isinstance(raw, bool):
        return raw
    try:
        return float(raw)
    except (TypeError, ValueError):
        return str(raw)


def load_paper(path: str | Path) -> PaperResults:
    """Read a ``paper.yaml`` (or ``.csv``) file in the format of the module docstring."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"--paper {path}: no such file")
    loader = _from_csv if path.suffix.lower() == ".csv" else _from_yaml
    return loader(path)


def _from_yaml(path: Path) -> PaperResults:
    doc = yaml.safe_load(path.read_text()) or {}
    missing = [k for k in ("metric", "rows") if k not in doc]
    if missing or not isinstance(doc.get("rows"), list):
        raise ValueError(
            f"{path}: a paper file needs `metric: <name>` and "
            "`rows: [{axes: {key: value}, value: number}, ...]` "
            f"(missing: {', '.join(missing) or 'rows as a list'}); see ablate/analysis/paper.py"
        )
    rows = []
    for i, row in enumerate(doc["rows"]):
        if not isinstance(row, dict) or not isinstance(row.get("axes"), dict) or "value" not in row:
            raise ValueError(f"{path}: row {i} is {row!r}; each row needs `axes: {{key: value}}` and `value`")
        rows.append(
            PaperRow(
                {k: canonical(v) for k, v in row["axes"].items()}, _value(row["value"]), str(row.get("note") or "")
            )
        )
    return PaperResults(str(doc["metric"]), str(doc.get("source") or ""), rows)


def _from_csv(path: Path) -> PaperResults:
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    if "value" not in frame or "metric" not in frame:
        raise ValueError(f"{path}: a paper CSV needs a `value` and a `metric` column besides the axis columns")
    metrics = set(frame["metric"])
    if len(metrics) != 1:
        raise ValueError(f"{path}: one metric per paper file, found {sorted(metrics)}")
    axes = [c for c in frame.columns if c not in _RESERVED_CSV]
    rows = [
        PaperRow({a: canonical(r[a]) for a in axes if r[a] != ""}, _value(r["value"]), r.get("note", ""))
        for _, r in frame.iterrows()
    ]
    source = next(iter(set(frame["source"])), "") if "source" in frame else ""
    return PaperResults(metrics.pop(), source, rows)
