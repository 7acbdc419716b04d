"""A checkpoint from elsewhere never runs code when loaded (ablate.checkpoints.safe_load)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.checkpoints import safe_load
from ablate.checkpoints.files import inspect_checkpoint
from ablate.tasks.checkpoints import load_task_checkpoint
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO


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


def run_entry_point(script: str, args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """``python <script> ARGS`` as a user runs it (forked: tests/helpers/forked_python.py), offline, with no
    stdin, its logs under ``tmp_path``."""
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "ABLATE_LOG_DIR": str(tmp_path / "logs"),
        "OMP_NUM_THREADS": "1",
    }
    return forked_python.run(
        [sys.executable, str(REPO / script), *args],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


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
    proc = run_entry_point(script, [*given, *args], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "needs the type posix.system" in proc.stderr and not marker.exists()


# --- issue 32 item 1: no _target_ from a file ---------------------------------------------------


@pytest.fixture(scope="module")
def crafted_stored_config(tmp_path_factory):
    """Real tiny LM and translation checkpoints whose stored data config is issue 32's: with
    ``instantiate`` it writes a file and ``torch.load`` s a pickle that runs code."""
    from helpers.checkpoints import code_running_data_config, lm_checkpoint, rewrite, translation_checkpoint

    folder = tmp_path_factory.mktemp("crafted")
    config, files = code_running_data_config(folder)

    def crafted(path: Path) -> None:
        rewrite(path, path, lambda c: c["hyper_parameters"].__setitem__("data", config))

    lm, tr = lm_checkpoint(folder / "lm.ckpt"), translation_checkpoint(folder / "tr.ckpt")
    crafted(lm)
    crafted(tr)
    return {"lm": lm, "translation": tr}, files


def test_a_stored_target_is_refused_by_every_reader(crafted_stored_config):
    from ablate.checkpoints.files import CheckpointError

    checkpoints, files = crafted_stored_config
    for path in checkpoints.values():
        with pytest.raises(CheckpointError, match=r"hyper_parameters\.data\._target_='builtins\.dict' is not one of"):
            inspect_checkpoint(path)
        with pytest.raises(SystemExit, match="is not one of ablate's data modules"):
            load_task_checkpoint(path)
    assert not any(f.exists() for f in files)


def test_a_nested_target_or_instantiator_is_refused_by_name(tmp_path):
    from ablate.checkpoints.stored_config import StoredConfigError, check_stored_config

    nested = {
        "hyper_parameters": {
            "data": {"_target_": "ablate.data.lm_data.TinyShakespeare", "x": {"_target_": "os.system"}}
        }
    }
    with pytest.raises(StoredConfigError, match=r"hyper_parameters\.data\.x\._target_ is a Hydra instantiation key"):
        check_stored_config(nested, "f.ckpt")
    in_optim = {"hyper_parameters": {"optim": {"name": "adamw", "betas": [{"_args_": [1]}]}}}
    with pytest.raises(StoredConfigError, match=r"hyper_parameters\.optim\.betas\[0\]\._args_"):
        check_stored_config(in_optim, "f.ckpt")
    with pytest.raises(StoredConfigError, match="_instantiator names a function Lightning would import"):
        check_stored_config({"hyper_parameters": {"_instantiator": "os.system"}}, "f.ckpt")
    check_stored_config(
        {"hyper_parameters": {"data": {"_target_": "ablate.data.lm_data.TextFiles", "seq_len": 8}}}, "f"
    )


def test_the_data_module_of_a_stored_config_is_looked_up_not_imported():
    from ablate.data.lm_data import TinyShakespeare
    from ablate.data.registry import StoredConfigError, build_data_module

    dm = build_data_module({"_target_": "ablate.data.lm_data.TinyShakespeare", "seq_len": 8}, "f.ckpt", batch_size=2)
    assert type(dm) is TinyShakespeare and dm.seq_len == 8
    with pytest.raises(StoredConfigError, match="'os.system', which is not one of ablate's"):
        build_data_module({"_target_": "os.system"}, "f.ckpt")
    with pytest.raises(StoredConfigError, match="data.bogus is not a key of TinyShakespeare"):
        build_data_module({"_target_": "ablate.data.lm_data.TinyShakespeare", "bogus": 1}, "f.ckpt")


@pytest.mark.integration
@pytest.mark.parametrize(
    ("script", "task"),
    [
        ("eval.py", "lm"),
        ("eval.py", "translation"),
        ("generate.py", "lm"),
        ("translate.py", "translation"),
        ("scripts/export_hf.py", "lm"),
        ("scripts/average_checkpoints.py", "lm"),
        ("scripts/attention_maps.py", "lm"),
        ("train.py", "lm"),
    ],
)
def test_no_entry_point_instantiates_a_stored_target(script, task, crafted_stored_config, tmp_path):
    checkpoints, files = crafted_stored_config
    path = checkpoints[task]
    args = {
        "scripts/export_hf.py": [f"out={tmp_path / 'hf'}"],
        "scripts/attention_maps.py": ["text=ROMEO"],
        "train.py": ["model=tiny", "data.seq_len=16", "logger=csv", "debug=fdr"],
    }.get(script, [])
    given = [f"ckpts=[{path},{path}]", f"out={tmp_path / 'avg.ckpt'}"] if "average" in script else [f"ckpt_path={path}"]
    proc = run_entry_point(script, [*given, *args], tmp_path)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "hyper_parameters.data._target_='builtins.dict' is not one of ablate's data modules" in proc.stderr
    assert not any(f.exists() for f in files), "the stored config ran"
