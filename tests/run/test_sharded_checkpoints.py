"""A sharded FSDP checkpoint (a folder: ``meta.pt``, DCP's ``.metadata``, one shard per rank) is
found by ``ckpt_path=last``, checked like a file (never running code from it), resumed only by FSDP
and read by the scripts; a folder that is incomplete, damaged or crafted is refused by name (issue 39
item 2). The folders are written by Lightning's own ``FSDPStrategy.save_checkpoint``
(``tests/helpers/sharded.py``); the GPU run that resumes one is pending."""

from __future__ import annotations

import os
import pickle
import time
from pathlib import Path

import pytest
import torch

from ablate.checkpoints import safe_load, sharded
from ablate.checkpoints.files import (
    CheckpointError,
    find_last_checkpoint,
    inspect_checkpoint,
    require_resumable,
    resolve_ckpt_path,
)
from ablate.checkpoints.paths import CheckpointFileMissing, require_file
from ablate.config.identity import ResumeMismatchError
from ablate.errors import ConfigError
from ablate.run.plan import Job, RunControl, decide
from ablate.tasks.checkpoints import inspect_checked, load_task_checkpoint
from helpers.checkpoints import lm_checkpoint
from helpers.sharded import IDENTITY, resumable, save_sharded

pytestmark = pytest.mark.usefixtures("one_thread")

FSDP = {"strategy": {"_target_": "lightning.pytorch.strategies.FSDPStrategy", "state_dict_type": "sharded"}}
DDP = {"strategy": "ddp"}


@pytest.fixture(autouse=True)
def untrusted():
    safe_load.trust_checkpoints(False)
    yield
    safe_load.trust_checkpoints(False)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """A train.py-like checkpoint's contents (weights, tokenizer, config, training state)."""
    path = lm_checkpoint(tmp_path_factory.mktemp("full") / "full.ckpt")
    return resumable(torch.load(path, map_location="cpu", weights_only=True))


def run_with_sharded_last(tmp_path: Path, checkpoint: dict) -> tuple[Path, Path]:
    run_dir = tmp_path / "run"
    folder = save_sharded(checkpoint, run_dir / "checkpoints" / "last.ckpt")
    return run_dir, folder


def job(run_dir: Path, **control) -> Job:
    return Job(RunControl(run_dir, run_dir.parent, (run_dir / "checkpoints",), **control), [], directory_given=True)


def test_lightning_writes_the_layout_this_reads(tmp_path: Path, trained: dict) -> None:
    """If Lightning's sharded save changes its files, this fails first."""
    _, folder = run_with_sharded_last(tmp_path, trained)
    names = sorted(p.name for p in folder.iterdir())
    assert names == [sharded.INDEX_FILE, "__0_0.distcp", sharded.META_FILE], names
    from lightning.fabric.utilities.load import _METADATA_FILENAME

    assert _METADATA_FILENAME == sharded.META_FILE


def test_ckpt_path_last_finds_resumes_and_checks_a_sharded_folder(tmp_path: Path, trained: dict) -> None:
    """``find_last_checkpoint`` took files only, so ``ckpt_path=last`` never continued a sharded run."""
    run_dir, folder = run_with_sharded_last(tmp_path, trained)
    assert find_last_checkpoint([run_dir / "checkpoints"]) == folder
    assert resolve_ckpt_path(str(folder), []) == str(folder)  # ckpt_path=<the folder>
    plan = decide(job(run_dir, ckpt_path="last"), IDENTITY, FSDP)
    assert plan.trains and plan.ckpt_path == str(folder) and plan.wandb_run_id == "wandb-123"

    read = inspect_checked(folder)  # the content checks every checkpoint passes: shapes, finite, tokenizer
    assert read["global_step"] == 3 and read["tokenizer"] == trained["tokenizer"]
    assert read["optimizer_states"] == [{"sharded": "optimizer_0", "entries": read["optimizer_states"][0]["entries"]}]
    assert sorted(read["state_dict"]) == sorted(trained["state_dict"])
    for name, value in trained["state_dict"].items():
        assert torch.equal(read["state_dict"][name], value), name
    require_resumable(read, folder)
    assert "state_dict" not in inspect_checkpoint(folder, weights=False)  # what the data check reads


def test_a_sharded_checkpoint_of_another_run_is_refused(tmp_path: Path, trained: dict) -> None:
    run_dir, _ = run_with_sharded_last(tmp_path, trained)
    with pytest.raises(ResumeMismatchError, match="optim.lr"):
        decide(job(run_dir, ckpt_path="last"), {**IDENTITY, "optim.lr": 0.1}, FSDP)


def test_a_sharded_folder_is_resumed_by_fsdp_only(tmp_path: Path, trained: dict) -> None:
    run_dir, _ = run_with_sharded_last(tmp_path, trained)
    with pytest.raises(ConfigError, match=r"is a sharded FSDP checkpoint .* trainer.strategy is ddp\. .*trainer=fsdp"):
        decide(job(run_dir, ckpt_path="last"), IDENTITY, DDP)
    assert not (run_dir / ".hydra").exists()  # refused before the job took the directory


def test_overwrite_removes_a_sharded_folder(tmp_path: Path, trained: dict) -> None:
    run_dir, folder = run_with_sharded_last(tmp_path, trained)
    plan = decide(job(run_dir, overwrite=True), IDENTITY, FSDP)
    assert plan.ckpt_path is None and not folder.exists()


def test_the_scripts_read_a_sharded_folder_as_its_weights(tmp_path: Path, trained: dict) -> None:
    _, folder = run_with_sharded_last(tmp_path, trained)
    require_file(folder)  # eval.py's check of ckpt_path
    task = load_task_checkpoint(folder, "lm", "generate.py")
    for name, value in task.state_dict().items():
        torch.testing.assert_close(value, trained["state_dict"][name], msg=name)
    assert task.tokenizer is not None
    with pytest.raises(CheckpointFileMissing, match="is a directory, not a checkpoint file"):
        require_file(folder.parent)  # a checkpoints folder is still not a checkpoint


def test_a_weights_only_sharded_folder_does_not_resume(tmp_path: Path, trained: dict) -> None:
    weights_only = {k: v for k, v in trained.items() if k != "optimizer_states"}
    _, folder = run_with_sharded_last(tmp_path, weights_only)
    with pytest.raises(CheckpointError, match="holds the weights only"):
        require_resumable(inspect_checked(folder), folder)


# ------------------------------------------------------------------ incomplete, damaged, crafted


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_index_runs_no_code(tmp_path: Path, trained: dict) -> None:
    """DCP and Lightning read ``.metadata`` with plain pickle: a crafted one ran its command on resume."""
    _, folder = run_with_sharded_last(tmp_path, trained)
    marker = tmp_path / "CODE_RAN"
    (folder / sharded.INDEX_FILE).write_bytes(pickle.dumps(_RunsCode(marker)))
    os.utime(folder / sharded.META_FILE)  # as if written after it: only the payload differs
    with pytest.raises(safe_load.UnsafeCheckpointError, match=r"\.metadata needs the type posix\.system"):
        inspect_checkpoint(folder)
    assert not marker.exists()


def test_a_crafted_value_entry_runs_no_code(tmp_path: Path, trained: dict) -> None:
    """DCP loads each value entry with ``torch.load(weights_only=False)``."""
    marker = tmp_path / "CODE_RAN"
    crafted = dict(trained)
    optimizer = dict(trained["optimizer_states"][0])
    optimizer["param_groups"] = [{**optimizer["param_groups"][0], "lr": _RunsCode(marker)}]
    crafted["optimizer_states"] = [optimizer]
    _, folder = run_with_sharded_last(tmp_path, crafted)
    with pytest.raises(safe_load.UnsafeCheckpointError, match=r"optimizer_0\.param_groups\.0\.lr needs the type posix"):
        inspect_checkpoint(folder)
    assert not marker.exists()


def _newer(path: Path) -> None:
    later = (path.parent / sharded.META_FILE).stat().st_mtime + 5
    os.utime(path, (later, later))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:100])
    os.utime(path.parent / sharded.META_FILE)


def _index_outside(folder: Path) -> None:
    index = pickle.loads((folder / sharded.INDEX_FILE).read_bytes())
    for info in index.storage_data.values():
        info.relative_path = "../elsewhere.distcp"
    (folder / sharded.INDEX_FILE).write_bytes(pickle.dumps(index))
    os.utime(folder / sharded.META_FILE, (time.time() + 5, time.time() + 5))


DAMAGE = {
    "no meta.pt": (lambda f: (f / sharded.META_FILE).unlink(), r"holds no meta\.pt: its save was cut short"),
    "no index": (lambda f: (f / sharded.INDEX_FILE).unlink(), r"folder without \.metadata"),
    "missing shard": (lambda f: (f / "__0_0.distcp").unlink(), r"the shard __0_0\.distcp .* is missing"),
    "truncated shard": (lambda f: _truncate(f / "__0_0.distcp"), r"__0_0\.distcp is truncated \(100 bytes"),
    "shard written after meta.pt": (
        lambda f: _newer(f / "__0_0.distcp"),
        r"__0_0\.distcp was written after meta\.pt, so the save that wrote it was cut short",
    ),
    "index written after meta.pt": (lambda f: _newer(f / sharded.INDEX_FILE), r"\.metadata was written after meta"),
    "index pointing outside": (_index_outside, r"in '\.\./elsewhere\.distcp', not a shard of the folder"),
    "damaged meta.pt": (lambda f: (f / sharded.META_FILE).write_bytes(b"PK\x03\x04 junk"), r"meta\.pt is corrupt"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_an_incomplete_or_damaged_folder_is_refused_by_name(tmp_path: Path, trained: dict, damage: str) -> None:
    run_dir, folder = run_with_sharded_last(tmp_path, trained)
    change, says = DAMAGE[damage]
    change(folder)
    assert find_last_checkpoint([run_dir / "checkpoints"]) == folder  # found: never taken for no checkpoint
    with pytest.raises(CheckpointError, match=says):
        decide(job(run_dir, ckpt_path="last"), IDENTITY, FSDP)


def test_tampered_training_state_and_weights_are_refused(tmp_path: Path, trained: dict) -> None:
    no_state = {**trained, "callbacks": {}}
    _, folder = run_with_sharded_last(tmp_path / "a", no_state)
    with pytest.raises(CheckpointError, match="holds no ResumeState"):
        require_resumable(inspect_checked(folder), folder)
    name = next(k for k, v in trained["state_dict"].items() if v.is_floating_point())
    damaged = trained["state_dict"][name].clone()
    damaged.view(-1)[0] = float("nan")
    nan = {**trained, "state_dict": {**trained["state_dict"], name: damaged}}
    _, folder = run_with_sharded_last(tmp_path / "b", nan)
    with pytest.raises(CheckpointError, match=rf"{name} holds \d+ NaN/inf value"):
        inspect_checked(folder)
    wrong = {**trained, "state_dict": {**trained["state_dict"], name: torch.zeros(3)}}
    _, folder = run_with_sharded_last(tmp_path / "c", wrong)
    with pytest.raises(CheckpointError, match=rf"{name} has shape \(3\)"):
        inspect_checked(folder)


def test_an_index_with_fields_of_other_types_is_refused_not_a_crash(tmp_path: Path, trained: dict) -> None:
    _, folder = run_with_sharded_last(tmp_path, trained)
    index = pickle.loads((folder / sharded.INDEX_FILE).read_bytes())
    next(iter(index.storage_data.values())).offset = torch.Size([1, 2])  # a type the index may build
    (folder / sharded.INDEX_FILE).write_bytes(pickle.dumps(index))
    os.utime(folder / sharded.META_FILE, (time.time() + 5, time.time() + 5))
    with pytest.raises(CheckpointError, match=r"is not a distributed checkpoint's index as Lightning writes it"):
        inspect_checkpoint(folder)
