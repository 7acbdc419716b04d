"""Synthetic sweep folders whose runs saved per-window test losses (``test_units.npz``), as a
``data.splits=blocks`` language-model sweep leaves them: what a declared verdict needs (>= 3 seeds,
>= 4 held-out blocks). Shared by the tests of the engine and the plan."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ablate.eval_units import write_units

from .sweeps import write_job

WINDOWS_PER_BLOCK = 8
TOKENS = 64  # tokens (and bytes) per window
LR = "0.001"  # the chosen rate of a synthetic tune=lr sweep


def units_job(
    root: Path,
    index: int,
    overrides: list[str],
    nats: np.ndarray | None,
    blocks: int,
    status: str = "completed",
    started_at: str | None = None,
    splits: str = "blocks",
    corpus: str = "tinyshakespeare",
) -> Path:
    """One job: its per-window summed NLL ``nats`` (None: diverged, no evaluation), the final
    ``test/loss`` they make (nats per token, as logged), the config's ``data.splits``."""
    value = None if nats is None else float(nats.astype(np.float32).astype(float).sum() / (len(nats) * TOKENS))
    job = write_job(
        root,
        index,
        overrides,
        "test/loss",
        value,
        status=status,
        config={"data": {"batch_size": 4, "seq_len": 16, "splits": splits}},
        started_at=started_at,
    )
    if nats is not None:
        n = len(nats)
        write_units(
            job / "test_units.npz",
            {
                "": {
                    "index": np.arange(n),
                    "nats": nats,
                    "tokens": np.full(n, TOKENS),
                    "bytes": np.full(n, TOKENS),
                    "block": np.repeat(np.arange(blocks), n // blocks),
                    "text": "k",
                }
            },
            {"task": "lm", "corpus": corpus, "layout": splits},
        )
    return job


def write_units_sweep(
    root: Path,
    shifts: dict[str, float],
    seeds: list[int] | range = range(1, 4),
    blocks: int = 4,
    seed_sd: float = 0.01,
    text_sd: float = 0.01,
    noise_sd: float = 0.01,
    diverged: dict[str, list[int]] | None = None,
    rng_seed: int = 0,
    start: int = 0,
    splits: str = "blocks",
    lr: str | None = None,
) -> Path:
    """``{act: shift in nats per token}`` over ``seeds``: per window, a shared difficulty, a
    per-(seed, act) effect, a per-(block, act) effect and noise; ``diverged``: ``{act: [seed]}``."""
    rng = np.random.default_rng(rng_seed)
    n = blocks * WINDOWS_PER_BLOCK
    difficulty = rng.gamma(4.0, 0.5, n) * TOKENS
    block_effect = {act: np.repeat(rng.normal(0, text_sd, blocks), WINDOWS_PER_BLOCK) for act in shifts}
    index = start
    for act, shift in shifts.items():
        for seed in seeds:
            seed_rng = np.random.default_rng([rng_seed, seed, abs(hash(act)) % 10_000])
            per_token = 2.0 + shift + seed_rng.normal(0, seed_sd) + block_effect[act] + seed_rng.normal(0, noise_sd, n)
            bad = seed in (diverged or {}).get(act, [])
            units_job(
                root,
                index,
                [f"act={act}", *([f"optim.lr={lr}"] if lr else []), f"seed={seed}"],
                None if bad else difficulty + per_token * TOKENS,
                blocks,
                status="diverged" if bad else "completed",
                splits=splits,
            )
            index += 1
    return root


def finite(x: float) -> bool:
    return x is not None and math.isfinite(x)
