"""New labels for a finished run: a re-run of a sweep (or of a finished single run) with other
``tags`` relabels its W&B run instead of training it again.

``tags`` are labels, not part of what a run is (``ablate.config.resolvers.RUN_CONTROL_KEYS``: the
sweep directory and the resume identity leave them out), so ``python train.py -m norm=pre,post
seed=1,2 tags=[baseline]`` after the same sweep without tags finds the finished jobs and skips
them. Their W&B runs then get the new tags (the run reopened by its id, ``resume="allow"``, as a
resume does; offline, one more ``offline-run-*-<id>`` folder that ``wandb sync`` merges into the run)
and ``status.json`` records them, so the next re-run with the same tags does nothing. CSV has no
tags; TensorBoard and MLflow runs keep the tags they were started with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ablate.tracking.naming import RunLabels, flat_axes, run_tags
from ablate.tracking.options import WandbOptions, user_tags

_RUN_FOLDER = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-(?P<id>[a-z0-9]+)$")


def wandb_run_id(output_dir: Path) -> str | None:
    """The id of the W&B run a job directory holds (its newest ``wandb/[offline-]run-<time>-<id>``)."""
    folders = sorted(p.name for p in (output_dir / "wandb").glob("*run-*") if _RUN_FOLDER.match(p.name))
    found = [_RUN_FOLDER.match(name) for name in folders]
    return found[-1].group("id") if found and found[-1] else None


def new_tags(cfg: Any, recorded: list[str] | None) -> list[str] | None:
    """The user's tags when they differ from those the run recorded (None: nothing to relabel)."""
    tags = user_tags(cfg)
    return tags if sorted(set(tags)) != sorted(set(recorded or [])) else None


def relabel_wandb_run(
    cfg: Any, output_dir: Path, tags: list[str], axes: Mapping[str, Any] | None, labels: RunLabels
) -> str | None:
    """Give the job's W&B run the user's ``tags`` (plus the automatic experiment and axis tags it was
    started with); returns where it was relabelled, or None without a W&B run to relabel."""
    from ablate.tracking.wandb_mode import decide_wandb_mode
    from ablate.tracking.wandb_run import finish_stale_run, init_run

    options = WandbOptions.from_cfg(cfg)
    run_id = wandb_run_id(output_dir)
    if not options.enabled or run_id is None:
        return None
    mode, reason = decide_wandb_mode(options.mode)
    if mode == "disabled":
        return None
    run_config = {**(OmegaConf.to_container(cfg, resolve=True) if OmegaConf.is_config(cfg) else dict(cfg))}
    run_config["axes"] = dict(axes or {})
    auto = run_tags(tags, labels.experiment, flat_axes(run_config, labels.swept))
    finish_stale_run()
    run, mode, _ = init_run(
        mode,
        reason,
        {
            "dir": str(output_dir),
            "project": options.project,
            "entity": options.entity,
            "id": run_id,
            "resume": "allow",
            "tags": list(dict.fromkeys([*options.tags, *auto])),
        },
    )
    run.finish()
    return f"W&B run {run_id} ({mode})"
