"""A checkpoint from elsewhere never runs code when loaded (ablate.checkpoints.safe_load)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import forked_python
from ablate.checkpoints import safe_load
from ablate.checkpoints.files import inspect_checkpoint
from ablate.tasks import load_task_checkpoint
from conftest import HANG_TIMEOUT, REPO


class _RunsCode:
    """Unpickling it would call os.system: what a crafted checkpoint does."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def crafted(tmp_path: Path) -> tuple[Path, Path]:
    marker, path = tmp_path / "CODE_RAN", tmp_path / "crafted.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(2)}, "task": "lm", "payload": _RunsCode(marker)}, path)
    return path, marker


@pytest.fixture(autouse=True)
def untrusted():
    safe_load.trust_checkpoints(False)
    yield
    safe_load.trust_checkpoints(False)


def test_a_crafted_checkpoint_is_refused_naming_the_file_and_the_type(tmp_path):
    path, marker = crafted(tmp_path)
    with pytest.raises(safe_load.UnsafeCheckpointError, match=r"crafted\.ckpt needs the type posix\.system"):
        inspect_checkpoint(path)
    with pytest.raises(safe_load.UnsafeCheckpointError, match="trust_checkpoint=true"):
        load_task_checkpoint(path)
    assert not marker.exists()


def test_trust_checkpoint_loads_other_types(tmp_path):
    path = tmp_path / "dated.ckpt"  # a harmless type outside the restricted set
    torch.save({"when": datetime.date(2026, 11, 24)}, path)
    with pytest.raises(safe_load.UnsafeCheckpointError, match="datetime.date"):
        safe_load.load(path)
    safe_load.trust_checkpoints(True)
    assert safe_load.load(path)["when"] == datetime.date(2026, 11, 24)
    assert not safe_load.lightning_weights_only()


@pytest.mark.integration
@pytest.mark.parametrize(
    "script",
    [
        "train.py",
        "eval.py",
        "generate.py",
        "translate.py",
        "scripts/export_hf.py",
        "scripts/average_checkpoints.py",
        "scripts/attention_maps.py",
    ],
)
def test_no_script_runs_a_crafted_checkpoints_code(script, tmp_path):
    path, marker = crafted(tmp_path)
    args = {
        "scripts/export_hf.py": [f"out={tmp_path / 'hf'}"],
        "scripts/attention_maps.py": ["text=ROMEO"],
        "train.py": ["debug=fdr"],
    }.get(script, [])
    given = [f"ckpts=[{path}]", f"out={tmp_path / 'avg.ckpt'}"] if "average" in script else [f"ckpt_path={path}"]
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "ABLATE_LOG_DIR": str(tmp_path / "logs"),
        "OMP_NUM_THREADS": "1",
    }
    proc = forked_python.run(
        [sys.executable, str(REPO / script), *given, *args],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs the type posix.system" in proc.stderr and not marker.exists()
