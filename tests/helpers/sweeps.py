"""Synthetic sweep directories in the layout that :func:`ablate.analysis.runs.load_sweep` reads
(``status.json``, ``csv/metrics.csv``, ``.hydra/overrides.yaml`` and ``config.yaml``): the analysis
tested without a training run."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import yaml


def write_job(
    root: Path,
    index: int,
    overrides: list[str],
    metric: str,
    value: float | None,
    status: str = "completed",
    params: int = 1000,
    steps: int = 100,
    config: dict | None = None,
    metrics: pd.DataFrame | None = None,
    started_at: str | None = None,
) -> Path:
    """One job directory as train.py leaves it (the files the loader reads). ``metrics``: the
    whole ``metrics.csv`` (a ``step`` column and one per metric) instead of two rows of ``metric``
    (``value`` + 1 half-way, ``value`` at the end). As train.py, ``status.json`` records the start
    (``started_at``, default now) and the hash of the plan in force in ``root`` (``plan_sha256``)."""
    job = root / f"{index:03d}"
    (job / ".hydra").mkdir(parents=True)
    (job / "csv").mkdir()
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    config_file = job / ".hydra" / "config.yaml"
    config_file.write_text(yaml.safe_dump(config or {"data": {"batch_size": 4, "seq_len": 16}}))
    os.utime(config_file, (1e9 + index, 1e9 + index))  # run order = index
    plan = root / "analysis_plan.json"
    record = {
        "status": status,
        "steps": steps,
        "params": params,
        "wall_time_s": 1.0,
        "metrics": {},
        "started_at": started_at or datetime.now(UTC).isoformat(timespec="seconds"),
        "plan_sha256": json.loads(plan.read_text())["sha256"] if plan.is_file() else None,
    }
    (job / "status.json").write_text(json.dumps(record))
    if metrics is not None:
        metrics.to_csv(job / "csv" / "metrics.csv", index=False)
        return job
    rows = [f"{steps // 2},{(value if value is not None else math.nan) + 1}"]
    rows += [f"{steps},{value}"] if value is not None else []
    (job / "csv" / "metrics.csv").write_text(f"step,{metric}\n" + "\n".join(rows) + "\n")
    return job


def write_sweep(
    root: Path,
    values: dict[str, list[float | None]],
    metric: str = "val/loss",
    diverged: dict[str, list[int]] | None = None,
) -> Path:
    """``{act: [value per seed]}``; seeds 1..n; ``diverged``: ``{act: [seed, ...]}`` (no final value)."""
    index = 0
    for act, seeds in values.items():
        for seed, value in enumerate(seeds, start=1):
            bad = seed in (diverged or {}).get(act, [])
            write_job(
                root,
                index,
                [f"act={act}", f"seed={seed}"],
                metric,
                None if bad else value,
                "diverged" if bad else "completed",
            )
            index += 1
    return root


def write_design(
    root: Path,
    value,
    seeds: tuple[int, ...] = (11, 12, 13),
    lrs: tuple[str, ...] = ("1.4e-3", "2.8e-3"),
    diverged: tuple = (),
) -> Path:
    """The issue-18 design: norm=post,pre x optim.warmup_steps=0,30 x optim.lr=``lrs`` x ``seeds``,
    ``value(norm, warmup, lr, seed)`` the final test/bleu (val/loss logged too, 1/10 of it);
    ``diverged``: (norm, warmup, lr, seed) jobs with no final value."""
    index = 0
    for lr in lrs:
        for norm in ("post", "pre"):
            for warmup in (0, 30):
                for seed in seeds:
                    bad = (norm, warmup, lr, seed) in diverged
                    bleu = math.nan if bad else value(norm, warmup, lr, seed)
                    metrics = pd.DataFrame(
                        {
                            "step": [49, 99, 99],
                            "val/loss": [9.0, bleu / 10, math.nan],
                            "test/bleu": [math.nan] * 2 + [bleu],
                        }
                    )
                    overrides = [f"norm={norm}", f"optim.warmup_steps={warmup}", f"optim.lr={lr}", f"seed={seed}"]
                    write_job(root, index, overrides, "", None, "diverged" if bad else "completed", metrics=metrics)
                    index += 1
    return root
