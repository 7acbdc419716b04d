"""Reading a task's checkpoint: what it must hold before any script loads it, and the one way
every script loads it (:func:`load_task_checkpoint`).

A damaged or altered file is refused naming the file and the first mismatch (exit 2), never a raw
torch error or code run from it (:func:`check_checkpoint_content` builds the stored spec's model on
the ``meta`` device and checks every weight's presence, shape and finiteness).
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch

from ablate.checkpoints import safe_load
from ablate.checkpoints.files import CheckpointError, inspect_checkpoint
from ablate.checkpoints.parts import check_lightning_version
from ablate.checkpoints.paths import CheckpointFileMissing, require_file
from ablate.checkpoints.stored_config import check_stored_config
from ablate.data.registry import data_module_class
from ablate.data.stored_tokenizer import check_tokenizer
from ablate.errors import UserError
from ablate.nn.spec import ModelSpec
from ablate.tasks import TASKS


class CheckpointContentError(UserError, ValueError):
    """A checkpoint whose content does not match the configuration it carries."""


def _shape(shape: torch.Size) -> str:
    return f"({', '.join(map(str, shape))})"


def expected_state(task: str, params: Mapping[str, Any], path: str | os.PathLike[str]) -> dict[str, torch.Size]:
    """``weight name -> shape`` of the task module the stored hyper-parameters build (on ``meta``)."""
    if task not in TASKS:
        raise CheckpointContentError(f"{path}: its task field says task={task!r}; registered tasks: {', '.join(TASKS)}")
    if not isinstance(params.get("spec"), Mapping):
        raise CheckpointContentError(
            f"{path} is not an ablate checkpoint: it has no hyper_parameters.spec (the model's architecture)"
        )

    cls = TASKS[task].module_class()
    try:
        ModelSpec.from_dict(params["spec"]).validate()  # what train.py checked before it wrote the file
        with torch.device("meta"):
            module = cls(**{**params, "compile": False})
    except Exception as err:  # an unknown or missing key, an invalid spec, a spec of another task
        raise CheckpointContentError(
            f"{path}: its stored configuration does not build a task={task} model ({type(err).__name__}: "
            f"{str(err)[:300]}): the file was altered, or its task field does not match its model"
        ) from None
    return {k: v.shape for k, v in module.state_dict().items()}


def check_checkpoint_content(checkpoint: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """Refuse a checkpoint whose weights are not those of its stored model, or not finite (module docstring)."""
    check_stored_config(checkpoint, path)
    task = str(checkpoint.get("task") or _task_of_older(checkpoint))
    expected = expected_state(task, checkpoint.get("hyper_parameters") or {}, path)
    state = checkpoint.get("state_dict")
    if not isinstance(state, Mapping):
        raise CheckpointContentError(f"{path} holds no state_dict (the model's weights)")
    stored = {k: v for k, v in state.items() if not str(k).startswith("forward_fn.")}  # older duplicates
    for name, shape in expected.items():
        if name not in stored:
            raise CheckpointContentError(
                f"{path}: the weight {name} {_shape(shape)} is missing (the model its spec describes has it)"
            )
        value = stored[name]
        if not isinstance(value, torch.Tensor):
            raise CheckpointContentError(f"{path}: {name} is a {type(value).__name__}, not a tensor")
        if value.shape != shape:
            raise CheckpointContentError(
                f"{path}: {name} has shape {_shape(value.shape)}, but the model its spec describes has {_shape(shape)}"
            )
    extra = [k for k in stored if k not in expected]
    if extra:
        raise CheckpointContentError(
            f"{path}: {extra[0]} is not a weight of the model its spec describes ({len(extra)} such key(s))"
        )
    for name, value in stored.items():
        if value.is_floating_point():
            bad = int((~torch.isfinite(value)).sum())
            if bad:
                raise CheckpointContentError(
                    f"{path}: {name} holds {bad} NaN/inf value(s) of {value.numel()}: the weights are damaged or "
                    "the run diverged; not loaded (an earlier checkpoint of the run may be intact)"
                )
    spec = (checkpoint.get("hyper_parameters") or {}).get("spec") or {}
    check_tokenizer(checkpoint, spec.get("vocab_size"), path)  # its kind, content and size: the model's vocabulary
    check_lightning_version(checkpoint, path)  # Lightning's migration reads it when it loads the file


def _task_of_older(checkpoint: Mapping[str, Any]) -> str:
    """Checkpoints from before the task field: translation when the model has an encoder."""
    spec = (checkpoint.get("hyper_parameters") or {}).get("spec") or {}
    layers = spec.get("encoder_layers") if isinstance(spec, Mapping) else None
    return "translation" if isinstance(layers, int) and layers > 0 else "lm"


def inspect_checked(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A checkpoint read safely, its data module one of ablate's and its weights those of the model
    its configuration builds, finite (:func:`check_checkpoint_content`); :class:`CheckpointError`
    naming the file and the first mismatch otherwise."""
    checkpoint = inspect_checkpoint(path)
    try:
        data = (checkpoint.get("hyper_parameters") or {}).get("data")
        if isinstance(data, Mapping) and "_target_" in data:
            data_module_class(data["_target_"], f"{path}: hyper_parameters.data")
        check_checkpoint_content(checkpoint, path)
    except UserError as err:
        raise CheckpointError(str(err)) from None
    return checkpoint


def checkpoint_task(path: str | Path) -> str:
    """The task a checkpoint was trained for: stored, or (older checkpoints) ``translation`` when its
    model has an encoder, else ``lm``; :class:`ablate.checkpoints.files.CheckpointError` if unreadable."""
    checkpoint = inspect_checkpoint(path, weights=False)
    if checkpoint.get("task"):
        return str(checkpoint["task"])
    return _task_of_older(checkpoint)


def require_checkpoint_task(path: str | Path, expected: str, script: str) -> None:
    """Stop, naming the script that takes it, when ``path`` holds a checkpoint of another task than ``expected``."""
    try:
        require_file(path)
        found = checkpoint_task(path)
    except (CheckpointError, CheckpointFileMissing) as err:
        raise SystemExit(str(err)) from None
    if found != expected:
        other = TASKS[found].checkpoint_scripts if found in TASKS else "the script of that task"
        raise SystemExit(
            f"{path} holds a task={found} checkpoint; {script} takes task={expected} checkpoints. Use {other} for this one."
        )


def load_task_checkpoint(
    path: str | Path, expected: str | None = None, script: str = "this script", map_location: Any = "cpu", **kwargs: Any
) -> L.LightningModule:
    """The task module a checkpoint holds, rebuilt by its own class (of task ``expected``, if given)."""
    if expected is not None:
        require_checkpoint_task(path, expected, script)
    try:
        found = checkpoint_task(path)
        if found not in TASKS:
            raise SystemExit(f"{path} holds a task={found} checkpoint; registered tasks: {', '.join(TASKS)}")
        # its weights are those of the model its stored config builds, and finite (ablate.tasks.checkpoints)
        checked = inspect_checked(path)
    except CheckpointError as err:
        raise SystemExit(str(err)) from None
    # checkpoint_task read the file with the restricted unpickler already; Lightning reads it the same way
    source: str | io.BytesIO = str(path)
    if Path(path).is_dir():  # a sharded FSDP checkpoint: its checked contents, as one file in memory, weights only
        source = io.BytesIO()
        torch.save({k: v for k, v in checked.items() if k != "optimizer_states"}, source)
        source.seek(0)
    loaded: L.LightningModule = (
        TASKS[found]
        .module_class()
        .load_from_checkpoint(
            source, map_location=map_location, weights_only=safe_load.lightning_weights_only(), **kwargs
        )
    )
    return loaded
