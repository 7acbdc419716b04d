"""A run's identity: the settings that define what is trained (architecture, task, data, global
batch, optimiser, seed, the length where the LR schedule depends on it), carried by every checkpoint,
so that :func:`check_same_run` refuses a resume under other settings unless ``resume_allow_changes``
names them. Where data and logs live, workers, the micro-batch, ``model.compile`` are not part of it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from ablate.config.dotted import flatten
from ablate.errors import UserError
from ablate.nn.axes import ARCHITECTURE_GROUPS, AXES
from ablate.optim import used_optim_config

IDENTITY_GROUPS = ("task", "model", *ARCHITECTURE_GROUPS, "data", "optim")
MODEL_GROUPS = ("task", "model", *ARCHITECTURE_GROUPS)  # a resume never changes these (the weights' shapes and roles)
IDENTITY_KEYS = (
    "seed",
    "trainer.max_steps",
    "trainer.max_epochs",
    "trainer.precision",
    # the EMA decides which weights are validated and checkpointed
    "callbacks.ema.decay",
    "callbacks.ema.update_every_n_steps",
    "callbacks.ema.update_starting_at_step",
)
HORIZON_FREE_SCHEDULES = ("inverse_sqrt", "constant")  # their LR at a step does not depend on max_steps
# within those groups: where things live and how fast they load, not what is trained
NOT_IDENTITY = (
    "data.data_dir",
    "data.cache_dir",
    "data.num_workers",
    "data.pin_memory",
    "data.micro_batch_size",
    "data.eval_batch_size",
    "model.compile",
    "optim.fused",
)
# keys added after checkpoints were written, at the default that reproduces what those checkpoints
# did: left out of the identity at that default, so a checkpoint from before the key resumes
DEFAULT_SINCE_ADDED = {"data.splits": "nanogpt"}


class ResumeMismatchError(UserError, ValueError):
    """The checkpoint was trained with other settings than the current config."""


def run_identity(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The run-defining settings of a composed config, flat (``{"optim.lr": 0.002, ...}``)."""

    def wanted(key: str) -> bool:
        return (key.split(".", 1)[0] in IDENTITY_GROUPS or key in IDENTITY_KEYS) and not key.startswith(NOT_IDENTITY)

    if isinstance(cfg, DictConfig):
        # resolve key by key: the keys left out (data.data_dir -> ${paths...} -> ${hydra:...})
        # need not resolve, e.g. outside a Hydra job
        raw = flatten(OmegaConf.to_container(cfg, resolve=False))
        flat = {k: _plain(OmegaConf.select(cfg, k)) for k in raw if wanted(k)}
    else:
        flat = {k: v for k, v in flatten(cfg).items() if wanted(k)}
    flat.update({key: flat.get(key) for key in IDENTITY_KEYS})
    flat = {k: v for k, v in flat.items() if k not in DEFAULT_SINCE_ADDED or DEFAULT_SINCE_ADDED[k] != v}
    # The training length defines the run only through the LR schedule: training an
    # inverse-sqrt or constant schedule longer continues the same run, a cosine/linear one with
    # the horizon max_steps does not (the decay would be stretched from the resumed step on).
    if flat.get("optim.schedule") in HORIZON_FREE_SCHEDULES or flat.get("optim.decay_steps") is not None:
        flat.pop("trainer.max_steps", None)
    optim = {k.split(".", 1)[1]: v for k, v in flat.items() if k.startswith("optim.")}
    if optim:  # only the keys the chosen optimiser reads
        used = used_optim_config(optim)
        flat = {k: v for k, v in flat.items() if not k.startswith("optim.") or k.split(".", 1)[1] in used}
    return flat


def _plain(value: Any) -> Any:
    return OmegaConf.to_container(value, resolve=True) if isinstance(value, (DictConfig, ListConfig)) else value


def change_allowed(key: str, allow: Iterable[str]) -> bool:
    """Whether ``resume_allow_changes`` (``allow``) lets ``key`` differ: the key itself or a group above it."""
    return any(key == a or key.startswith(f"{a}.") for a in allow)


def identity_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``key -> (checkpoint value, current value)`` for every key that differs or exists on one side
    only; an architecture key missing on one side is no difference at null on the other, nor an axis
    selector the checkpoint lacks at the axis' default (an axis added since)."""
    missing = object()
    added = {axis.key: axis.default for axis in AXES}
    diffs = {}
    for key in sorted(set(saved) | set(current)):
        old, new = saved.get(key, missing), current.get(key, missing)
        if key.split(".", 1)[0] in ARCHITECTURE_GROUPS and (
            (old is missing and (new is None or added.get(key) == new)) or (new is missing and old is None)
        ):
            continue
        if old != new:
            diffs[key] = ("<unset>" if old is missing else old, "<unset>" if new is missing else new)
    return diffs


def check_same_run(
    saved: Mapping[str, Any] | None, current: Mapping[str, Any], allow: Iterable[str], ckpt_path: str
) -> list[str]:
    """Refuse to resume ``ckpt_path`` when its identity differs from ``current`` in a key not in
    ``allow``; returns the allowed differences, or ``["?"]`` for a checkpoint without an identity."""
    if saved is None:
        return ["?"]
    allow = list(allow)
    diffs = identity_differences(saved, current)
    refused = {k: v for k, v in diffs.items() if not change_allowed(k, allow)}
    if refused:
        lines = "\n".join(f"  {k}: checkpoint {old!r}, now {new!r}" for k, (old, new) in refused.items())
        model = [k for k in refused if k.split(".", 1)[0] in MODEL_GROUPS]  # never offered: another model
        others = [k for k in refused if k not in model]
        if model:
            advice = (
                f"{', '.join(model)} define the model, which a resume cannot change: leave them off the command "
                "(a resume reads the run's own overrides), or start a new run (another directory, or no ckpt_path)."
            )
        else:
            advice = "Resume with the checkpoint's settings, or start a new run (another directory, or ckpt_path=null)."
        if others:
            advice += (
                f" If changing {', '.join(others)} is deliberate and safe (e.g. training longer), allow it "
                f"explicitly: '+resume_allow_changes=[{','.join(others)}]'"
            )
        raise ResumeMismatchError(
            f"refusing to resume {ckpt_path}: it was trained with different settings, so the result would be "
            f"neither run:\n{lines}\n{advice}"
        )
    return [f"{k}: {old!r} -> {new!r}" for k, (old, new) in diffs.items()]
