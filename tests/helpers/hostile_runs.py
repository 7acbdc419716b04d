"""How the hostile tier runs the entry points: a tiny run on two small text files, its command
line run offline with the tests' helpers importable (test callbacks), and what a refusal looks like."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO

WORDS = [
    "the",
    "cat",
    "sat",
    "on",
    "a",
    "mat",
    "and",
    "a",
    "dog",
    "ran",
    "far",
    "away",
    "to",
    "see",
    "the",
    "red",
    "sun",
]
TINY_RUN = [
    "model=tiny",
    "data=text",
    "data.seq_len=16",
    "data.batch_size=4",
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "callbacks.progress_bar=null",
    "optim.warmup_steps=2",
    "logger=csv",
]


def text(lines: int, seed: int) -> str:
    rng = random.Random(seed)
    return "\n".join(" ".join(rng.choice(WORDS) for _ in range(10)) for _ in range(lines)) + "\n"


def command(script: str, args: list[str], where: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "ABLATE_LOG_DIR": str(where / "logs"),
        "ABLATE_CACHE_DIR": str(where / "cache"),
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),  # test callbacks
    }
    env.pop("HYDRA_FULL_ERROR", None)
    return forked_python.run(
        [sys.executable, str(REPO / script), *args],
        cwd=where,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


def refused(proc: subprocess.CompletedProcess, *messages: str) -> None:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert all(m in proc.stderr for m in messages), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
