"""What each part of a checkpoint must be before anything uses it, beyond its weights
(:mod:`ablate.tasks.checkpoints` checks those): the Lightning version Lightning migrates it by, the
tokenizer it decodes with, and, for a resume, the training state Lightning and our callbacks restore.

A checkpoint is untrusted input: an altered part is refused by name (:class:`PartError`, exit 2)
instead of failing inside Lightning's migration, a callback's ``load_state_dict`` or a tokenizer.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import torch
from packaging.version import InvalidVersion, Version

from ablate.errors import UserError

VERSION_KEY = "pytorch-lightning_version"
OLDEST_LIGHTNING = Version("2.0.0")  # ablate has always written its checkpoints with Lightning 2
# the key of ablate.callbacks.checkpointing.ResumeState's entry in a checkpoint's "callbacks" (its
# Lightning state key, the class name; tests/run/test_resume.py checks they agree)
RESUME_STATE_KEY = "ResumeState"

NUMBER = (int, float)
# callback state key (prefix) -> {field: (required, types)}: what each callback's load_state_dict reads
CALLBACK_FIELDS: dict[str, dict[str, tuple[bool, tuple[type, ...]]]] = {
    RESUME_STATE_KEY: {
        "rng": (True, (Mapping,)),
        "run_identity": (True, (Mapping,)),
        "wandb_run_id": (False, (str, type(None))),
        "wall_time_s": (False, (*NUMBER, type(None))),
    },
    # Lightning's ModelCheckpoint (best.ckpt): its load_state_dict indexes these two
    "ModelCheckpoint": {
        "best_model_score": (True, (torch.Tensor, *NUMBER, type(None))),
        "best_model_path": (True, (str,)),
        "dirpath": (False, (str, type(None))),
        "kth_best_model_path": (False, (str,)),
        "kth_value": (False, (torch.Tensor, *NUMBER, type(None))),
        "best_k_models": (False, (Mapping,)),
        "last_model_path": (False, (str,)),
    },
    "DivergenceMonitor": {
        "initial_loss": (False, (*NUMBER, type(None))),
        "first_bad_step": (False, (*NUMBER, type(None))),
        "first_bad_loss": (False, (*NUMBER, type(None))),
    },
    "ThroughputMonitor": {"tokens_seen": (False, NUMBER), "time_s": (False, NUMBER)},
    "EMA": {"latest_update_step": (False, (int,))},
}


class PartError(UserError, ValueError):
    """A part of a checkpoint that is not what ablate writes there; the message names the file and the part."""


def check_lightning_version(checkpoint: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """The Lightning version a checkpoint records is one Lightning reads without migrating it from
    before 2.0 (its migrations of 0.x/1.x checkpoints index keys ablate's never had)."""
    version = checkpoint.get(VERSION_KEY)
    if not isinstance(version, str):
        raise PartError(
            f"{path} records no Lightning version ({VERSION_KEY} is {version!r}): not a checkpoint Lightning wrote, "
            "or altered; refused"
        )
    try:
        parsed = Version(version)
    except InvalidVersion:
        raise PartError(f"{path}: {VERSION_KEY}={version!r} is not a version number; refused") from None
    if parsed < OLDEST_LIGHTNING:
        raise PartError(
            f"{path} says Lightning {version} wrote it ({VERSION_KEY}); ablate's checkpoints come from Lightning "
            f">= {OLDEST_LIGHTNING}, and Lightning's migration from {version} would fail on it: the file was altered "
            "or is not ablate's; refused"
        )


def check_training_state(checkpoint: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """What a resume restores besides the weights is as ``train.py`` writes it: the run's own state
    (RNG states, run identity), each callback's state with the fields its ``load_state_dict`` reads,
    and the loops, optimiser and scheduler states Lightning indexes."""
    expected: tuple[tuple[str, tuple[type, ...]], ...] = (
        ("global_step", (int,)),
        ("epoch", (int,)),
        ("loops", (Mapping,)),
    )
    for key, types in expected:
        if not isinstance(checkpoint.get(key), types):
            raise PartError(f"{path}: {key} is {_kind(checkpoint.get(key))}, not what train.py writes; not resumed")
    for key in ("optimizer_states", "lr_schedulers"):
        value = checkpoint.get(key)
        if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
            raise PartError(f"{path}: {key} is {_kind(value)}, not a list of states; not resumed")
    callbacks = checkpoint.get("callbacks")
    if not isinstance(callbacks, Mapping):
        raise PartError(f"{path}: its callback states are {_kind(callbacks)}, not a mapping; not resumed")
    if RESUME_STATE_KEY not in callbacks:
        raise PartError(
            f"{path} holds no {RESUME_STATE_KEY} (the run's RNG states and settings, which every checkpoint of "
            "train.py carries): its settings cannot be compared with this run's, so it is not resumed (the file was "
            "altered or predates that state). Start a new run; eval.py, generate.py and the exports still take it"
        )
    for key, state in callbacks.items():
        fields = next((f for prefix, f in CALLBACK_FIELDS.items() if str(key).startswith(prefix)), None)
        if not isinstance(state, Mapping):
            raise PartError(f"{path}: the state of callback {key} is {_kind(state)}, not a mapping; not resumed")
        for name, (required, types) in (fields or {}).items():
            if name not in state:
                if required:
                    raise PartError(f"{path}: the state of callback {key} has no {name}; not resumed")
                continue
            if not isinstance(state[name], types) or isinstance(state[name], bool):
                raise PartError(f"{path}: {key}.{name} is {_kind(state[name])}; not resumed")
    _check_rng(callbacks[RESUME_STATE_KEY]["rng"], path)


def _check_rng(rng: Mapping[str, Any], path: str | os.PathLike[str]) -> None:
    """The RNG states :func:`ablate.callbacks.checkpointing.set_rng_states` restores."""
    numpy = rng.get("numpy")
    fine = (
        isinstance(rng.get("torch"), torch.Tensor)
        and rng["torch"].dtype == torch.uint8
        and isinstance(numpy, Mapping)
        and isinstance(numpy.get("kind"), str)
        and isinstance(numpy.get("keys"), torch.Tensor)
        and all(isinstance(numpy.get(k), NUMBER) for k in ("pos", "has_gauss", "cached_gaussian"))
        and isinstance(rng.get("python"), (tuple, list))
    )
    if not fine:
        raise PartError(f"{path}: {RESUME_STATE_KEY}.rng is not the RNG states train.py stores; not resumed")


def _kind(value: Any) -> str:
    return "missing" if value is None else f"a {type(value).__name__}"
