"""``scripts/declare.py``: declare a sweep's analysis plan before its verdict runs start.

    python scripts/declare.py logs/multirun/depth --metric test/bpb --baseline norm=pre --margin 0.03 \\
        --margin-basis "2% in per-character perplexity, our smallest effect of interest, set before any run" \\
        --seeds 11,12,13 --layout blocks
    python train.py -m ... seed=11,12,13 data.splits=blocks hydra.sweep.dir=logs/multirun/depth   # then run it
    python scripts/summarize.py logs/multirun/depth --plan                      # the declared analysis

Appends the plan to the ledger beside the sweep folder (``<logs>/analysis_ledger.jsonl``,
:mod:`ablate.analysis.plan`: time and content hashed together, each entry chained to the one
before) and writes a copy to ``<sweep dir>/analysis_plan.json``; a different plan for the same
folder is refused.
"""

from __future__ import annotations

import argparse
import sys

from ablate.analysis.budget import BASES, DEFAULT_BASIS
from ablate.analysis.plan import Plan, PlanError, declare


def _ints(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give integers separated by commas, e.g. 11,12,13") from None


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of ``scripts/declare.py``, checked (exit 2 on a plan that cannot be declared)."""
    parser = argparse.ArgumentParser(prog="declare.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep_dir", help="the sweep directory the runs will write (hydra.sweep.dir)")
    parser.add_argument("--metric", action="append", required=True, help="a verdict metric, e.g. test/bpb (repeat)")
    parser.add_argument("--baseline", metavar="AXIS=VALUE,...", help="the row the others are compared with")
    parser.add_argument(
        "--interaction",
        action="append",
        metavar="AXIS=LEVEL,LEVEL",
        help="give it twice: declare the 2x2 interaction contrast of summarize.py --interaction instead of a baseline",
    )
    parser.add_argument("--margin", type=float, metavar="DELTA", help="the equivalence margin δ, in the metric's units")
    parser.add_argument(
        "--margin-basis", default="", help="why δ is that number, and whether it was set before the data"
    )
    parser.add_argument("--where", action="append", default=[], metavar="AXIS=VALUE", help="a declared slice (repeat)")
    parser.add_argument(
        "--variant", action="append", default=[], help="a compared row, e.g. 'norm=post' (repeat; default: all)"
    )
    parser.add_argument(
        "--equivalence",
        action="append",
        default=[],
        metavar="AXIS=VALUE",
        help="with --margin: the rows asked the equivalence question (repeat; default: every row)",
    )
    parser.add_argument("--basis", choices=BASES, default=DEFAULT_BASIS)
    parser.add_argument(
        "--seeds", type=_ints, default=(), help="the verdict seeds, e.g. 11,12,13: checked against the jobs"
    )
    parser.add_argument(
        "--layout",
        metavar="SPLITS",
        help="the data split scheme the jobs must use (data.splits, e.g. blocks); checked against the jobs",
    )
    parser.add_argument(
        "--looks", help=argparse.SUPPRESS
    )  # the group-sequential design's: refused, with what replaces it
    parser.add_argument("--alpha", type=float, default=0.05)
    parser.add_argument(
        "--selection", default="", help="how the compared settings were chosen (e.g. tune=lr on seed 0)"
    )
    parser.add_argument("--split", default="test", help="the split the verdict reads (default: test)")
    parser.add_argument("--note", default="")
    _add_multiplier_options(parser)
    args = parser.parse_args(argv)
    _check_what_is_declared(parser, args)
    if args.baseline:
        _check_declarable(parser, args)
    return args


def _add_multiplier_options(parser: argparse.ArgumentParser) -> None:
    """The compute multiplier declared with the comparison (``compute_multiplier.py``'s options)."""
    parser.add_argument(
        "--multiplier-scale-key",
        metavar="AXIS",
        help="also declare the compute multiplier of every row over --baseline, fitted on the first --metric "
        "against this size axis (compute_multiplier.py --scale-key)",
    )
    parser.add_argument("--multiplier-ci", choices=("parametric", "seeds"), default="parametric")
    parser.add_argument("--shared-asymptote", action="store_true", help="the declared multiplier shares E")


def _check_what_is_declared(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (exit 2) a plan that declares no comparison, two, or a comparison without its seeds."""
    if bool(args.baseline) == bool(args.interaction) or (args.interaction and len(args.interaction) != 2):
        parser.error("declare either --baseline AXIS=VALUE or --interaction twice (two axes of two levels)")
    if args.looks is not None:
        parser.error(
            "--looks: the group-sequential design is gone; declare a fixed design, the verdict seeds (--seeds 1,2,3,4,5). "
            "How many seeds detect a difference of δ: the planner line under `python scripts/summarize.py <pilot sweep> "
            '--baseline AXIS=VALUE --margin δ` (docs/analysis.md, "Planning a sweep")'
        )
    if args.baseline and not args.seeds:
        parser.error(
            "declare the verdict seeds (--seeds 1,2,3): "
            "the analysis checks them against the jobs, so seeds added after the results show"
        )


def _check_declarable(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (exit 2) a comparison that could never give a declared verdict."""
    from ablate.analysis.engine import MIN_BLOCKS, MIN_SEEDS, has_units

    for metric in args.metric:
        if metric.split("/", 1)[0] != args.split:
            parser.error(
                f"--metric {metric} is not on the plan's split ({args.split}, --split): no row of it is declared"
            )
        if not has_units(metric):
            parser.error(
                f"--metric {metric}: runs save per-window losses (the held-out text blocks a declared verdict needs, "
                f">= {MIN_BLOCKS}) for test/loss and test/bpb only: declare one of them (ppl = exp(loss))"
            )
    if args.layout is not None and args.layout != "blocks":
        parser.error(
            f"--layout {args.layout}: its test split is one passage, not >= {MIN_BLOCKS} held-out text blocks; "
            "a declared verdict needs --layout blocks (data.splits=blocks)"
        )
    if args.seeds and len(set(args.seeds)) < MIN_SEEDS:
        parser.error(f"--seeds {','.join(map(str, args.seeds))}: a declared verdict needs >= {MIN_SEEDS} seeds")


def extra(args: argparse.Namespace) -> dict:
    """The declared interaction and compute multiplier, when asked for."""
    out: dict = {}
    if args.interaction:
        out["interaction"] = list(args.interaction)
    if args.multiplier_scale_key:
        out["multiplier"] = {
            "metric": args.metric[0],
            "scale_key": args.multiplier_scale_key,
            "ci": args.multiplier_ci,
            "shared_asymptote": bool(args.shared_asymptote),
        }
    return out


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        plan = Plan(
            metrics=tuple(args.metric),
            baseline=args.baseline,
            margin=args.margin,
            margin_basis=args.margin_basis,
            split=args.split,
            where=tuple(args.where),
            variants=tuple(args.variant),
            basis=args.basis,
            alpha=args.alpha,
            seeds=args.seeds,
            selection=args.selection,
            note=args.note,
            layout=args.layout,
            equivalence=tuple(args.equivalence),
            extra=extra(args),
        )
        declaration = declare(args.sweep_dir, plan)
    except (PlanError, OSError) as err:
        print(f"declare.py: error: {err}", file=sys.stderr)
        sys.exit(2)
    print(
        f"declared in {declaration.entry.get('ledger') or 'the ledger'} as entry {declaration.entry.get('entry')} "
        f"(sha256 {declaration.sha256[:12]}, {declaration.declared_at}; copy: {declaration.path}):"
    )
    print("  " + plan.describe())
