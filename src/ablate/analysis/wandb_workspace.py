"""``scripts/wandb_workspace.py``: log a sweep's summary and figures to a ``job_type=analysis`` run,
write the workspace spec (:mod:`ablate.analysis.wandb_views`) and save it when W&B is reachable;
offline, print the commands that do it later."""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ablate.analysis.wandb_views import (
    ANALYSIS_JOB_TYPE,
    FIGURE_PREFIX,
    SPEC_FILE,
    SUMMARY_TABLE,
    SweepFacts,
    facts_from_sweep_dir,
    facts_from_wandb,
    read_spec,
    workspace_spec,
    write_spec,
)
from ablate.tracking.naming import axis_config_keys
from ablate.tracking.wandb_mode import decide_wandb_mode
from ablate.tracking.wandb_run import STEP_METRIC


def require_workspaces() -> None:
    """Fail with the install command when the optional ``wandb-workspaces`` package is missing."""
    import importlib.util

    if importlib.util.find_spec("wandb_workspaces") is None:
        raise ModuleNotFoundError(
            "saving a W&B workspace needs the wandb-workspaces package: "
            "pip install -c requirements/constraints.txt -e '.[wandb-views]'"
        )


def to_workspace(spec: Mapping[str, Any], entity: str | None = None) -> Any:
    """The spec as a ``wandb_workspaces.workspaces.Workspace`` (not saved)."""
    require_workspaces()
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    def panel(p: Mapping[str, Any]) -> Any:
        if p["type"] == "table":
            return wr.WeavePanelSummaryTable(table_name=p["table"])
        if p["type"] == "media":
            return wr.MediaBrowser(media_keys=list(p["keys"]))
        kwargs: dict[str, Any] = {"title": p["title"], "x": p.get("x", STEP_METRIC)}
        if p.get("metric_regex"):
            kwargs["metric_regex"] = p["metric_regex"]
        else:
            kwargs["y"] = list(p["y"])
        if p.get("groupby"):
            kwargs.update(
                groupby=wr.Config(p["groupby"]),
                groupby_aggfunc=p.get("group_agg", "mean"),
                groupby_rangefunc=p.get("group_range", "minmax"),
            )
        if p.get("range_x"):
            kwargs["range_x"] = tuple(p["range_x"])
        return wr.LinePlot(**kwargs)

    group = str(spec["group"]).replace("'", "\\'")
    return ws.Workspace(
        entity=entity or spec.get("entity") or "",
        project=spec["project"],
        name=spec["name"],
        sections=[
            ws.Section(name=s["name"], is_open=bool(s.get("is_open")), panels=[panel(p) for p in s["panels"]])
            for s in spec["sections"]
        ],
        settings=ws.WorkspaceSettings(x_axis=spec.get("x_axis", STEP_METRIC), max_runs=int(spec.get("max_runs", 10))),
        runset_settings=ws.RunsetSettings(
            filters=f"Metric('Group') = '{group}'", pinned_columns=list(spec.get("pinned_columns") or [])
        ),
    )


def save_workspace(spec: Mapping[str, Any]) -> str:
    """Save the spec to W&B (online) as a new saved view; returns its URL."""
    import wandb

    entity = spec.get("entity") or wandb.Api().default_entity
    workspace = to_workspace(spec, entity).save()
    return workspace.url


def analysis_run_id(project: str, group: str) -> str:
    """The same run id every time for a sweep: a re-run updates its one analysis run."""
    return "analysis-" + hashlib.sha1(f"{project}/{group}".encode()).hexdigest()[:12]


def log_analysis_run(facts: SweepFacts, mode: str, reason: str) -> tuple[Any, str, str, str | None, list[str]]:
    """Log ``summary.csv`` and the figures to the sweep's analysis run; returns what was logged."""
    import pandas as pd
    import wandb

    from ablate.tracking.wandb_run import finish_stale_run, init_run

    assert facts.sweep_dir is not None
    out = facts.sweep_dir / "analysis"
    out.mkdir(parents=True, exist_ok=True)
    finish_stale_run()
    init_kwargs = {
        "dir": str(out),
        "project": facts.project,
        "entity": facts.entity,
        "group": facts.group,
        "job_type": ANALYSIS_JOB_TYPE,
        "name": f"analysis {facts.group}"[:128],
        "id": analysis_run_id(facts.project, facts.group),
        "resume": "allow",
        "config": {"sweep_dir": str(facts.sweep_dir), "axes": list(facts.axes)},
    }
    run, mode, reason = init_run(mode, reason, init_kwargs)
    row: dict[str, Any]  # a table and images
    table, images, row = None, [], {}
    try:
        if facts.summary_csv is not None:
            table = SUMMARY_TABLE
            row[table] = wandb.Table(dataframe=pd.read_csv(facts.summary_csv))
        for png in facts.figures:
            key = FIGURE_PREFIX + png.stem
            row[key] = wandb.Image(str(png), caption=png.name)
            images.append(key)
        if row:
            run.log(row)
        run_dir = Path(run.dir).parent
    finally:
        run.finish()
    return run_dir, mode, reason, table, images


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Build a saved W&B workspace for a sweep (docs/analysis.md: W&B workspaces)."
    )
    parser.add_argument("sweep_dir", nargs="?", help="a multirun directory (logs/multirun/<sweep>)")
    parser.add_argument("--group", help="the sweep's W&B group (default with a sweep directory: its runs' group)")
    parser.add_argument("--project", help="W&B project (default: the sweep's logger.wandb.project, else ablate)")
    parser.add_argument("--entity", help="W&B entity (default: the sweep's logger.wandb.entity, else your default)")
    parser.add_argument("--axes", help="with --group offline: the swept keys, comma-separated (e.g. act,optim.lr)")
    parser.add_argument("--name", help="the workspace's name (default: 'sweep <group>')")
    parser.add_argument(
        "--out",
        metavar="FILE",
        help=f"where the spec goes (default: <sweep_dir>/{SPEC_FILE}, "
        f"with --group only: logs/workspaces/<group>/{SPEC_FILE})",
    )
    parser.add_argument("--no-analysis-run", action="store_true", help="do not log summary.csv and the figures")
    parser.add_argument("--push", metavar="SPEC", help="save a spec written earlier (offline) to W&B")
    args = parser.parse_args(argv)
    if sum(map(bool, (args.sweep_dir, args.push, args.group and not args.sweep_dir))) != 1:
        parser.error("give a sweep directory, --group NAME or --push SPEC")
    return args


def push(spec_path: Path) -> int:
    mode, reason = decide_wandb_mode()
    if mode != "online":
        print(
            f"error: W&B is {mode} here ({reason}); run this where W&B is reachable (wandb login):\n"
            f"  python scripts/wandb_workspace.py --push {spec_path}",
            file=sys.stderr,
        )
        return 1
    require_workspaces()
    print(f"W&B workspace saved: {save_workspace(read_spec(spec_path))}")
    return 0


def gather(args: argparse.Namespace, mode: str) -> SweepFacts:
    if args.sweep_dir:
        return facts_from_sweep_dir(Path(args.sweep_dir), args.group, args.project, args.entity)
    project = args.project or "ablate"
    if mode == "online" and not args.axes:
        import wandb

        entity = args.entity or wandb.Api().default_entity
        return facts_from_wandb(f"{entity}/{project}", args.group)
    axes = [a.strip() for a in (args.axes or "").split(",") if a.strip()]
    return SweepFacts(group=args.group, project=project, entity=args.entity, axes=axis_config_keys(axes))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.push:
        return push(Path(args.push))
    mode, reason = decide_wandb_mode()
    try:
        facts = gather(args, mode)
    except (FileNotFoundError, ConnectionError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    table, analysis_dir = None, None
    images: list[str] = []
    if (
        facts.sweep_dir is not None
        and (facts.summary_csv or facts.figures)
        and not args.no_analysis_run
        and mode != "disabled"
    ):
        analysis_dir, mode, reason, table, images = log_analysis_run(facts, mode, reason)
    spec = workspace_spec(facts, args.name, table, images)
    default_out = (facts.sweep_dir or Path("logs") / "workspaces" / facts.group) / SPEC_FILE
    spec_path = write_spec(spec, Path(args.out) if args.out else default_out)
    sections = ", ".join(s["name"] for s in spec["sections"])
    print(f"workspace spec for W&B group {facts.group!r} ({facts.n_runs} runs): {spec_path}\n  sections: {sections}")
    if analysis_dir is not None:
        print(f"analysis run ({'summary table' if table else 'no summary.csv'}, {len(images)} figures): {analysis_dir}")
    if mode == "online":
        require_workspaces()
        print(f"W&B workspace saved: {save_workspace(spec)}")
        return 0
    print(f"W&B is {mode} ({reason}): nothing was uploaded. Later, where W&B is reachable (wandb login):")
    if facts.sweep_dir is not None:
        print(f"  wandb sync {facts.sweep_dir}/*/wandb/offline-run-*")
    if analysis_dir is not None:
        print(f"  wandb sync {analysis_dir}")
    print(f"  python scripts/wandb_workspace.py --push {spec_path}")
    return 0
