"""Shared fixtures: where the real data is, and how to run train.py as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ABLATE_DATA_DIR", REPO.parent / "shared" / "data"))

# A model and a run small enough for a test, still the real code path.
TINY = [
    "model=tiny", "data.seq_len=16", "data.batch_size=4", "trainer.max_steps=6",
    "trainer.val_check_interval=3", "+trainer.limit_test_batches=2", "trainer.limit_val_batches=2",
    "callbacks.progress_bar=null", "print_config=false", "optim.warmup_steps=2", "trainer.log_every_n_steps=1",
    "callbacks.throughput.peak_flops=1e12",  # a fixed peak: train/mfu is logged without the ~2 s CPU probe
]


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: one thread is faster, and much faster on a busy machine (no thread spinning).
    Use with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (SHARED_DATA / "tinyshakespeare" / "input.txt").exists():
        pytest.skip(f"the shared corpora are not at {SHARED_DATA} (set ABLATE_DATA_DIR)")
    return SHARED_DATA


@pytest.fixture
def run_train(tmp_path: Path, data_dir: Path):
    """Run ``python train.py ARGS`` in a subprocess with no stdin, offline, in a tmp log dir."""

    def run(*args: str, timeout: float = 240, check: bool = True) -> subprocess.CompletedProcess:
        env = {**os.environ, "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"), "HF_HUB_OFFLINE": "1",
               "ABLATE_DATA_DIR": str(data_dir), "ABLATE_CACHE_DIR": str(tmp_path.parent / "cache"),
               "WANDB_SILENT": "true", "PYTHONUNBUFFERED": "1"}
        flags = [a for a in args if a.startswith("-")]  # Hydra wants -m before the overrides
        overrides = [a for a in args if not a.startswith("-")]
        cmd = [sys.executable, str(REPO / "train.py"), *flags, f"paths.log_dir={tmp_path / 'logs'}", *overrides]
        proc = subprocess.run(cmd, cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
        return proc

    return run
