"""Read a sweep back from W&B: every run of a group becomes a :class:`~ablate.analysis.job.Job`
(overrides from the run name, the resolved config, the outcome from the run summary, the metric
history). The mode is decided first as training decides it, so an offline machine gets an error
within seconds instead of a hang.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pandas as pd

from ablate.analysis.job import Job, parse_overrides
from ablate.analysis.runs import Sweep

API_TIMEOUT_S = 30
_STATE_TO_STATUS = {"finished": "completed", "crashed": "crashed", "failed": "crashed", "killed": "crashed"}
_SPLIT = re.compile(r",(?=[+~\w.\-/]+=)")  # a comma that starts the next key=value


class WandbUnavailable(ConnectionError):
    """W&B cannot be reached from here (offline, no credentials, or no network)."""


def require_online() -> None:
    """Raise :class:`WandbUnavailable` at once unless W&B can be reached."""
    env_mode = os.environ.get("WANDB_MODE", "").strip().lower()
    if env_mode in ("offline", "dryrun", "disabled"):  # decided without importing wandb or Lightning
        mode, reason = env_mode, f"WANDB_MODE={env_mode}"
    else:
        from ablate.tracking.wandb_mode import decide_wandb_mode  # credentials, then a 3 s TCP probe

        mode, reason = decide_wandb_mode()
    if mode != "online":
        raise WandbUnavailable(
            f"cannot read from W&B: it is {mode} here ({reason}). Summarise the local sweep directory instead "
            "(python scripts/summarize.py logs/multirun/<sweep>), or sync the offline runs with `wandb sync` from a "
            "machine with network and credentials (wandb login), then retry there."
        )


def overrides_from_name(name: str) -> dict[str, str]:
    """``"norm=pre,optim.lr=0.001,seed=1"`` -> ``{"norm": "pre", "optim.lr": "0.001", "seed": "1"}``."""
    return parse_overrides(_SPLIT.split(name or ""))


def history_frame(run: Any) -> pd.DataFrame:
    """A run's logged rows as one row per training step (like ``metrics.csv``)."""
    from ablate.tracking.wandb_run import STEP_METRIC  # Lightning's x-axis key in every W&B row

    history = run.history(samples=1_000_000, pandas=True)
    if history is None or len(history) == 0:
        return pd.DataFrame(index=pd.Index([], name="step", dtype=int))
    step = STEP_METRIC if STEP_METRIC in history else "_step"
    history = history.drop(columns=[c for c in history.columns if c.startswith("_") and c != step])
    return history.rename(columns={step: "step"}).groupby("step").last().sort_index()


def job_from_run(run: Any) -> Job:
    summary = dict(run.summary._json_dict) if hasattr(run.summary, "_json_dict") else dict(run.summary)
    config = dict(run.config)
    status = summary.get("status") or _STATE_TO_STATUS.get(run.state, "incomplete")
    record = {
        "status": status,
        "steps": summary.get("steps"),
        "wall_time_s": summary.get("wall_time_s"),
        "axes": config.get("axes"),
        "error": f"W&B run state: {run.state}",
        "metrics": {k: v for k, v in summary.items() if isinstance(v, (int, float)) and "/" in k},
    }
    started = pd.Timestamp(run.created_at).timestamp() if getattr(run, "created_at", None) else 0.0
    source, overrides = "/".join(run.path), overrides_from_name(run.name)
    return Job(run.name, source, overrides, status, record, config, metrics=history_frame(run), started=started)


def load_wandb_group(project_path: str, group: str) -> Sweep:
    """All runs of W&B group ``group`` in ``ENTITY/PROJECT``, as a :class:`Sweep`."""
    if project_path.count("/") != 1:
        raise ValueError(f"--wandb {project_path!r}: expected ENTITY/PROJECT, e.g. my-team/ablate")
    require_online()
    import wandb

    runs = list(wandb.Api(timeout=API_TIMEOUT_S).runs(project_path, filters={"group": group}))
    if not runs:
        raise ValueError(
            f"no runs in W&B group {group!r} of {project_path}: check the group name (the run page's "
            "'Group' field; train.py -m names it after the sweep directory)"
        )
    return Sweep.from_jobs(f"wandb:{project_path}/{group}", [job_from_run(r) for r in runs])
