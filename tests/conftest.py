"""Shared fixtures: where the real data is, and how to run train.py as a user would; the hooks that
enforce the test tiers. What the tests share besides fixtures is in ``tests/helpers/``, which this
file puts on the path of every test (pytest inserts its folder, ``tests/``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO, SHARED_DATA
from helpers.tiers import TIERS, tier_guard

# --- Test tiers --------------------------------------------------------------------------------
# unit (no marker): no subprocess, no Trainer.fit, seconds in all (`bash scripts/test.sh -m unit`);
# integration: in-process fit or subprocess runs; acceptance: the README's commands in a fresh clone.
# `slow` is the old name of `integration` (`-m "not slow"` still selects the unit tier).
# Enforced while each test (and its fixtures) runs: an unmarked test that starts a process or calls
# Trainer.fit fails, naming the marker it needs (helpers/tiers.py).


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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_setup(item):
    with tier_guard(item):
        yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    with tier_guard(item):
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
    """Run ``python train.py ARGS`` as a subprocess would (forked: tests/helpers/forked_python.py; ``fresh=True``
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
