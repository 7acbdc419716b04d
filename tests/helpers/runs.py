"""How the tests run the project: where the checkout and the shared corpora are, a run small enough
for a test, the guard against a hung subprocess, and the training config composed as ``train.py``
composes it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]  # this file is tests/helpers/runs.py
SHARED_DATA = Path(os.environ.get("ABLATE_DATA_DIR", REPO.parent / "shared" / "data"))

# A guard against a hung subprocess, not a guess at how long the work takes: far beyond what any test
# needs on a loaded 2-core machine (CI allows 90 minutes for everything).
HANG_TIMEOUT = 1800

# A model and a run small enough for a test, still the real code path.
TINY = [
    "model=tiny",
    "data.seq_len=16",
    "data.batch_size=4",
    "trainer.max_steps=6",
    "trainer.val_check_interval=3",
    "+trainer.limit_test_batches=2",
    "trainer.limit_val_batches=2",
    "callbacks.progress_bar=null",
    "print_config=false",
    "optim.warmup_steps=2",
    "trainer.log_every_n_steps=1",
    "callbacks.throughput.peak_flops=1e12",  # a fixed peak: train/mfu is logged without the ~2 s CPU probe
]


def offline_env(tmp_path: Path) -> dict[str, str]:
    """The environment of an entry point run by a test: offline, one thread, its logs and caches in
    ``tmp_path``, and Hydra's own error reporting off (the project's messages are what is tested)."""
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "ABLATE_LOG_DIR": str(tmp_path / "logs"),
        "ABLATE_CACHE_DIR": str(tmp_path / "cache"),
        "OMP_NUM_THREADS": "1",
    }
    env.pop("HYDRA_FULL_ERROR", None)
    return env


def run_python(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in ``cwd``, offline, without stdin, its output captured (text)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=offline_env(cwd),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


def composed(*overrides: str) -> Any:
    """``conf/train.yaml`` composed with ``overrides`` (Hydra's compose API, no run)."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        return compose(config_name="train", overrides=list(overrides))
