"""Build a saved W&B workspace for a sweep: loss/ppl/BLEU grouped by each ablation axis, LR and
warmup, per-layer gradient norms, residual RMS, throughput, and the summary table and figures.

    python scripts/wandb_workspace.py logs/multirun/<sweep>              # spec -> <sweep>/wandb_workspace.json
    python scripts/wandb_workspace.py --group <group> --entity ME         # from the group's W&B runs (online)
    python scripts/wandb_workspace.py --push logs/multirun/<sweep>/wandb_workspace.json   # save a spec later

With a sweep directory, ``summary.csv`` (scripts/summarize.py) and ``figures/*.png``
(scripts/plot.py), when present, are logged to a ``job_type=analysis`` run in the sweep's W&B
group and shown in the workspace. Online, the workspace is saved to W&B (``wandb-workspaces``:
pip install -c requirements/constraints.txt -e '.[wandb-views]') and its URL printed. Offline (no
credentials or no network: decided like training, ablate.tracking.wandb_mode.decide_wandb_mode, never a
prompt), the spec is written and the commands that upload the runs and save the workspace later
are printed. Sections and spec format: ``src/ablate/analysis/wandb_views.py``; README "W&B workspaces".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ablate.analysis.wandb_views import (
    SPEC_FILE,
    SweepFacts,
    facts_from_sweep_dir,
    facts_from_wandb,
    log_analysis_run,
    read_spec,
    require_workspaces,
    save_workspace,
    workspace_spec,
    write_spec,
)
from ablate.tracking.naming import axis_config_keys
from ablate.tracking.wandb_mode import decide_wandb_mode


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
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
    table, images, analysis_dir = None, [], None
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


if __name__ == "__main__":
    sys.exit(main())
