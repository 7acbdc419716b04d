"""A third task without touching train.py: the task interface is all train.py knows (issue 11).

A toy task ("copy": predict the input token itself, a few steps on Tiny Shakespeare's LM data) is
defined here, registered in ablate.tasks at test time, selected with `+task.name=copy`-style
config, and trained through ablate.train.fit: it checks its own config, evaluates itself after
training and adds its own entry to status.json.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig, open_dict

import ablate.tasks as tasks
from ablate.config import ConfigError
from ablate.nn.transformer import TransformerLM
from ablate.tasks.base import TaskModule
from conftest import REPO, TINY


class CopyTask(TaskModule):
    """Predict the current token (not the next): trivially learnable, so the loss must fall."""

    task_name = "copy"
    config_keys = frozenset({"name", "refuse"})  # the keys of the task group it reads

    def __init__(self, spec: dict[str, Any], optim: dict[str, Any]) -> None:
        super().__init__()
        from ablate.config import ModelSpec

        self.spec, self.optim_cfg = ModelSpec(**spec), optim
        self.model = TransformerLM(self.spec)

    @classmethod
    def check_config(cls, cfg: DictConfig) -> None:
        if cfg.task.get("refuse"):
            raise ConfigError("task=copy: task.refuse is set")

    def train_loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, _ = batch
        loss = F.cross_entropy(self.model(x).flatten(0, 1), x.flatten())
        return loss, loss.detach()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss, _ = self.train_loss(batch)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val/loss", self.train_loss(batch)[0])

    def evaluate_after_fit(self, trainer, datamodule, cfg):
        x, _ = next(iter(datamodule.val_dataloader()))
        with torch.no_grad():
            accuracy = (self.model(x).argmax(-1) == x).float().mean().item()
        return {"test/copy_accuracy": accuracy}, {"copy": {"evaluated_tokens": x.numel()}}


def build_copy(cfg, datamodule, spec):
    return CopyTask(spec.as_dict(), dict(cfg.optim))


@pytest.fixture
def copy_task(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(tasks.TASKS, "copy", build_copy)
    monkeypatch.setitem(tasks.TASK_CLASSES, "copy", f"{__name__}:CopyTask")


def composed(tmp_path: Path, data_dir: Path, *overrides: str) -> DictConfig:
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"):
        cfg = compose(
            config_name="train",
            overrides=[
                *TINY,
                "logger=csv",
                "task.name=copy",
                "trainer.max_steps=30",
                "trainer.val_check_interval=15",
                "optim.lr=3e-3",
                *overrides,
            ],
            return_hydra_config=False,
        )
    with open_dict(cfg):
        cfg.paths.root_dir = str(tmp_path)
        cfg.paths.data_dir, cfg.paths.cache_dir = str(data_dir), str(tmp_path / "cache")
        cfg.paths.output_dir = str(tmp_path / "run")
        for node in cfg.callbacks.values():
            if node is not None and "dirpath" in node:
                node.dirpath = str(tmp_path / "run" / "checkpoints")
    return cfg


def test_train_py_names_no_task() -> None:
    source = (REPO / "src" / "ablate" / "train.py").read_text()
    assert not re.search(r"translation|lm_data|evaluate_lengths|LanguageModel", source)


@pytest.mark.integration
def test_a_third_task_trains_through_train_py(copy_task, tmp_path: Path, data_dir: Path, one_thread) -> None:
    from ablate.train import Job, fit

    status = fit(composed(tmp_path, data_dir), tmp_path / "run", Job())
    assert status["status"] == "completed" and status["steps"] == 30
    assert status["metrics"]["test/copy_accuracy"] > 0.5  # learned to copy
    assert status["copy"] == {"evaluated_tokens": 4 * 16}


def test_a_third_task_checks_its_own_config_before_data(copy_task, tmp_path: Path, data_dir: Path) -> None:
    from ablate.train import check_config

    with pytest.raises(ConfigError, match="task.refuse is set"):
        check_config(composed(tmp_path, data_dir, "+task.refuse=true"))
