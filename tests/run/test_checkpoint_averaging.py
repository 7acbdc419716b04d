"""Checkpoint averaging (the last N step checkpoints, fairseq-style) and the EMA callback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from ablate.callbacks.averaging import (
    EMA,
    AveragingError,
    StepCheckpoints,
    average_checkpoints,
    last_step_checkpoints,
    step_checkpoint_name,
    step_checkpoints,
    write_averaged,
)
from ablate.callbacks.checkpointing import AtomicCheckpointIO, LastCheckpoint
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO, TINY

pytestmark = pytest.mark.usefixtures("one_thread")

IDENTITY = {"model.d_model": 32, "model.n_layers": 2, "optim.lr": 0.001, "seed": 1}


def handmade(path: Path, weight: torch.Tensor, count: int, identity: dict | None = None, step: int = 1) -> Path:
    """A checkpoint as train.py writes one, reduced to what averaging reads."""
    ckpt = {
        "global_step": step,
        "task": "lm",
        "state_dict": {
            "model.w": weight,
            "model.half": weight.half(),
            "model.count": torch.tensor([count, 7]),
            "alias.w": weight,
        },  # one tensor under two names, like tied embeddings
        "hyper_parameters": {"spec": {"d_model": 32}},
        "tokenizer": {"kind": "char"},
        "callbacks": {"ResumeState": {"run_identity": dict(identity or IDENTITY)}},
        "optimizer_states": [{"state": {}}],
        "lr_schedulers": [{}],
    }
    torch.save(ckpt, path)
    return path


def test_average_of_two_checkpoints_is_the_elementwise_mean(tmp_path: Path) -> None:
    a = handmade(tmp_path / "a.ckpt", torch.tensor([[1.0, 2.0], [3.0, 4.0]]), count=3, step=100)
    b = handmade(tmp_path / "b.ckpt", torch.tensor([[3.0, 0.0], [-3.0, 5.0]]), count=5, step=200)
    out = average_checkpoints([a, b])
    sd = out["state_dict"]
    assert torch.equal(sd["model.w"], torch.tensor([[2.0, 1.0], [0.0, 4.5]]))
    assert sd["model.half"].dtype == torch.float16 and torch.equal(sd["model.half"], sd["model.w"].half())
    assert torch.equal(sd["model.count"], torch.tensor([5, 7]))  # integer tensors: the newest checkpoint's
    assert sd["alias.w"] is sd["model.w"]  # still one tensor: saved once
    assert out["global_step"] == 200 and out["task"] == "lm" and out["tokenizer"] == {"kind": "char"}
    assert "optimizer_states" not in out and "lr_schedulers" not in out
    assert out["averaged_checkpoints"]["global_steps"] == [100, 200]
    write_averaged(out, tmp_path / "averaged.ckpt")
    assert torch.equal(
        torch.load(tmp_path / "averaged.ckpt", weights_only=False)["state_dict"]["model.w"], sd["model.w"]
    )
    with pytest.raises(AveragingError, match="last.ckpt"):
        write_averaged(out, tmp_path / "last.ckpt")  # ckpt_path=last would resume from it


def test_checkpoints_of_different_runs_are_refused_naming_the_keys(tmp_path: Path) -> None:
    a = handmade(tmp_path / "a.ckpt", torch.ones(2, 2), 1)
    b = handmade(
        tmp_path / "b.ckpt", torch.ones(2, 2), 1, identity={**IDENTITY, "model.d_model": 64, "optim.lr": 0.002}
    )
    with pytest.raises(AveragingError) as err:
        average_checkpoints([a, b])
    assert "model.d_model" in str(err.value) and "optim.lr" in str(err.value) and "seed" not in str(err.value)
    with pytest.raises(AveragingError, match="model.d_model"):
        average_checkpoints([a, b], allow_changes=["optim.lr"])
    average_checkpoints([a, b], allow_changes=["optim.lr", "model.d_model"])  # allowed explicitly
    c = handmade(tmp_path / "c.ckpt", torch.ones(3, 2), 1)  # same identity, other shape: still refused
    with pytest.raises(AveragingError, match="model.w"):
        average_checkpoints([a, c])


# ------------------------------------------------------------------------------ a toy Lightning run


class Toy(L.LightningModule):
    """One linear weight, SGD on a constant batch: the weights after each step are known."""

    def __init__(self) -> None:
        super().__init__()
        # what averaging requires of an ablate checkpoint (a stored architecture), reduced to a stand-in
        self.save_hyperparameters({"spec": {"toy": True}})
        self.layer = torch.nn.Linear(2, 1, bias=False)
        with torch.no_grad():
            self.layer.weight.copy_(torch.tensor([[1.0, -1.0]]))
        self.validated: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).sum()  # gradient: the batch's column sums, every step

    def validation_step(self, batch, batch_idx):
        self.validated.append(self.layer.weight.detach().clone())

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def toy_fit(callbacks: list, max_steps: int, ckpt_path: str | None = None, val_every: int = 2) -> Toy:
    data = DataLoader(TensorDataset(torch.tensor([[1.0, 2.0]] * 16)), batch_size=1)
    trainer = L.Trainer(
        max_steps=max_steps,
        callbacks=callbacks,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        val_check_interval=val_every,
        limit_val_batches=1,
        plugins=[AtomicCheckpointIO()],
    )
    model = Toy()
    trainer.fit(model, data, data, ckpt_path=ckpt_path)
    return model


def raw_weight(step: int) -> torch.Tensor:
    return torch.tensor([[1.0, -1.0]]) - 0.1 * step * torch.tensor([[1.0, 2.0]])


@pytest.mark.integration
def test_keep_last_n_leaves_exactly_n_step_checkpoints(tmp_path: Path) -> None:
    (tmp_path / step_checkpoint_name(50)).write_bytes(b"another trajectory's")  # beyond step 0: removed at start
    toy_fit([StepCheckpoints(tmp_path, every_n_train_steps=2, keep_last_n=3)], max_steps=9)
    assert [s for s, _ in step_checkpoints(tmp_path)] == [6, 8, 9]  # every 2 steps, and the end
    assert [p.name for p in last_step_checkpoints(tmp_path, 2)] == ["step-0000008.ckpt", "step-0000009.ckpt"]
    averaged = average_checkpoints(last_step_checkpoints(tmp_path, 3))
    expected = (raw_weight(6) + raw_weight(8) + raw_weight(9)) / 3
    assert torch.allclose(averaged["state_dict"]["layer.weight"], expected)
    with pytest.raises(AveragingError, match="holds 3"):
        last_step_checkpoints(tmp_path, 4)
    off = tmp_path / "off"
    toy_fit([StepCheckpoints(off, every_n_train_steps=2, keep_last_n=0), LastCheckpoint(off, 2)], max_steps=4)
    # the default: no more files (and last.previous.ckpt only until the run reaches max_steps)
    assert sorted(p.name for p in off.iterdir()) == ["last.ckpt"]


@pytest.mark.integration
def test_ema_is_validated_saved_and_resumed(tmp_path: Path) -> None:
    """decay 0.5 from the first step: ema_1 = w_1, ema_k = (ema_{k-1} + w_k) / 2."""
    ema = [raw_weight(1)]
    for step in range(2, 6):
        ema.append((ema[-1] + raw_weight(step)) / 2)
    run = tmp_path / "run"
    model = toy_fit(
        [
            EMA(decay=0.5),
            StepCheckpoints(run, every_n_train_steps=1, keep_last_n=5),
            LastCheckpoint(run, every_n_train_steps=2),
        ],
        max_steps=5,
    )
    # validation (after steps 2 and 4) saw the EMA, not the trained weights
    assert torch.allclose(model.validated[0], ema[1]) and torch.allclose(model.validated[1], ema[3])
    assert not torch.allclose(ema[1], raw_weight(2))
    for step in (2, 5):
        ckpt = torch.load(run / step_checkpoint_name(step), weights_only=False)
        assert torch.allclose(ckpt["state_dict"]["layer.weight"], ema[step - 1])
        assert torch.allclose(ckpt["current_model_state"]["layer.weight"], raw_weight(step))
    # last.ckpt was written at the end of training, after Lightning copied the EMA into the model:
    # it still holds the trained weights to resume from
    last = torch.load(run / "last.ckpt", weights_only=False)
    assert last["global_step"] == 5 and torch.allclose(last["current_model_state"]["layer.weight"], raw_weight(5))
    assert torch.allclose(model.layer.weight.detach(), ema[4])  # after training: the EMA (the test uses it)
    # averaging: the EMA weights by default, the trained ones with weights=raw
    assert torch.allclose(average_checkpoints([run / "last.ckpt"])["state_dict"]["layer.weight"], ema[4])
    assert torch.allclose(
        average_checkpoints([run / "last.ckpt"], weights="raw")["state_dict"]["layer.weight"], raw_weight(5)
    )
    # a resume from step 2 continues both the trained weights and the EMA
    resumed_dir = tmp_path / "resumed"
    toy_fit(
        [EMA(decay=0.5), StepCheckpoints(resumed_dir, 1, keep_last_n=1)],
        max_steps=5,
        ckpt_path=str(run / step_checkpoint_name(2)),
    )
    resumed = torch.load(resumed_dir / step_checkpoint_name(5), weights_only=False)
    assert torch.allclose(resumed["state_dict"]["layer.weight"], ema[4])
    assert torch.allclose(resumed["current_model_state"]["layer.weight"], raw_weight(5))


@pytest.mark.integration
def test_ema_off_changes_nothing(tmp_path: Path) -> None:
    model = toy_fit([EMA(decay=None), StepCheckpoints(tmp_path, every_n_train_steps=2, keep_last_n=1)], max_steps=2)
    assert torch.allclose(model.validated[0], raw_weight(2))
    ckpt = torch.load(tmp_path / step_checkpoint_name(2), weights_only=False)
    assert "current_model_state" not in ckpt and "EMA" not in ckpt["callbacks"]
    assert torch.allclose(ckpt["state_dict"]["layer.weight"], raw_weight(2))


# ------------------------------------------------------------------------------ end to end


def script(name: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    return forked_python.run(
        [sys.executable, str(REPO / name), *args],
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        stdin=subprocess.DEVNULL,
        env=env,
        check=False,
    )


@pytest.mark.integration
def test_tiny_run_keeps_the_last_two_averages_them_and_generate_loads_it(run_train, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_train(
        *TINY,
        f"hydra.run.dir={run}",
        "logger=[]",
        "callbacks.checkpoint_last.every_n_train_steps=2",
        "callbacks.checkpoint_keep.keep_last_n=2",
    )
    ckpts = run / "checkpoints"
    assert [p.name for _, p in step_checkpoints(ckpts)] == ["step-0000004.ckpt", "step-0000006.ckpt"]
    out = ckpts / "averaged.ckpt"
    proc = script("scripts/average_checkpoints.py", f"ckpt_dir={ckpts}", "last_n=2", f"out={out}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1])["global_steps"] == [4, 6]
    parts = [torch.load(ckpts / f"step-000000{s}.ckpt", weights_only=False)["state_dict"] for s in (4, 6)]
    averaged = torch.load(out, weights_only=False)
    for key, value in averaged["state_dict"].items():
        assert torch.allclose(value, (parts[0][key] + parts[1][key]) / 2), key
    assert not torch.equal(parts[0]["model.tok_emb.weight"], parts[1]["model.tok_emb.weight"])
    proc = script("generate.py", f"ckpt_path={out}", "prompt=ROMEO:", "max_new_tokens=8", "num_samples=1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.startswith("ROMEO:")
    proc = script("scripts/average_checkpoints.py", f"ckpt_dir={ckpts}", "last_n=3", f"out={tmp_path / 'x.ckpt'}")
    assert proc.returncode != 0 and "holds 2 step-*.ckpt" in proc.stderr


@pytest.mark.integration
def test_tiny_run_with_ema(run_train, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run_train(*TINY, f"hydra.run.dir={run}", "logger=[]", "callbacks.ema.decay=0.5")
    last = torch.load(run / "checkpoints" / "last.ckpt", weights_only=False)
    key = "model.tok_emb.weight"
    assert "EMA" in last["callbacks"] and not torch.allclose(last["state_dict"][key], last["current_model_state"][key])


def test_a_file_without_weights_is_refused_by_name(tmp_path):
    import torch

    from ablate.callbacks.averaging import AveragingError, average_checkpoints

    empty = tmp_path / "empty.ckpt"
    torch.save({"state_dict": {}, "global_step": 3}, empty)
    with pytest.raises(AveragingError, match=r"empty\.ckpt holds no model weights"):
        average_checkpoints([empty, empty])
