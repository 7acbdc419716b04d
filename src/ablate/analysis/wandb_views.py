"""A saved W&B workspace for a sweep as a plain JSON *spec* (:func:`workspace_spec`): a ``Compare by
<axis>`` section per axis (runs grouped by ``axis_<name>``, seeds averaged), warmup, gradient norms,
residual RMS, throughput, and the analysis run's table and figures. Saving it:
:mod:`ablate.analysis.wandb_workspace`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ablate.tasks import TASKS, task_of_metrics
from ablate.tracking.naming import axis_config_keys
from ablate.tracking.wandb_run import STEP_METRIC, TIME_METRIC, TOKENS_METRIC

SPEC_FILE = "wandb_workspace.json"
SPEC_VERSION = 1
ANALYSIS_JOB_TYPE = "analysis"
SUMMARY_TABLE = "summary"  # the key of the summary wandb.Table in the analysis run
FIGURE_PREFIX = "figures/"  # figures/<png stem>: the keys of the figures in the analysis run
MAX_RUNS_SHOWN = 100

_GRAD_LAYER = re.compile(r"^grad_norm/((?:enc_|dec_)?)layer_\d+/(\w+)$")
_RESID_LAYER = re.compile(r"^resid_rms/((?:enc_|dec_)?)layer_\d+$")
_PART_ORDER = (
    "attn_norm",
    "attn",
    "attn_post_norm",
    "cross_attn_norm",
    "cross_attn",
    "cross_attn_post_norm",
    "ffn_norm",
    "ffn",
    "ffn_post_norm",
)


@dataclass
class SweepFacts:
    """What the spec needs to know about a sweep (from its directory or its W&B runs)."""

    group: str
    project: str = "ablate"
    entity: str | None = None
    axes: dict[str, str] = field(default_factory=dict)  # axis (override key) -> flat config key
    task: str = "lm"
    warmup_steps: int | None = None
    metrics: set[str] = field(default_factory=set)  # metric names logged (empty: unknown)
    n_runs: int = 0
    sweep_dir: Path | None = None
    summary_csv: Path | None = None
    figures: list[Path] = field(default_factory=list)


def facts_from_sweep_dir(
    sweep_dir: Path, group: str | None = None, project: str | None = None, entity: str | None = None
) -> SweepFacts:
    """A multirun directory's facts: axes, task, warmup, metrics, W&B group, the analysis outputs."""
    from ablate.analysis.runs import load_sweep

    sweep_dir = Path(sweep_dir)
    sweep = load_sweep(sweep_dir)
    metrics: set[str] = set()
    for job in sweep.jobs:
        metrics.update(str(c) for c in job.metrics.columns)
    first = sweep.jobs[0] if sweep.jobs else None
    wandb_cfg = ((first.config.get("logger") or {}).get("wandb") or {}) if first else {}
    logged = _logged_run(sweep_dir)
    warmup = ((first.config.get("optim") or {}).get("warmup_steps")) if first else None
    figures_dir = sweep_dir / "figures"
    return SweepFacts(
        group=group or wandb_cfg.get("group") or logged.get("group") or _group_from_path(sweep_dir),
        project=project or logged.get("project") or wandb_cfg.get("project") or "ablate",
        entity=entity or wandb_cfg.get("entity"),
        axes=axis_config_keys(sweep.axes),
        task=sweep.task,
        warmup_steps=int(warmup) if isinstance(warmup, (int, float)) and not isinstance(warmup, bool) else None,
        metrics=metrics,
        n_runs=len(sweep.jobs),
        sweep_dir=sweep_dir,
        summary_csv=sweep_dir / "summary.csv" if (sweep_dir / "summary.csv").is_file() else None,
        figures=sorted(figures_dir.glob("*.png")) if figures_dir.is_dir() else [],
    )


def _logged_run(sweep_dir: Path) -> dict[str, Any]:
    """Name, group and project of the first W&B run found in a job of the sweep ({} if none)."""
    from ablate.tracking.wandb_reader import find_run_dirs, read_offline_run

    job_dirs = (p for p in sweep_dir.iterdir() if p.is_dir() and p.name != "analysis" and (p / "wandb").is_dir())
    for job_dir in sorted(job_dirs):
        runs = find_run_dirs(job_dir / "wandb")
        if runs:
            try:
                return read_offline_run(runs[0])
            except (OSError, RuntimeError, ValueError):
                continue
    return {}


def _group_from_path(sweep_dir: Path) -> str:
    """The group train.py gives a sweep (:func:`ablate.tracking.naming.sweep_group`)."""
    from ablate.tracking.naming import sweep_group

    return sweep_group(sweep_dir.resolve())


def facts_from_wandb(project_path: str, group: str) -> SweepFacts:
    """The same facts from the W&B runs of ``group`` (online)."""
    from ablate.analysis.wandb_group import API_TIMEOUT_S, require_online

    require_online()
    import wandb

    entity, _, project = project_path.partition("/")
    runs = [
        r
        for r in wandb.Api(timeout=API_TIMEOUT_S).runs(project_path, filters={"group": group})
        if r.job_type != ANALYSIS_JOB_TYPE
    ]
    return facts_from_runs(group, project, entity, [(dict(r.config), set(r.summary.keys())) for r in runs])


def facts_from_runs(
    group: str, project: str, entity: str | None, runs: list[tuple[dict[str, Any], set[str]]]
) -> SweepFacts:
    """Facts from ``(config, metric names)`` of a group's runs: the axes are the ``axis_*`` keys that vary."""
    values: dict[str, set[str]] = {}
    metrics: set[str] = set()
    for config, names in runs:
        metrics |= names
        for key, value in config.items():
            if key.startswith("axis_"):
                values.setdefault(key, set()).add(json.dumps(value, sort_keys=True, default=str))
    axes = {key.removeprefix("axis_"): key for key, seen in sorted(values.items()) if len(seen) > 1}
    warmups = [((c.get("optim") or {}).get("warmup_steps")) for c, _ in runs]
    warmup = next((w for w in warmups if isinstance(w, int)), None)
    return SweepFacts(group, project, entity or None, axes, task_of_metrics(metrics), warmup, metrics, len(runs))


def line(
    title: str,
    y: list[str] | None = None,
    *,
    regex: str | None = None,
    x: str = STEP_METRIC,
    groupby: str | None = None,
    range_x: tuple[float | None, float | None] | None = None,
) -> dict[str, Any]:
    """One line-plot panel of the spec: named metrics ``y`` or every metric matching ``regex``."""
    panel: dict[str, Any] = {"type": "line", "title": title, "x": x}
    if regex is not None:
        panel["metric_regex"] = regex
    else:
        panel["y"] = list(y or [])
    if groupby:
        panel.update(groupby=groupby, group_agg="mean", group_range="minmax")
    if range_x is not None:
        panel["range_x"] = list(range_x)
    return panel


def workspace_spec(
    facts: SweepFacts, name: str | None = None, table: str | None = None, images: Iterable[str] = ()
) -> dict[str, Any]:
    """The workspace as JSON-able data; ``table``/``images``: the analysis run's keys."""
    val_metrics = list(TASKS[facts.task].panel_metrics if facts.task in TASKS else TASKS["lm"].panel_metrics)
    sections = _comparison_sections(facts, val_metrics)
    warmup_range = (0, 3 * facts.warmup_steps) if facts.warmup_steps else None
    lr_panels = [
        line("train/lr", ["train/lr"]),
        line("train/loss during warmup", ["train/loss"], range_x=warmup_range),
        line("grad_norm/total during warmup", ["grad_norm/total"], range_x=warmup_range),
    ]
    sections.append(_section("LR and warmup", lr_panels, is_open=True))
    sections.append(_section("Gradient norms per layer", _grad_norm_panels(facts)))
    sections.append(_section("Residual stream RMS", _resid_panels(facts.metrics)))
    throughput = [
        line("train/tokens_per_sec", ["train/tokens_per_sec"]),
        line("train/mfu", ["train/mfu"]),
        line(TOKENS_METRIC, [TOKENS_METRIC]),
        line(TIME_METRIC, [TIME_METRIC]),
        line("val/loss vs training time", ["val/loss"], x=TIME_METRIC),
    ]
    sections.append(_section("Throughput", throughput))
    images = list(images)
    if table or images:
        panels: list[dict[str, Any]] = [{"type": "table", "title": "summary.csv", "table": table}] if table else []
        panels += [{"type": "media", "title": "figures", "keys": images}] if images else []
        sections.append(_section("Analysis", panels, is_open=True))
    pinned = [f"config:{key}" for key in facts.axes.values()] + [f"summary:{m}" for m in val_metrics]
    return {
        "version": SPEC_VERSION,
        "name": name or f"sweep {facts.group}"[:120],
        "entity": facts.entity,
        "project": facts.project,
        "group": facts.group,
        "axes": dict(facts.axes),
        "x_axis": STEP_METRIC,
        "max_runs": min(max(10, facts.n_runs), MAX_RUNS_SHOWN),
        "pinned_columns": pinned,
        "sections": sections,
    }


def _section(name: str, panels: list[dict[str, Any]], is_open: bool = False) -> dict[str, Any]:
    """One section of the workspace: its name, whether it starts open, its panels."""
    return {"name": name, "is_open": is_open, "panels": panels}


def _comparison_sections(facts: SweepFacts, val_metrics: list[str]) -> list[dict[str, Any]]:
    """One open section per swept axis (or one for all runs), its runs grouped by that axis."""
    sections = []
    for axis, key in facts.axes.items() if facts.axes else [(None, None)]:
        suffix = f" by {axis}" if axis else ""
        panels = [line(f"{m}{suffix}", [m], groupby=key) for m in val_metrics]
        panels += [
            line(f"train/loss{suffix}", ["train/loss"], groupby=key),
            line(f"val/loss vs tokens{suffix}", ["val/loss"], x=TOKENS_METRIC, groupby=key),
        ]
        sections.append(_section(f"Compare by {axis}" if axis else "Compare runs", panels, is_open=True))
    return sections


def _grad_norm_panels(facts: SweepFacts) -> list[dict[str, Any]]:
    """The total gradient norm, the embeddings' and head's, and one panel per layer part logged."""
    panels = [
        line("grad_norm/total", ["grad_norm/total"]),
        line(
            "grad_norm of embeddings, head, final norm", regex=r"^grad_norm/((enc_|dec_)?(embed|pos|final_norm)|head)$"
        ),
    ]
    return panels + [
        line(f"grad_norm/{stack}layer_*/{part}", regex=rf"^grad_norm/{stack}layer_\d+/{part}$")
        for stack, part in layer_parts(facts.metrics, facts.task)
    ]


def _resid_panels(metrics: Iterable[str]) -> list[dict[str, Any]]:
    """The residual stream's RMS at every layer, and per stack (encoder, decoder) when there are several."""
    stacks = sorted({m.group(1) for m in map(_RESID_LAYER.match, metrics) if m and m.group(1)})
    resid = [line("resid_rms (every layer)", regex=r"^resid_rms/.*$")]
    return resid + [line(f"resid_rms/{stack}layer_*", regex=rf"^resid_rms/{stack}layer_\d+$") for stack in stacks]


def layer_parts(metrics: Iterable[str], task: str = "lm") -> list[tuple[str, str]]:
    """``(stack, part)`` of the per-layer gradient norms logged, in block order (default: the task's)."""
    found = {(m.group(1), m.group(2)) for m in map(_GRAD_LAYER.match, metrics) if m}
    if not found:
        return list((TASKS.get(task) or TASKS["lm"]).grad_norm_parts)
    rank = {part: i for i, part in enumerate(_PART_ORDER)}
    return sorted(found, key=lambda sp: (sp[0] != "" and sp[0] != "enc_", sp[0], rank.get(sp[1], len(rank)), sp[1]))


def write_spec(spec: dict[str, Any], path: Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    return path


def read_spec(path: Path) -> dict[str, Any]:
    spec = json.loads(Path(path).read_text(encoding="utf-8"))
    if spec.get("version") != SPEC_VERSION:
        raise ValueError(f"{path}: workspace spec version {spec.get('version')!r}, expected {SPEC_VERSION}")
    return spec
