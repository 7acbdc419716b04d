"""Shared fixtures: where the real data is, and how to run train.py as a user would."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

import forked_python

REPO = Path(__file__).resolve().parents[1]
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


# --- Test tiers --------------------------------------------------------------------------------
# unit (no marker): no subprocess, no Trainer.fit, seconds in all (`bash scripts/test.sh -m unit`);
# integration: in-process fit or subprocess runs; acceptance: the README's commands in a fresh clone.
# `slow` is the old name of `integration` (`-m "not slow"` still selects the unit tier).
# Enforced while each test (and its fixtures) runs: an unmarked test that starts a process or calls
# Trainer.fit fails, naming the marker it needs. At run time rather than at collection, so that a
# helper function or a fixture that trains cannot hide it.
TIERS = ("integration", "acceptance", "slow")


class TierError(AssertionError):
    pass


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        markers = {m.name for m in item.iter_markers()}
        if markers & set(TIERS):
            for name in ("integration", "slow"):
                if name not in markers:
                    item.add_marker(name)
        else:
            item.add_marker("unit")
    items[:] = heaviest_files_first(items)


def heaviest_files_first(items: list) -> list:
    """Files that run commands first (acceptance, then those with the most integration tests), the
    unit-only files last: pytest-xdist hands whole files (``--dist loadfile``) to whichever worker is
    free, so long files started last would leave one core working alone at the end."""
    runs: dict[str, int] = {}
    for item in items:
        weight = 1000 if item.get_closest_marker("acceptance") else int(bool(item.get_closest_marker("integration")))
        runs[str(item.path)] = runs.get(str(item.path), 0) + weight
    return sorted(items, key=lambda item: -runs[str(item.path)])  # stable: a file's own order is kept


@contextmanager
def _tier_guard(item) -> Iterator[None]:
    if any(item.get_closest_marker(name) for name in TIERS):
        yield
        return
    import lightning.pytorch as lp

    def refuse(what: str):
        def refused(*args, **kwargs):
            raise TierError(f"{item.nodeid} {what}: mark it @pytest.mark.integration (tests/conftest.py: test tiers)")

        return refused

    popen_init, fit, forked_init = subprocess.Popen.__init__, lp.Trainer.fit, forked_python.ForkedProcess.__init__
    subprocess.Popen.__init__ = refuse("starts a subprocess")  # type: ignore[method-assign]
    forked_python.ForkedProcess.__init__ = refuse("starts a (forked) subprocess")  # type: ignore[method-assign]
    lp.Trainer.fit = refuse("calls Trainer.fit")  # type: ignore[method-assign]
    try:
        yield
    finally:
        subprocess.Popen.__init__, lp.Trainer.fit = popen_init, fit  # type: ignore[method-assign]
        forked_python.ForkedProcess.__init__ = forked_init  # type: ignore[method-assign]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with _tier_guard(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with _tier_guard(item):
        yield


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
    """Run ``python train.py ARGS`` as a subprocess would (forked: tests/forked_python.py; ``fresh=True``
    in a new interpreter) with no stdin, offline, in a tmp log dir."""

    def run(
        *args: str, timeout: float = HANG_TIMEOUT, check: bool = True, fresh: bool = False
    ) -> subprocess.CompletedProcess:
        env = {
            **os.environ,
            "WANDB_MODE": os.environ.get("WANDB_MODE", "offline"),
            "HF_HUB_OFFLINE": "1",
            "ABLATE_DATA_DIR": str(data_dir),
            "ABLATE_CACHE_DIR": str(tmp_path.parent / "cache"),
            "WANDB_SILENT": "true",
            "PYTHONUNBUFFERED": "1",
        }
        flags = [a for a in args if a.startswith("-")]  # Hydra wants -m before the overrides
        overrides = [a for a in args if not a.startswith("-")]
        cmd = [sys.executable, str(REPO / "train.py"), *flags, f"paths.log_dir={tmp_path / 'logs'}", *overrides]
        proc = forked_python.run(
            cmd,
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            fresh=fresh,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
        return proc

    return run
