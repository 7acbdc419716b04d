"""Tasks (LightningModules) and the registry ``train.py`` picks one from by ``task.name``.

* ``lm``: decoder-only language modelling (:mod:`ablate.tasks.lm`), with the LM corpora;
* ``translation``: encoder-decoder translation (:mod:`ablate.tasks.translation`), with the
  parallel corpora of :mod:`ablate.data.translation_data`.

Adding a task: a LightningModule, a factory ``(cfg, datamodule, spec) -> module`` in ``TASKS``,
and ``conf/task/<name>.yaml``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import lightning as L
from omegaconf import DictConfig, OmegaConf

from ablate.config import ConfigError, ModelSpec
from ablate.optim import used_optim_config

if TYPE_CHECKING:
    from ablate.tasks.base import TaskModule


def _container(node: Any) -> dict[str, Any]:
    if node is None:
        return {}
    if isinstance(node, DictConfig):
        return cast(dict[str, Any], OmegaConf.to_container(node, resolve=True))
    return dict(node)


def _is_translation_data(datamodule: Any) -> bool:
    from ablate.data.translation_data import TranslationDataModule

    return isinstance(datamodule, TranslationDataModule)


def build_lm(cfg: DictConfig, datamodule: Any, spec: ModelSpec) -> TaskModule:
    from ablate.tasks.lm import LanguageModelTask

    if _is_translation_data(datamodule):
        raise ConfigError(f"data={type(datamodule).__name__} is a parallel corpus: train it with task=translation")
    return LanguageModelTask(
        spec.as_dict(),
        used_optim_config(_container(cfg.optim)),
        data=_container(cfg.data),
        compile=cfg.model.get("compile", False),
    )


def build_translation(cfg: DictConfig, datamodule: Any, spec: ModelSpec) -> TaskModule:
    from ablate.tasks.translation import TranslationTask

    if not _is_translation_data(datamodule):
        raise ConfigError(
            f"task=translation needs a parallel corpus (data=multi30k, iwslt14, iwslt2017, wmt14, parallel), "
            f"got {type(datamodule).__name__}"
        )
    if spec.encoder_layers <= 0:
        raise ConfigError(
            "task=translation needs an encoder: set model.encoder_layers and model.decoder_layers, or use "
            "model=translation_small, transformer_iwslt_de_en or transformer_base"
        )
    task_cfg = {k: v for k, v in _container(cfg.get("task")).items() if k != "name"}
    return TranslationTask(
        spec.as_dict(),
        used_optim_config(_container(cfg.optim)),
        decode=_container(cfg.get("decode")),
        task=task_cfg,
        data=_container(cfg.data),
        compile=cfg.model.get("compile", False),
    )


TASKS: dict[str, Callable[[DictConfig, Any, ModelSpec], TaskModule]] = {
    "lm": build_lm,
    "translation": build_translation,
}


# the scripts that take each task's checkpoints (named in the error for a checkpoint of the wrong kind)
TASK_SCRIPTS = {"lm": "generate.py", "translation": "eval.py or translate.py"}


def checkpoint_task(path: str | Path) -> str:
    """The task a checkpoint was trained for: stored by :class:`~ablate.tasks.base.TaskModule`,
    or (older checkpoints) ``translation`` when its model has an encoder, else ``lm``. A file
    that is not a readable checkpoint raises :class:`ablate.resume.CheckpointError`."""
    from ablate.resume import inspect_checkpoint

    checkpoint = inspect_checkpoint(path)
    if checkpoint.get("task"):
        return str(checkpoint["task"])
    spec = (checkpoint.get("hyper_parameters") or {}).get("spec") or {}
    return "translation" if (spec.get("encoder_layers") or 0) > 0 else "lm"


def require_checkpoint_task(path: str | Path, expected: str, script: str) -> None:
    """Stop with a message naming the checkpoint's task and the script that takes it when
    ``path`` holds a checkpoint of another task than ``expected`` (or is not a readable checkpoint)."""
    from ablate.resume import CheckpointError

    if not Path(path).is_file():
        raise SystemExit(f"ckpt_path={path}: no such checkpoint file")
    try:
        found = checkpoint_task(path)
    except CheckpointError as err:
        raise SystemExit(str(err)) from None
    if found != expected:
        raise SystemExit(
            f"{path} holds a task={found} checkpoint; {script} takes task={expected} checkpoints. "
            f"Use {TASK_SCRIPTS.get(found, 'the script of that task')} for this one."
        )


# the LightningModule of each task (imported when asked for: translation pulls in sacreBLEU)
TASK_CLASSES = {"lm": "ablate.tasks.lm:LanguageModelTask", "translation": "ablate.tasks.translation:TranslationTask"}


def task_name(cfg: DictConfig) -> str:
    name = (cfg.get("task") or {}).get("name", "lm")
    if name not in TASKS:
        raise ConfigError(f"unknown task={name!r}; valid options: {', '.join(TASKS)}")
    return name


def task_class(cfg: DictConfig) -> type[TaskModule]:
    """The :class:`~ablate.tasks.base.TaskModule` subclass of ``cfg.task.name``."""
    import importlib

    module, cls = TASK_CLASSES[task_name(cfg)].split(":")
    found: type[TaskModule] = getattr(importlib.import_module(module), cls)
    return found


def check_task_config(cfg: DictConfig) -> None:
    """The chosen task's own config checks (``TaskModule.check_config``), before any data is read."""
    task_class(cfg).check_config(cfg)


def load_task_checkpoint(
    path: str | Path, expected: str | None = None, script: str = "this script", map_location: Any = "cpu", **kwargs: Any
) -> L.LightningModule:
    """The task module a checkpoint holds, rebuilt by its own class (:data:`TASK_CLASSES`, by
    :func:`checkpoint_task`): the one way every script loads a checkpoint. With ``expected``, a
    checkpoint of another task stops with a message naming the script that takes it; a file that
    is not a readable checkpoint stops naming the file."""
    import importlib

    if expected is not None:
        require_checkpoint_task(path, expected, script)
    module, cls = TASK_CLASSES[checkpoint_task(path)].split(":")
    from ablate import safe_load

    # checkpoint_task read the file with the restricted unpickler already; Lightning reads it the same way
    return getattr(importlib.import_module(module), cls).load_from_checkpoint(
        str(path), map_location=map_location, weights_only=safe_load.lightning_weights_only(), **kwargs
    )


def build_task(cfg: DictConfig, datamodule: Any, spec: ModelSpec) -> TaskModule:
    """The LightningModule of ``cfg.task.name`` (default ``lm``) for this data and model spec."""
    task: TaskModule = TASKS[task_name(cfg)](cfg, datamodule, spec)
    return task
