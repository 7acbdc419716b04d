"""Summarise a sweep: one row per configuration, seeds aggregated (mean ± std), diverged runs counted.

    python scripts/summarize.py logs/multirun/<sweep>                     # writes <sweep>/summary.{csv,md}
    python scripts/summarize.py logs/multirun/<sweep> --metric val/loss --paper experiments/<name>/paper.yaml
    python scripts/summarize.py --wandb ENTITY/PROJECT --group <group>    # the same from W&B (online only)
    python scripts/summarize.py logs/multirun/<sweep> --baseline norm=pre  # + 95% CIs, tests and verdicts vs norm=pre
    python scripts/summarize.py logs/multirun/<sweep> --baseline norm=pre --basis flops   # verdicts at equal FLOPs
    python scripts/summarize.py logs/multirun/<sweep> --where scale=m --baseline act=gelu --out <dir>  # one size
    python scripts/summarize.py logs/multirun/<sweep> --baseline norm=pre --metric val/loss --margin 0.02   # + equivalence
    python scripts/summarize.py logs/multirun/<sweep> --baseline act=gelu --where scale=xs --where scale=m  # one family
    python scripts/summarize.py logs/multirun/<sweep> --interaction norm=post,pre --interaction warmup_steps=0,30 \
        --metric test/bleu --out <dir>   # the 2x2 norm x warmup interaction at each other axis value (each lr)

docs/analysis.md, "Analysing a sweep".
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn

import pandas as pd

from ablate.analysis.budget import BASES, DEFAULT_BASIS
from ablate.analysis.comparison import adjust_family
from ablate.analysis.interaction import DesignError, interaction_markdown, interaction_table
from ablate.analysis.markdown import markdown_table, write_summary
from ablate.analysis.paper import load_paper
from ablate.analysis.plan import Call, Declaration, PlanError, Row, check_rows, first_start, read_plan, standing
from ablate.analysis.runs import Sweep, at_tuned_rates, load_sweep, tuned_choices
from ablate.analysis.specs import parse_baseline, where
from ablate.analysis.tables import summarize
from ablate.config.locations import folder_problem
from ablate.writes import LinkOutsideError, disk_full_message, inside, is_disk_full


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line of ``scripts/summarize.py``; ``--plan`` filled in, bad combinations refused (exit 2)."""
    parser = argparse.ArgumentParser(prog="summarize.py", description=__doc__.split("\n\n")[0])
    _add_source_options(parser)
    _add_comparison_options(parser)
    _add_scope_options(parser)
    args = parser.parse_args(argv)
    if args.plan:
        from_plan(parser, args)
    _check_combinations(parser, args)
    return args


def _add_source_options(parser: argparse.ArgumentParser) -> None:
    """Where the runs are: a sweep directory, or a W&B group."""
    parser.add_argument(
        "sweep_dir",
        nargs="?",
        help="a sweep's directory (logs/multirun/<sweep>: its sweep_name, or what the sweep's table printed)",
    )
    parser.add_argument(
        "--wandb", metavar="ENTITY/PROJECT", help="read the runs of a W&B group instead (needs network)"
    )
    parser.add_argument("--group", help="the W&B group (with --wandb)")


def _add_comparison_options(parser: argparse.ArgumentParser) -> None:
    """What is compared: the metrics, the paper's numbers, the baseline or interaction, and the margin."""
    parser.add_argument(
        "--metric",
        action="append",
        help="the metric to compare, any logged val/* or test/* (the test metrics are logged once, at the end "
        "of training: e.g. test/bleu, test/loss; default: val/ppl for LM, val/bleu for translation); repeat it "
        "for several metrics: with --baseline or --interaction their tests form one family",
    )
    parser.add_argument("--paper", metavar="FILE", help="paper.yaml/.csv with the paper's numbers to show beside ours")
    parser.add_argument(
        "--baseline",
        metavar="AXIS=VALUE,...",
        help="the configuration to compare every other one with (e.g. norm=pre or norm=pre,lr=0.001): "
        "adds per-row 95%% CIs and, against it, the difference, p-value (paired/Welch t-test, "
        "Holm-corrected), the divergence rates (Boschloo's test), minimum detectable effect and a "
        "verdict: better / worse / equivalent (with --margin) / inconclusive",
    )
    parser.add_argument(
        "--interaction",
        metavar="AXIS=LEVEL,LEVEL",
        action="append",
        help="give it twice, e.g. --interaction norm=post,pre --interaction optim.warmup_steps=0,30: "
        "the 2x2 interaction contrast of two axes (does the effect of the second depend on the level "
        "of the first?) in each slice (each --where, and each value of the other axes, e.g. each "
        "learning rate): cell means, simple effects, the contrast with its 95%% CI, p (Holm), the TOST "
        "with --margin, and a verdict; writes interaction.csv and interaction.md instead of the summary",
    )
    parser.add_argument(
        "--margin",
        type=float,
        metavar="DELTA",
        help="with --baseline or --interaction: the smallest difference of interest, in the metric's "
        "units (e.g. 0.02 nats of val/loss): adds the equivalence test (TOST), so that a result can be "
        "'equivalent (±DELTA)' ('no interaction within ±DELTA'); default: analysis.margin from the "
        "jobs' config, else none",
    )
    parser.add_argument(
        "--equivalence",
        metavar="AXIS=VALUE,...",
        action="append",
        help="with --margin: ask the equivalence question of this row only (repeat for several; default: every "
        "row). A row asked only whether it differs leaves the family once that is answered, so a row where "
        "equivalence is hopeless does not dilute the others; declare it in the plan (declare.py --equivalence)",
    )
    parser.add_argument(
        "--family",
        choices=("call", "table"),
        default="call",
        help="with --baseline and several --where slices or --metric values: Holm over every "
        "comparison of the call (default: the write-up is one family), or per table; with "
        "--interaction: over every contrast of the call, or per metric",
    )


def _add_scope_options(parser: argparse.ArgumentParser) -> None:
    """On what the statistics are computed (basis, slices, rates, the declared plan), and where they go."""
    parser.add_argument(
        "--basis",
        choices=BASES,
        default=DEFAULT_BASIS,
        help="what the --baseline statistics compare: steps = each job's final value (default: equal "
        "steps, the protocol of the sweep, each run at the end of its schedule), flops / time = the "
        "value at the matched training FLOPs / training time (the largest budget every completed "
        "job reached, interpolated on each job's validation curve)",
    )
    parser.add_argument(
        "--where",
        metavar="AXIS=VALUE,...",
        action="append",
        help="only the jobs with these values, e.g. scale=m: compare the variants within one size "
        "of a size ladder (or one depth, one dataset, ...); repeat it for several slices "
        "(one table each, written to <out>/<slice>/)",
    )
    parser.add_argument(
        "--all-lrs",
        action="store_true",
        help="a tune=lr sweep: every rate of the grid (default: each variant at its tuned rate only)",
    )
    parser.add_argument(
        "--plan",
        action="store_true",
        help="run the analysis the sweep directory's analysis_plan.json declares (its metrics, baseline, "
        "margin, slices and basis; scripts/declare.py or tune=lr write it): the declared verdicts",
    )
    parser.add_argument(
        "--out",
        metavar="DIR",
        help="where summary.csv/.md go (default: the sweep directory; with --wandb: logs/summaries/<group>)",
    )


def _check_combinations(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse (exit 2, naming the options) a combination of options that does not go together."""
    if args.basis != DEFAULT_BASIS and not args.baseline:
        parser.error(
            f"--basis {args.basis} chooses what --baseline compares: give --baseline AXIS=VALUE too "
            "(the table at equal cost is printed without it)"
        )
    if args.margin is not None and not (args.baseline or args.interaction):
        parser.error(
            "--margin is the equivalence margin of the comparison with --baseline (or of --interaction): "
            "give --baseline AXIS=VALUE too"
        )
    if args.interaction and len(args.interaction) != 2:
        parser.error(
            f"--interaction: give it exactly twice, one axis each, e.g. --interaction norm=post,pre "
            f"--interaction optim.warmup_steps=0,30 (got {len(args.interaction)})"
        )
    if args.interaction and (args.baseline or args.paper):
        parser.error("--interaction writes its own table (interaction.md): run --baseline / --paper in another call")
    if args.equivalence and args.margin is None and not args.plan:
        parser.error("--equivalence names the rows asked the equivalence question of --margin: give --margin too")
    if args.margin is not None and not args.margin > 0:
        parser.error(f"--margin {args.margin}: the smallest difference of interest must be > 0")
    if bool(args.sweep_dir) == bool(args.wandb):
        parser.error("give either a sweep directory or --wandb ENTITY/PROJECT --group NAME")
    if args.wandb and not args.group:
        parser.error("--wandb needs --group NAME (the sweep's W&B group)")


def from_plan(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """``--plan``: the declared metrics, baseline, margin, slices and basis (an option that clashes: an error)."""
    if not args.sweep_dir:
        parser.error("--plan reads the sweep directory's analysis_plan.json: give the sweep directory")
    try:
        declaration = read_plan(args.sweep_dir)
    except PlanError as err:
        parser.error(str(err))
    if declaration is None:
        parser.error(f"--plan: {args.sweep_dir} declares no plan (analysis_plan.json; scripts/declare.py)")
    plan = declaration.plan
    margins = {plan.margin_for(m) for m in plan.metrics}
    if len(margins) > 1:
        parser.error("--plan: the plan declares a margin per metric; run one --metric and --margin per call")
    given = {
        "--metric": args.metric,
        "--baseline": args.baseline,
        "--where": args.where,
        "--margin": args.margin,
        "--equivalence": args.equivalence,
    }
    clash = [name for name, value in given.items() if value]
    if clash:
        parser.error(f"--plan sets {', '.join(clash)} itself: leave them out (or analyse without --plan: exploratory)")
    args.metric, args.baseline, args.where = list(plan.metrics), plan.baseline, list(plan.where) or None
    args.margin, args.basis, args.family = margins.pop(), plan.basis, "call"
    args.equivalence = list(plan.equivalence) or None


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "=.-" else "_" for c in text)


def load(args: argparse.Namespace):
    """The sweep (local or W&B); on a tune=lr sweep each variant at its tuned rate, and a note saying so."""
    if args.wandb:  # imported only here: reading W&B pulls in wandb and Lightning
        from ablate.analysis.wandb_group import load_wandb_group

        return load_wandb_group(args.wandb, args.group), None
    full = load_sweep(args.sweep_dir)
    return (full, None) if args.all_lrs else at_tuned_rates(full, args.sweep_dir)


def writable_out(args: argparse.Namespace) -> Path:
    """The folder the tables go to, once it is known to take files (else named with --out)."""
    out = Path(args.out or (args.sweep_dir if args.sweep_dir else Path("logs") / "summaries" / args.group))
    problem = folder_problem(out)
    if problem:
        argument_error(f"the tables go to {out}, but {problem}: write them elsewhere with --out DIR")
    return out


def write_tables(frame: Any, table: str, out: Path, name: str = "summary") -> tuple[Path, Path]:
    """:func:`ablate.analysis.markdown.write_summary`, a failed write (a full disk) named with --out."""
    try:
        for path in (out / f"{name}.csv", out / f"{name}.md"):
            inside(path, out)  # a link there out of the folder: refused by name, not written through
    except LinkOutsideError as err:
        argument_error(str(err))
    try:
        return write_summary(frame, table, out, name=name)
    except OSError as err:
        reason = disk_full_message(out / f"{name}.csv", len(table)) if is_disk_full(err) else (err.strerror or str(err))
        argument_error(
            f"cannot write the tables to {out}: {reason}. Free some space, or give another folder: --out DIR"
        )


def argument_error(message: str) -> NoReturn:
    """Exit 2 with the message, as argparse does, for an argument only the sweep can check."""
    print(f"summarize.py: error: {message}", file=sys.stderr)
    sys.exit(2)


def fail(err: Exception) -> NoReturn:
    """A user's error (bad input: exit 2) or the environment's (W&B unreachable: exit 1)."""
    if isinstance(err, ConnectionError):
        sys.exit(f"summarize.py: {err}")
    argument_error(str(err))


def report_skipped(notes: list[str]) -> None:
    """One line per job left out (damaged) or counted once (a duplicate run)."""
    for note in notes:
        print(f"summarize.py: note: {note}", file=sys.stderr)


def run_notes(sweep: Any, metrics: list[str | None]) -> list[str]:
    """What the jobs' records say of every table: scale probe warnings, test text that is validation."""
    notes = []
    for key, jobs in sweep.variants().items():
        warned = sorted({w for job in jobs for w in (job.record.get("scale_at_init") or {}).get("warnings") or []})
        if warned:
            notes.append(f"Scale at init, {sweep.label(key)}: {'; '.join(warned)} (the run header's scale line).")
    same = next((job.record["test_is_validation"] for job in sweep.jobs if job.record.get("test_is_validation")), None)
    if same and any(m is None or str(m).startswith("test/") for m in metrics):
        notes.append(f"test/* here is the validation text, not held-out text: {same}.")
    return notes


def with_note(table: str, note: str | None) -> str:
    """The table and, under it, the note on which jobs it rests on (in summary.md too)."""
    return f"{table}\n\n{note}" if note else table


def interaction_standing(args: argparse.Namespace) -> str:
    """Whether this interaction analysis is the one the sweep's plan declared."""
    if not args.sweep_dir:
        return ""
    metrics = args.metric or []

    def problem(declaration: Declaration) -> str | None:
        plan = declaration.plan
        checks = [
            (plan.extra.get("interaction") == list(args.interaction), "the plan declares another (or no) interaction"),
            (set(metrics) == set(plan.metrics), "the metrics are not the plan's"),
            (all(args.margin == plan.margin_for(m) for m in metrics), "the margin is not the plan's"),
            (list(args.where or []) == list(plan.where), "the slices are not the plan's"),
        ]
        return next((reason for ok, reason in checks if not ok), None)

    none = "No analysis plan is declared for this sweep (scripts/declare.py): every verdict here is exploratory."
    return standing(args.sweep_dir, none, "every verdict exploratory", problem)


def write_interaction(args: argparse.Namespace) -> None:
    """--interaction: the 2x2 contrast table, printed and written as interaction.csv / .md."""
    try:
        full, note = load(args)
        frame = interaction_table(
            full, args.interaction, args.metric or [None], args.where or [None], args.margin, args.family
        )
    except DesignError as err:
        argument_error(str(err))
    except (OSError, ValueError) as err:  # missing files, bad --where / --metric, W&B unreachable
        fail(err)
    report_skipped(full.notes)
    table = with_note(interaction_markdown(frame), "\n".join(filter(None, [note, interaction_standing(args)])))
    csv_path, md_path = write_tables(frame, table, writable_out(args), name="interaction")
    print(table)
    print(f"wrote {csv_path} and {md_path}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.interaction:
        write_interaction(args)
        return
    slices, metrics = args.where or [None], args.metric or [None]
    tables = []  # (slice, metric, frame, sweep)
    try:
        full, note = load(args)
        paper = load_paper(args.paper) if args.paper else None
        for spec in slices:
            sweep = where(full, spec) if spec else full
            for metric in metrics:
                frame = summarize(
                    sweep, metric, paper, args.baseline, args.basis, args.margin, tuple(args.equivalence or ())
                )
                if args.sweep_dir and not args.all_lrs:
                    frame.attrs["lr_choice"] = tuned_choices(sweep, args.sweep_dir)
                tables.append((spec, metric, frame, sweep))
        if args.baseline and args.family == "call" and len(tables) > 1:
            frames = adjust_family([frame for _, _, frame, _ in tables])
            tables = [(s, m, frame, sweep) for (s, m, _, sweep), frame in zip(tables, frames, strict=True)]
        notes = run_notes(full, metrics)
        if args.baseline:  # each row labelled declared or exploratory against the sweep's plan
            equivalence = tuple(args.equivalence or ())
            notes[:0] = label_plan(
                args.sweep_dir, tables, args.baseline, args.basis, args.family == "call", equivalence
            )
    except (OSError, ValueError) as err:  # missing files, bad input, W&B unreachable (ConnectionError)
        fail(err)
    report_skipped(full.notes)
    out = writable_out(args)
    several = len(tables) > 1
    for spec, metric, frame, sweep in tables:
        table = with_note(markdown_table(frame, sweep), "\n".join(filter(None, [note, *notes, *full.notes])))
        if spec:
            table = f"Only the jobs with {spec}.\n\n" + table
        parts = ([_slug(spec)] if spec and len(slices) > 1 else []) + (
            [_slug(metric)] if metric and len(metrics) > 1 else []
        )
        csv_path, md_path = write_tables(frame, table, out.joinpath(*parts) if several else out)
        print(table)
        print(f"wrote {csv_path} and {md_path}")


# ----------------------------------------------------------------------------- the declared plan
# each row of the tables labelled ``declared`` or ``exploratory (why)`` by plan.check_rows: the plan
# of record against the jobs the tables read (their seeds, variants, split layout, start times)


def compared_labels(frame: pd.DataFrame, sweep: Sweep) -> list[str]:
    """The row labels of ``frame`` other than its baseline (``norm=post, lr=0.006``)."""
    labels = [sweep.label(key) for key in sweep.variants()]
    return [label for label, verdict in zip(labels, frame["verdict"], strict=True) if verdict != "baseline"]


def _seeds(jobs: list) -> tuple[int, ...]:
    return tuple(sorted({job.seed for job in jobs if job.seed is not None}))


def _declared_as(sweep: Sweep, jobs: list, specs: tuple[str, ...]) -> str | None:
    """The plan's variant spec (``norm=post``) this row's jobs match, or None."""
    for spec in specs:
        try:
            wanted = parse_baseline(spec)
        except ValueError:
            continue
        if all(jobs[0].value(sweep.full_name(k)) == v for k, v in wanted.items()):
            return spec
    return None


def _rows(tables, declaration) -> tuple[dict, tuple[str, ...]]:
    """What the plan check needs of each compared row, and the plan's variants that match no row."""
    specs = declaration.plan.variants if declaration is not None else ()
    rows, matched = {}, set()
    for spec, metric, frame, sweep in tables:
        variants = sweep.variants()
        base_key = next(
            (key for key, verdict in zip(variants, frame["verdict"], strict=True) if verdict == "baseline"), None
        )
        base_seeds = _seeds(variants[base_key]) if base_key is not None else ()
        for (key, jobs), (_, row) in zip(variants.items(), frame.iterrows(), strict=True):
            if key == base_key:
                continue
            declared_as = _declared_as(sweep, jobs, specs)
            matched.add(declared_as)
            pairs = int(row["pairs"]) if pd.notna(row.get("pairs")) else 0
            blocks = int(row["text_blocks"]) if pd.notna(row.get("text_blocks")) else 0
            row_key = (spec, metric, sweep.label(key))
            rows[row_key] = Row(_seeds(jobs), base_seeds, pairs, blocks, str(row["test"]), declared_as)
    return rows, tuple(s for s in specs if s not in matched)


def label_plan(
    root: str | Path | None,
    tables: list[tuple[str | None, str, pd.DataFrame, Sweep]],
    baseline: str | None,
    basis: str,
    family_is_call: bool,
    equivalence: tuple[str, ...] = (),
) -> list[str]:
    """Fill each table's ``plan`` column from the plan of record of ``root``; return the notes."""
    declaration = read_plan(root) if root is not None else None
    rows, missing = _rows(tables, declaration)
    finished = [job for _, _, _, sweep in tables for job in sweep.jobs if job.status in ("completed", "diverged")]
    start, unstarted = first_start([(job.name, job.record) for job in finished])
    layouts = {str(job.value("data.splits")) for job in finished if job.value("data.splits") is not None}
    call = Call(
        baseline=baseline,
        basis=basis,
        margins={metric: frame.attrs.get("margin") for _, metric, frame, _ in tables},
        tables=[(spec, metric, compared_labels(frame, sweep)) for spec, metric, frame, sweep in tables],
        family_is_call=family_is_call,
        rows=rows,
        layouts=frozenset(layouts),
        first_start=start,
        unstarted=unstarted,
        job_plans=tuple((job.name, job.record.get("plan_sha256")) for job in finished),
        missing_variants=missing,
        equivalence=tuple(equivalence),
    )
    labels, notes = check_rows(declaration, call)
    for spec, metric, frame, sweep in tables:
        labels_of_rows = dict(zip([sweep.label(k) for k in sweep.variants()], frame.index, strict=True))
        frame.attrs["plan_declared"] = declaration is not None
        frame["plan"] = ""
        for label, index in labels_of_rows.items():
            if frame.at[index, "verdict"] != "baseline":
                frame.at[index, "plan"] = labels.get((spec, metric, label), "exploratory")
    return notes
