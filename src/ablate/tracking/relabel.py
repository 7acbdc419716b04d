"""New labels for a finished run: a re-run of a sweep (or of a finished single run) with other
``tags`` relabels its W&B run instead of training it again.

``tags`` are labels, not part of what a run is (``ablate.config.resolvers.RUN_CONTROL_KEYS``), so a
sweep re-run with other tags skips its finished jobs; their W&B runs get the new tags (reopened by
id, ``resume="allow"``; offline, one more ``offline-run-*-<id>`` folder) and ``status.json`` records
them. TensorBoard and MLflow runs keep the tags they were started with.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ablate.tracking.naming import RunLabels, flat_axes, run_tags
from ablate.tracking.options import WandbOptions

_RUN_FOLDER = re.compile(r"^(?:offline-)?run-\d{8}_\d{6}-(?P<id>[a-z0-9]+)$")


def wandb_run_id(output_dir: Path) -> str | None:
    """The id of the W&B run a job directory holds (its newest ``wandb/[offline-]run-<time>-<id>``)."""
    folders = sorted(p.name for p in (output_dir / "wandb").glob("*run-*") if _RUN_FOLDER.match(p.name))
    found = [_RUN_FOLDER.match(name) for name in folders]
    return found[-1].group("id") if found and found[-1] else None


def new_tags(tags: list[str], recorded: list[str] | None) -> list[str] | None:
    """The user's ``tags`` when they differ from those the run recorded (None: nothing to relabel)."""
    return tags if sorted(set(tags)) != sorted(set(recorded or [])) else None


def relabel(
    tags: list[str],
    options: WandbOptions,
    output_dir: Path,
    recorded: list[str] | None,
    axes: Mapping[str, Any] | None,
    labels: RunLabels,
) -> tuple[list[str], str | None] | None:
    """None when the ``recorded`` tags are ``tags``, else ``(new tags, where set)`` (:func:`relabel_wandb_run`)."""
    changed = new_tags(tags, recorded)
    if changed is None:
        return None
    return changed, relabel_wandb_run(changed, options, output_dir, axes, labels)


def relabel_wandb_run(
    tags: list[str], options: WandbOptions, output_dir: Path, axes: Mapping[str, Any] | None, labels: RunLabels
) -> str | None:
    """Give the job's W&B run the user's ``tags`` (plus its automatic experiment and axis tags); where
    it was relabelled, or None without a W&B run."""
    from ablate.tracking.wandb_mode import decide_wandb_mode
    from ablate.tracking.wandb_run import finish_stale_run, init_run

    run_id = wandb_run_id(output_dir)
    if not options.enabled or run_id is None:
        return None
    mode, reason = decide_wandb_mode(options.mode)
    if mode == "disabled":
        return None
    auto = run_tags(tags, labels.experiment, flat_axes({"axes": dict(axes or {})}, labels.swept))
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
