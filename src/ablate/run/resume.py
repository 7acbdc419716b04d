"""A resumed run is the run it claims to be: checks made before a checkpoint is resumed.

* :func:`run_identity` -- the settings that define a run (architecture, task, data and tokenizer,
  global batch, optimiser and schedule, seed, and the training length where the LR schedule
  depends on it), flattened to dotted keys. Every
  checkpoint carries it (:class:`ablate.callbacks.checkpointing.ResumeState`); :func:`check_same_run`
  refuses to resume under a config whose identity differs, listing the differing keys, unless
  each is named in ``resume_allow_changes`` (e.g. ``[trainer.max_steps]`` to train longer).
  Settings that do not change what is trained (where data and logs live, loader workers, the
  per-device micro-batch at the same global batch, ``model.compile``, logging, evaluation after
  training) are not part of it.
* :func:`inspect_checkpoint` -- opens a checkpoint once (memory-mapped, tensors not read) and turns
  a truncated, empty or foreign file into :class:`CheckpointError` naming the file and the intact
  checkpoint before it, when there is one.
* :func:`earlier_run_with_checkpoint` -- ``ckpt_path=last`` in a single run whose (timestamped)
  directory is new: the earlier run of the same overrides that has a checkpoint, so the user is
  told the command that resumes it instead of silently starting from scratch.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from omegaconf import DictConfig, ListConfig, OmegaConf

from ablate.callbacks.checkpointing import previous_checkpoint
from ablate.checkpoints import safe_load
from ablate.errors import UserError
from ablate.nn.axes import ARCHITECTURE_GROUPS
from ablate.optim import used_optim_config

IDENTITY_GROUPS = ("task", "model", *ARCHITECTURE_GROUPS, "data", "optim")
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


class CheckpointError(UserError, RuntimeError):
    """A checkpoint that cannot be resumed; the message names the file and what to do."""


class ResumeMismatchError(UserError, ValueError):
    """The checkpoint was trained with other settings than the current config."""


def _flatten(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, Mapping):
        out: dict[str, Any] = {}
        for key, value in node.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: list(node) if isinstance(node, (list, tuple)) else node}


def run_identity(cfg: DictConfig | Mapping[str, Any]) -> dict[str, Any]:
    """The run-defining settings of a composed config, flat (``{"optim.lr": 0.002, ...}``)."""

    def wanted(key: str) -> bool:
        return (key.split(".", 1)[0] in IDENTITY_GROUPS or key in IDENTITY_KEYS) and not key.startswith(NOT_IDENTITY)

    if isinstance(cfg, DictConfig):
        # resolve key by key: the keys left out (data.data_dir -> ${paths...} -> ${hydra:...})
        # need not resolve, e.g. outside a Hydra job
        raw = _flatten(OmegaConf.to_container(cfg, resolve=False))
        flat = {k: _plain(OmegaConf.select(cfg, k)) for k in raw if wanted(k)}
    else:
        flat = {k: v for k, v in _flatten(cfg).items() if wanted(k)}
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
    """``key -> (checkpoint value, current value)`` for every key that differs or exists on one side only."""
    missing = object()
    diffs = {}
    for key in sorted(set(saved) | set(current)):
        old, new = saved.get(key, missing), current.get(key, missing)
        if old != new:
            diffs[key] = ("<unset>" if old is missing else old, "<unset>" if new is missing else new)
    return diffs


def check_same_run(
    saved: Mapping[str, Any] | None, current: Mapping[str, Any], allow: Iterable[str], ckpt_path: str
) -> list[str]:
    """Refuse to resume ``ckpt_path`` when its identity differs from ``current`` in a key not in
    ``allow``; returns the allowed differences (to be reported). A checkpoint without an identity
    (written before this check existed) is accepted with a warning by the caller (returns ``["?"]``)."""
    if saved is None:
        return ["?"]
    allow = list(allow)
    diffs = identity_differences(saved, current)
    refused = {k: v for k, v in diffs.items() if not change_allowed(k, allow)}
    if refused:
        lines = "\n".join(f"  {k}: checkpoint {old!r}, now {new!r}" for k, (old, new) in refused.items())
        keys = ",".join(refused)
        raise ResumeMismatchError(
            f"refusing to resume {ckpt_path}: it was trained with different settings, so the result would be "
            f"neither run:\n{lines}\nResume with the checkpoint's settings, start a new run (another directory, or "
            f"ckpt_path=null), or, if the change is deliberate and safe (e.g. training longer), allow it "
            f"explicitly: '+resume_allow_changes=[{keys}]'"
        )
    return [f"{k}: {old!r} -> {new!r}" for k, (old, new) in diffs.items()]


def inspect_checkpoint(path: str | os.PathLike[str], content: bool = False) -> dict[str, Any]:
    """The checkpoint's contents, memory-mapped (tensors are not read); :class:`CheckpointError`
    when the file is empty, truncated or not a checkpoint, or its stored configuration names
    something to import or call (:func:`ablate.tasks.checkpoints.check_stored_config`). With
    ``content``, also when its weights are not those of the model its configuration builds, or not
    finite (:func:`ablate.tasks.checkpoints.check_checkpoint_content`: reads every tensor once)."""
    from ablate.tasks.checkpoints import check_checkpoint_content, check_stored_config

    path = Path(path)
    try:
        checkpoint = safe_load.load(path)  # never runs code from the file (ablate.checkpoints.safe_load)
    except safe_load.UnsafeCheckpointError:
        raise
    except Exception as err:
        size = path.stat().st_size if path.exists() else 0
        previous = previous_checkpoint(path)
        offer = (
            f" The checkpoint before it is intact: resume with ckpt_path={previous}"
            if previous.is_file() and _readable(previous)
            else " No earlier checkpoint of this run is kept."
        )
        raise CheckpointError(
            f"{path} is corrupt or truncated ({size:,} bytes; {type(err).__name__}: {str(err)[:200]}).{offer}"
        ) from None
    if not isinstance(checkpoint, dict):
        raise CheckpointError(f"{path} is not a checkpoint: it holds a {type(checkpoint).__name__}, not a dict")
    try:
        (check_checkpoint_content if content else check_stored_config)(checkpoint, path)
    except UserError as err:
        raise CheckpointError(str(err)) from None
    return checkpoint


def require_resumable(checkpoint: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """A checkpoint with the weights only (``best.ckpt``: ``callbacks.checkpoint.save_weights_only``)
    cannot continue training: refused before any data is read, pointing at ``last.ckpt``."""
    if "optimizer_states" not in checkpoint:
        raise CheckpointError(
            f"{path} holds the weights only (no optimiser state: best.ckpt is saved that way, "
            "callbacks.checkpoint.save_weights_only=true), so training cannot continue from it: resume from the "
            "run's last.ckpt (ckpt_path=last with hydra.run.dir=<its run dir>). eval.py, generate.py, translate.py "
            "and the exports take it as it is"
        )


def _readable(path: Path) -> bool:
    try:
        safe_load.load(path)
        return True
    except Exception:
        return False


def earlier_run_with_checkpoint(runs_dir: Path, overrides: list[str], this_run: Path) -> Path | None:
    """The newest run directory under ``runs_dir`` (other than ``this_run``) made by the same
    overrides (its ``.hydra/overrides.yaml``, ``ckpt_path`` aside) that holds a checkpoint."""

    def key(items: Iterable[str]) -> list[str]:
        return sorted(
            o for o in items if not o.lstrip("+~").startswith(("ckpt_path=", "hydra.", "resume_allow_changes"))
        )

    wanted = key(overrides)
    candidates = []
    for run in runs_dir.glob("*/"):
        if run.resolve() == this_run.resolve():
            continue
        saved = run / ".hydra" / "overrides.yaml"
        try:
            same = key(yaml.safe_load(saved.read_text()) or []) == wanted
        except (OSError, yaml.YAMLError):
            continue
        if same and any((run / "checkpoints").glob("last*.ckpt")):
            candidates.append(run)
    return max(candidates, key=lambda p: p.stat().st_mtime_ns) if candidates else None
