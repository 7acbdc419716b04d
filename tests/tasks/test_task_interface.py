"""A third task lands in one place: this file (issues 11 and 19).

A toy task ("copy": predict the input token itself, a few steps on Tiny Shakespeare's LM data) is
defined here and registered with one ``register_task(TaskSpec(...))`` call at test time, with its
own metric (``copy_accuracy``). Selected with ``task.name=copy``, it trains through
ablate.run.train.fit, checks its own config, evaluates itself after training and adds its own entry to
status.json; the console, the analysis and the optimised-metric check know its metric from its
declaration. No other file of the package names it.
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

from ablate import metrics
from ablate.errors import ConfigError
from ablate.nn.transformer import TransformerLM
from ablate.tasks import TASKS, TaskSpec, register_task, unregister_task
from ablate.tasks.base import TaskModule
from helpers.runs import REPO, TINY


class CopyTask(TaskModule):
    """Predict the current token (not the next): trivially learnable, so the loss must fall."""

    task_name = "copy"
    config_keys = frozenset({"name", "refuse"})  # the keys of the task group it reads

    def __init__(self, spec: dict[str, Any], optim: dict[str, Any]) -> None:
        super().__init__()
        from ablate.nn.spec import ModelSpec

        self.spec, self.optim_cfg = ModelSpec(**spec), optim  # as the spec stores itself (as_dict)
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

    def evaluate_after_fit(self, trainer, datamodule, evaluation):
        x, _ = next(iter(datamodule.val_dataloader()))
        with torch.no_grad():
            accuracy = (self.model(x).argmax(-1) == x).float().mean().item()
        return {"test/copy_accuracy": accuracy}, {"copy": {"evaluated_tokens": x.numel()}}


def build_copy(cfg, datamodule, spec):
    return CopyTask(spec.as_dict(), cfg.optim.as_dict())


COPY_ACCURACY = metrics.Metric("copy_accuracy", "max", "copy accuracy", "fraction of tokens", format=".3f")
LOSS = TASKS["lm"].metrics[0]  # the cross-entropy, as the built-in tasks declare it


@pytest.fixture
def copy_task():
    register_task(
        TaskSpec(
            name="copy",
            module=CopyTask,
            build=build_copy,
            metrics=(LOSS, COPY_ACCURACY),
            headline_metric="test/copy_accuracy",
            console_metric="test/copy_accuracy",
            checkpoint_scripts="nothing yet",
        )
    )
    yield TASKS["copy"]
    unregister_task("copy")


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
    source = (REPO / "src" / "ablate" / "run" / "train.py").read_text()
    assert not re.search(r"translation|lm_data|evaluate_lengths|LanguageModel", source)


@pytest.mark.integration
def test_a_third_task_trains_through_train_py(copy_task, tmp_path: Path, data_dir: Path, one_thread) -> None:
    from ablate.run.config import RunConfig
    from ablate.run.plan import Job, Plan, RunControl, check_config
    from ablate.run.train import fit

    cfg = composed(tmp_path, data_dir)
    status = fit(
        RunConfig.from_hydra(cfg), Job(RunControl.from_config(cfg, tmp_path / "run")), check_config(cfg), Plan()
    )
    assert status.status == "completed" and status.steps == 30
    assert status.metrics["test/copy_accuracy"] > 0.5  # learned to copy
    assert status.extra["copy"] == {"evaluated_tokens": 4 * 16}  # the task's own entry
    assert set(status.extra) - {"copy"} <= {"scale_at_init", "test_is_validation"}  # the run's own records
    assert status.extra["scale_at_init"]["vocab_size"] > 0  # the scale probe measured this task's model too


def test_a_third_task_checks_its_own_config_before_data(copy_task, tmp_path: Path, data_dir: Path) -> None:
    from ablate.run.plan import check_config

    with pytest.raises(ConfigError, match="task.refuse is set"):
        check_config(composed(tmp_path, data_dir, "+task.refuse=true"))


def test_a_third_tasks_metric_is_known_wherever_metrics_are_shown(copy_task) -> None:
    from ablate.analysis.job import higher_is_better
    from ablate.cli.console import format_run_summary, format_sweep_summary
    from ablate.config.checks import optimized_metric_problem
    from ablate.run.status import RunStatus
    from ablate.tasks import ranked_metrics, task_of_metrics

    assert higher_is_better("test/copy_accuracy")
    assert metrics.axis_label("test/copy_accuracy") == "test copy accuracy (fraction of tokens)"
    status = {"status": "completed", "steps": 30, "metrics": {"test/copy_accuracy": 0.91234, "test/loss": 0.5}}
    assert "  test/copy_accuracy  0.912" in format_run_summary(RunStatus.from_json(status), "out").splitlines()
    assert task_of_metrics({"test/copy_accuracy", "test/loss"}) == "copy"
    assert "test/copy_accuracy" in format_sweep_summary([{**status, "job": "0"}]).splitlines()[0]
    cfg = {"task": {"name": "copy"}, "optimized_metric": "test/copy_accuracy"}
    assert optimized_metric_problem(cfg, ranked_metrics(cfg)) is None
    other = {**cfg, "optimized_metric": "val/bleu"}
    assert "not logged by task=copy" in str(optimized_metric_problem(other, ranked_metrics(other)))


def test_unregistering_the_task_forgets_its_metric(copy_task) -> None:
    unregister_task("copy")
    try:
        assert metrics.find("test/copy_accuracy") is None and metrics.find("val/loss") is not None
        with pytest.raises(metrics.UndeclaredMetricError, match="copy_accuracy"):
            metrics.higher_is_better("test/copy_accuracy")
    finally:
        register_task(copy_task)
