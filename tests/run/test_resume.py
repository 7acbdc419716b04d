"""Checkpoints, exact resume and determinism, end to end through train.py on CPU.

The resume test trains 12 steps uninterrupted, then the same run SIGKILLed after step 7 (last
checkpoint: step 6) and resumed with ckpt_path=last: the loss at every step, the validation loss
and the final weights and optimiser state must be bitwise equal. Dropout is on (the RNG state
must be restored), the training order is a shuffled permutation of a map-style dataset (the
position in it must be restored), the LR schedule is cosine with warmup (the scheduler state),
and validation runs right after the step-6 checkpoint (so the restored RNG must not depend on
what happened after the checkpoint was written).
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from ablate.callbacks.checkpointing import AtomicCheckpointIO, LastCheckpoint, ResumeState
from ablate.checkpoints.files import find_last_checkpoint, resolve_ckpt_path
from ablate.checkpoints.parts import RESUME_STATE_KEY
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO

RUN = [
    "model=tiny",
    "model.dropout=0.1",
    "data.seq_len=16",
    "data.batch_size=4",
    "trainer.max_steps=12",
    "trainer.val_check_interval=3",
    "trainer.limit_val_batches=2",
    "+trainer.limit_test_batches=2",
    "optim.warmup_steps=3",
    "trainer.log_every_n_steps=1",
    "callbacks.checkpoint_last.every_n_train_steps=3",
    "callbacks.progress_bar=null",
    "print_config=false",
    "logger=wandb",
    "callbacks.throughput.peak_flops=1e12",
]
KILL_AFTER = 7  # the last checkpoint before it is at step 6
# metrics that are a function of the computation (timing metrics are not)
COMPARED = ("train/loss", "train/ppl", "train/lr", "val/loss", "val/ppl", "test/loss", "grad_norm/total")


def train(tmp: Path, data_dir: Path, run_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "WANDB_MODE": "offline",
        "HF_HUB_OFFLINE": "1",
        "WANDB_SILENT": "true",
        "ABLATE_DATA_DIR": str(data_dir),
        "ABLATE_CACHE_DIR": str(tmp / "cache"),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join([str(REPO / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [
        sys.executable,
        str(REPO / "train.py"),
        f"paths.log_dir={tmp / 'logs'}",
        f"hydra.run.dir={run_dir}",
        *RUN,
        *args,
    ]
    proc = forked_python.run(
        cmd, cwd=tmp, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=HANG_TIMEOUT
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"train.py failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}")
    return proc


def metrics_by_step(run_dir: Path) -> dict[str, dict[int, str]]:
    """metric -> step -> value as written in the CSV; a step logged twice (before a kill and
    again after the resume) keeps its last value."""
    out: dict[str, dict[int, str]] = {k: {} for k in COMPARED}
    with open(run_dir / "csv" / "metrics.csv") as f:
        for row in csv.DictReader(f):
            for key in COMPARED:
                if row.get(key):
                    out[key][int(row["step"])] = row[key]
    return out


def checkpoint(run_dir: Path, name: str = "last.ckpt") -> dict:
    return torch.load(run_dir / "checkpoints" / name, map_location="cpu", weights_only=False)


def assert_same_state(a: dict, b: dict) -> None:
    assert a["global_step"] == b["global_step"]
    assert a["state_dict"].keys() == b["state_dict"].keys()
    for key in a["state_dict"]:
        assert torch.equal(a["state_dict"][key], b["state_dict"][key]), key
    assert ("optimizer_states" in a) == ("optimizer_states" in b)
    if "optimizer_states" not in a:  # best.ckpt: the weights only (callbacks.checkpoint.save_weights_only)
        return
    for sa, sb in zip(a["optimizer_states"][0]["state"].values(), b["optimizer_states"][0]["state"].values()):
        for key in sa:
            assert torch.equal(torch.as_tensor(sa[key]), torch.as_tensor(sb[key])), key
    assert a["lr_schedulers"] == b["lr_schedulers"]


def wandb_run_ids(run_dir: Path) -> list[str]:
    return [d.name.rsplit("-", 1)[1] for d in sorted((run_dir / "wandb").glob("offline-run-*"))]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("resume")


@pytest.fixture(scope="module")
def uninterrupted(workdir: Path, data_dir: Path) -> Path:
    run_dir = workdir / "logs" / "uninterrupted"
    train(workdir, data_dir, run_dir)
    return run_dir


@pytest.mark.slow
def test_kill_and_resume_is_exact(workdir: Path, data_dir: Path, uninterrupted: Path) -> None:
    run_dir = workdir / "logs" / "interrupted"
    killed = train(
        workdir,
        data_dir,
        run_dir,
        "+callbacks.kill._target_=helpers.kill_at_step.KillAtStep",
        f"+callbacks.kill.step={KILL_AFTER}",
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    # what survives the kill: the checkpoint of step 6, complete; the step after it is lost
    assert checkpoint(run_dir)["global_step"] == 6
    assert not (run_dir / "status.json").exists()

    resumed_run = train(workdir, data_dir, run_dir, "ckpt_path=last", "~callbacks.kill")  # the run, without the kill
    assert "exists and is not empty" not in resumed_run.stderr  # resuming into its own directory is no news
    assert "not resumable" not in resumed_run.stderr  # the data module resumes mid-epoch: Lightning's doubt is noise
    console = resumed_run.stdout + resumed_run.stderr
    assert f"resuming {run_dir / 'checkpoints' / 'last.ckpt'} at step 6" in console.splitlines()
    assert "Restor" not in console  # Lightning's two lines that say it again
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed" and status["steps"] == 12
    assert status["resumed_from"] == str(run_dir / "checkpoints" / "last.ckpt")

    expected, resumed = metrics_by_step(uninterrupted), metrics_by_step(run_dir)
    assert sorted(expected["train/loss"]) == list(range(12))
    for key in COMPARED:
        assert resumed[key] == expected[key], key  # the same decimal strings: bitwise equal floats
    assert_same_state(checkpoint(run_dir), checkpoint(uninterrupted))

    # the W&B run goes on: a second offline folder of the same run id
    ids = wandb_run_ids(run_dir)
    assert len(ids) == 2 and ids[0] == ids[1], ids
    assert ids[0] not in wandb_run_ids(uninterrupted)


@pytest.mark.slow
def test_kill_at_a_random_step_loses_nothing(workdir: Path, data_dir: Path, uninterrupted: Path) -> None:
    """SIGKILL after a random step (printed; ABLATE_FAULT_STEP fixes it to reproduce a failure):
    the resumed run ends exactly as the uninterrupted one, whatever the step."""
    import random

    step = int(os.environ.get("ABLATE_FAULT_STEP") or random.randint(1, 11))
    print(f"killing after step {step}")
    run_dir = workdir / "logs" / f"random_kill_{step}"
    killed = train(
        workdir,
        data_dir,
        run_dir,
        "+callbacks.kill._target_=helpers.kill_at_step.KillAtStep",
        f"+callbacks.kill.step={step}",
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    # what the checkpoint says, not what the timing implies: a complete checkpoint of a save step (every 3),
    # at most one interval behind the kill (the kill may land before or after that step's save)
    last = find_last_checkpoint([run_dir / "checkpoints"])
    saved = 0 if last is None else checkpoint(run_dir)["global_step"]
    assert saved % 3 == 0 and step - 3 <= saved <= step, (saved, step)
    train(workdir, data_dir, run_dir, "ckpt_path=last", "~callbacks.kill")  # its own overrides, less the kill
    assert json.loads((run_dir / "status.json").read_text())["steps"] == 12
    expected, resumed = metrics_by_step(uninterrupted), metrics_by_step(run_dir)
    for key in COMPARED:
        assert resumed[key] == expected[key], (key, step)
    assert_same_state(checkpoint(run_dir), checkpoint(uninterrupted))


@pytest.mark.slow
def test_ctrl_c_saves_the_step_and_resumes_exactly(workdir: Path, data_dir: Path, uninterrupted: Path) -> None:
    """Ctrl-C after step 7 (checkpoints every 3 steps): training stops at the end of that step,
    last.ckpt holds step 7 (nothing lost), status.json says interrupted, the process exits 130 and
    W&B records a failed exit; resuming gives exactly the uninterrupted run."""
    run_dir = workdir / "logs" / "ctrl_c"
    proc = train(
        workdir,
        data_dir,
        run_dir,
        "+callbacks.ctrl_c._target_=helpers.signal_at_step.SignalAtStep",
        f"+callbacks.ctrl_c.step={KILL_AFTER}",
        check=False,
    )
    assert proc.returncode == 130, proc.stderr[-3000:]
    assert "interrupted at step 7" in proc.stderr and "ckpt_path=last" in proc.stderr
    assert checkpoint(run_dir)["global_step"] == KILL_AFTER  # saved at the interrupt, not at step 6
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "interrupted" and status["steps"] == KILL_AFTER
    assert "test/loss" not in status["metrics"]  # no post-fit evaluation of an unfinished run
    first_segment = status["wall_time_s"]
    from ablate.tracking.wandb_reader import read_offline_run

    offline = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert read_offline_run(offline[-1])["exit_code"] not in (None, 0)

    resumed_proc = train(workdir, data_dir, run_dir, "ckpt_path=last")
    assert "Previous log files" not in resumed_proc.stderr  # Lightning's false warning: metrics.csv is kept
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed" and status["steps"] == 12
    # the run's wall time spans both segments (issue 35 item 10), the last one is shown apart
    assert status["wall_time_s"] > status["segment_wall_time_s"] > 0
    assert status["wall_time_s"] >= status["segment_wall_time_s"] + 0.5 * first_segment
    assert "since the resume)" in resumed_proc.stdout
    expected, resumed = metrics_by_step(uninterrupted), metrics_by_step(run_dir)
    for key in COMPARED:
        assert resumed[key] == expected[key], key
    assert_same_state(checkpoint(run_dir), checkpoint(uninterrupted))


@pytest.mark.slow
def test_same_seed_same_metrics(workdir: Path, data_dir: Path, uninterrupted: Path) -> None:
    """Determinism on CPU: the same config and seed give identical metrics and weights."""
    run_dir = workdir / "logs" / "again"
    train(workdir, data_dir, run_dir)
    assert metrics_by_step(run_dir) == metrics_by_step(uninterrupted)
    assert_same_state(checkpoint(run_dir), checkpoint(uninterrupted))
    assert_same_state(checkpoint(run_dir, "best.ckpt"), checkpoint(uninterrupted, "best.ckpt"))


def test_the_resume_state_is_read_back_under_the_key_lightning_saves_it_under() -> None:
    assert ResumeState().state_key == RESUME_STATE_KEY


def test_ckpt_path_last_without_checkpoint_starts_fresh(tmp_path: Path) -> None:
    assert resolve_ckpt_path(None, [tmp_path]) is None
    assert resolve_ckpt_path("last", [tmp_path / "missing"]) is None  # first run of a job, or before any save
    with pytest.raises(FileNotFoundError, match="nope.ckpt"):
        resolve_ckpt_path(str(tmp_path / "nope.ckpt"), [tmp_path])


# ------------------------------------------------------------------- atomic checkpoints


def test_atomic_save_replaces_or_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    io, path = AtomicCheckpointIO(), tmp_path / "checkpoints" / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.ones(3)}, path)
    io.save_checkpoint({"step": 2, "w": torch.ones(3)}, path)
    assert torch.load(path, weights_only=True)["step"] == 2

    def write_half_then_fail(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", write_half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"step": 3}, path)
    monkeypatch.undo()
    assert torch.load(path, weights_only=True)["step"] == 2  # the old checkpoint, whole
    # nothing half-written left; the checkpoint before it is kept for when last.ckpt is damaged later
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt", "last.previous.ckpt"]
    assert torch.load(path.parent / "last.previous.ckpt", weights_only=True)["step"] == 1


@pytest.mark.integration
def test_killed_writer_leaves_no_checkpoint_to_mistake(tmp_path: Path) -> None:
    """A process SIGKILLed in the middle of writing: last.ckpt is still the previous, complete
    checkpoint, and the partial file (under its temporary name) is not what ckpt_path=last picks."""
    folder = tmp_path / "checkpoints"
    AtomicCheckpointIO().save_checkpoint({"step": 1}, folder / "last.ckpt")
    writer = textwrap_script(folder / "last.ckpt")
    proc = subprocess.run([sys.executable, "-c", writer], capture_output=True, text=True, timeout=HANG_TIMEOUT)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    leftovers = [p.name for p in folder.iterdir() if p.name != "last.ckpt"]
    assert leftovers and all(name.startswith(".last.ckpt.tmp-") for name in leftovers)
    assert find_last_checkpoint([folder]) == folder / "last.ckpt"
    assert torch.load(folder / "last.ckpt", weights_only=True)["step"] == 1


def textwrap_script(target: Path) -> str:
    """A writer that dies (SIGKILL) after writing part of a big checkpoint."""
    return (
        "import os, signal, torch\n"
        "from ablate.callbacks.checkpointing import AtomicCheckpointIO\n"
        "real_save = torch.save\n"
        "def save(obj, f, *a, **k):\n"
        "    f.write(b'x' * 1000); f.flush(); os.kill(os.getpid(), signal.SIGKILL)\n"
        "torch.save = save\n"
        f"AtomicCheckpointIO().save_checkpoint({{'step': 2, 'w': torch.zeros(10**6)}}, {str(target)!r})\n"
    )


@pytest.mark.integration
def test_last_checkpoint_saves_the_final_step(tmp_path: Path) -> None:
    """every_n_train_steps plus the end of training (Lightning alone would skip a final step
    that is not a multiple of the interval)."""
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    saved: list[int] = []

    class Recording(LastCheckpoint):
        def save(self, trainer):
            if self._saved_at != trainer.global_step:
                saved.append(trainer.global_step)
            super().save(trainer)

    trainer = L.Trainer(
        max_steps=7,
        callbacks=[Recording(tmp_path, every_n_train_steps=3)],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        plugins=[AtomicCheckpointIO()],
    )
    trainer.fit(Tiny(), DataLoader(TensorDataset(torch.randn(64, 2)), batch_size=4))
    assert saved == [3, 6, 7]
    assert torch.load(tmp_path / "last.ckpt", weights_only=False)["global_step"] == 7


@pytest.mark.integration
def test_last_checkpoint_of_the_final_step_holds_its_validation(tmp_path: Path) -> None:
    """The final last.ckpt is taken mid-epoch (a run trained longer from it continues exactly) and
    again after the final validation, so it holds best.ckpt's score of that validation: a run
    resumed from it compares its next validations with the true best, not an older one."""
    import lightning as L
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    x = torch.randn(64, 2, generator=torch.Generator().manual_seed(0))
    data = TensorDataset(x, x @ torch.tensor([[1.0], [-2.0]]))

    class Regression(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch, batch_idx):
            return (self.layer(batch[0]) - batch[1]).pow(2).mean()

        def validation_step(self, batch, batch_idx):
            self.log("val/loss", (self.layer(batch[0]) - batch[1]).pow(2).mean())

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    def fit(max_steps: int, ckpt_path: str | None = None) -> L.Trainer:
        trainer = L.Trainer(
            max_steps=max_steps,
            val_check_interval=4,
            num_sanity_val_steps=0,
            callbacks=[
                ModelCheckpoint(dirpath=tmp_path, filename="best", monitor="val/loss", save_top_k=1),
                LastCheckpoint(tmp_path, every_n_train_steps=4, keep_previous="always"),
            ],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            plugins=[AtomicCheckpointIO()],
        )
        trainer.fit(Regression(), DataLoader(data, batch_size=4), DataLoader(data, batch_size=64), ckpt_path=ckpt_path)
        return trainer

    final_val = float(fit(8).callback_metrics["val/loss"])
    last = torch.load(tmp_path / "last.ckpt", weights_only=False)
    (best_state,) = [v for k, v in last["callbacks"].items() if k.startswith("ModelCheckpoint")]
    assert last["global_step"] == 8
    assert float(best_state["best_model_score"]) == pytest.approx(final_val)  # the step-8 validation, the best
    assert last["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 0  # still mid-epoch
    previous = torch.load(tmp_path / "last.previous.ckpt", weights_only=False)
    assert previous["global_step"] == 4  # the re-save of step 8 replaced step 8, not the step before
    longer = fit(12, ckpt_path=str(tmp_path / "last.ckpt"))
    assert longer.global_step == 12
