"""The benchmark's report, on the console (rich tables) and as Markdown (``benchmark.md``), and the
JSON-safe form of the report dict (``benchmark.json``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import ablate  # noqa: F401  (registers the config resolvers)

if TYPE_CHECKING:
    from rich.console import JustifyMethod


def pct(x: float | None, signed: bool = True) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return f"{100 * x:+.1f}%" if signed else f"{100 * x:.1f}%"


def print_report(report: dict[str, Any]) -> None:
    """The report on the console: the machine, config and peak, then the speed, ratio and budget tables."""
    from rich.console import Console

    console = Console(width=max(150, Console().width))
    for line in _console_header(report):
        console.print(line)
    console.print(_speed_table(report["headline"]))
    console.print(_ratio_table(report["groups"]))
    busy = [
        g["other_processes_cpu_share"] for g in report["groups"].values() if g["other_processes_cpu_share"] is not None
    ]
    if busy and max(busy) > 0.1:
        console.print(
            f"[yellow]other processes used up to {pct(max(busy), False)} of the machine's CPU during the run: "
            f"ratios are less precise than on a quiet machine (see the min-max column)[/yellow]"
        )
    console.print(_budget_table(report["budgets"]))


def _console_header(report: dict[str, Any]) -> list[str]:
    """The machine, the config and the peak the MFU divides by."""
    from rich.markup import escape

    m, peak = report["machine"], report["peak_flops"]
    return [
        f"[bold]machine[/bold] {m['cpu']}, {m['logical_cpus']} logical CPUs, torch {m['torch']} at "
        f"{m['torch_threads']} threads, device {m.get('gpu', m['device'])}; load average "
        f"{m['load_avg_start'][0]:.2f} at start, {m['load_avg_end'][0]:.2f} at end",
        f"[bold]config[/bold] {escape(' '.join(report['config']['overrides'])) or '(defaults)'}; "
        f"{report['config']['tokens_per_step']} tokens per step",
        f"[bold]peak[/bold] {peak / 1e9:.1f} GFLOP/s ({report['peak_flops_source']})"
        if peak
        else f"[bold]peak[/bold] unknown ({report['peak_flops_source']})",
    ]


def _speed_table(head: dict[str, Any]) -> Any:
    """The headline variant's speed, MFU, memory and data wait (a rich Table)."""
    from rich.table import Table

    t = Table(title=f"Training speed ({head.get('variant')})")
    t.add_column("metric")
    t.add_column("value", justify="right")
    if "tokens_per_sec" not in head:  # the headline variant was not run
        return t
    rows = [
        ("tokens/s (our loop)", f"{head['tokens_per_sec']:,.0f}"),
        (
            "tokens/s (hand-written loop)",
            f"{head['hand_loop_tokens_per_sec']:,.0f}" if head.get("hand_loop_tokens_per_sec") else "n/a",
        ),
        ("median step time", f"{1e3 * head['step_time_median_s']:.2f} ms"),
        ("model FLOPs per token", f"{head['flops_per_token'] / 1e6:.2f} M"),
        ("achieved", f"{head['achieved_flops'] / 1e9:.1f} GFLOP/s"),
        ("MFU (our loop / hand loop)", f"{pct(head['mfu'], False)} / {pct(head.get('hand_loop_mfu'), False)}"),
        (
            f"peak memory ({head['memory_kind']})",
            f"{head['peak_memory_mb']:,.0f} MB" if head["peak_memory_mb"] else "n/a",
        ),
        ("  of which before the model", f"{head['rss_before_model_mb']:,.0f} MB"),
        (
            "data wait per step (median / max)",
            f"{head['data_wait_median_ms']:.3f} / {head['data_wait_max_ms']:.2f} ms"
            if head["data_wait_median_ms"] is not None
            else "n/a",
        ),
        (
            "logged train/tokens_per_sec (median)",
            f"{head['logged_tokens_per_sec']:,.0f} ({pct(head['logged_vs_headline'])} vs "
            f"tokens/s above, {pct(head['logged_vs_timed_same_steps'])} vs timed over the same steps)"
            if head["logged_tokens_per_sec"]
            else "n/a",
        ),
    ]
    for cb, ms in (head.get("callback_ms_per_step") or {}).items():
        rows.append((f"  {cb} hooks per step", f"{ms:.3f} ms"))
    for row in rows:
        t.add_row(*row)
    return t


def _ratio_table(groups: dict[str, Any]) -> Any:
    """Every group's side-by-side ratios, with the machine's load while it ran (a rich Table)."""
    from rich.table import Table

    t = Table(title="Side-by-side ratios (median over rounds of per-round mean step time ratios)")
    for col, just in (
        ("group", "left"),
        ("ratio", "left"),
        ("of", "left"),
        ("median", "right"),
        ("min-max", "right"),
        ("rounds", "right"),
        ("load", "right"),
        ("others' CPU", "right"),
    ):
        t.add_column(col, justify=cast("JustifyMethod", just))
    for gname, g in groups.items():
        for i, (rname, r) in enumerate(g["ratios"].items()):
            t.add_row(
                gname if i == 0 else "",
                rname,
                r["of"],
                f"{r['median']:.3f}",
                f"{r['min']:.3f}-{r['max']:.3f}",
                str(len(r["per_round"])),
                f"{g['load_avg_1min']:.2f}" if i == 0 else "",
                pct(g["other_processes_cpu_share"], False) if i == 0 else "",
            )
    return t


def _budget_table(budgets: dict[str, Any]) -> Any:
    """Each budget: measured, its A/A control, the direct measure, the limit and the verdict (a rich Table)."""
    from rich.table import Table

    t = Table(
        title="Budgets (measured: the median ratio minus 1; A/A: the same for two identical hand loops, "
        "i.e. the noise; direct: time inside the callback / step time)"
    )
    for col in ("budget", "measured", "A/A", "direct", "limit", "verdict"):
        t.add_column(col)
    for key, b in budgets.items():
        if b["met"] is None:
            verdict = "[yellow]not measured[/yellow]"
        elif b["met"]:
            verdict = "[green]met[/green]"
        elif b.get("within_noise"):
            verdict = f"[yellow]missed by {100 * b['missed_by']:.1f} points, within this run's noise (A/A)[/yellow]"
        else:
            verdict = f"[red]missed by {100 * b['missed_by']:.1f} points[/red]"
        t.add_row(
            f"{b['what']} ({key})",
            pct(b["measured"], key != "data_wait"),
            pct(b["aa_control"], False) if "aa_control" in b else "",
            pct(b["direct"]) if "direct" in b else "",
            f"<= {pct(b['limit'], False)}",
            verdict,
        )
    return t


def markdown_report(report: dict[str, Any], command: str) -> str:
    """The tables of :func:`print_report` as Markdown, for experiments/benchmarks/README.md."""
    lines = [
        *_markdown_header(report, command),
        *_markdown_speed(report["headline"], report["config"]),
        *_markdown_ratios(report["groups"]),
        *_markdown_budgets(report["budgets"]),
    ]
    return "\n".join(lines) + "\n"


def _markdown_header(report: dict[str, Any], command: str) -> list[str]:
    m = report["machine"]
    return [
        f"Machine: {m['cpu']} (`lscpu` model name), {m['logical_cpus']} logical CPUs, torch {m['torch']} at "
        f"{m['torch_threads']} threads, Lightning {m['lightning']}, device {m.get('gpu', m['device'])}. Load average "
        f"{m['load_avg_start'][0]:.2f} at start, {m['load_avg_end'][0]:.2f} at end; wall time {report['wall_time_s']:.0f} s.",
        "",
        f"Command: `{command}`",
        "",
        f"Peak: {report['peak_flops'] / 1e9:.1f} GFLOP/s ({report['peak_flops_source']})."
        if report["peak_flops"]
        else "Peak: unknown.",
        "",
    ]


def _markdown_speed(head: dict[str, Any], cfg: dict[str, Any]) -> list[str]:
    if "tokens_per_sec" not in head:  # benchmark.only left the headline's group out
        return [f"**Training speed**: {head.get('note', 'not measured')}"]
    lines = [
        f"**Training speed** (`{head['variant']}`, {cfg['tokens_per_step']} tokens per step)",
        "",
        "| metric | value |",
        "| --- | --- |",
        f"| tokens/s, our loop / hand-written loop | {head['tokens_per_sec']:,.0f} / {head.get('hand_loop_tokens_per_sec') or float('nan'):,.0f} |",
        f"| median step time | {1e3 * head['step_time_median_s']:.1f} ms |",
        f"| model FLOPs per token | {head['flops_per_token'] / 1e6:.2f} M ({head['params']:,} parameters) |",
        f"| achieved | {head['achieved_flops'] / 1e9:.1f} GFLOP/s |",
        f"| MFU, our loop / hand-written loop | {pct(head['mfu'], False)} / {pct(head.get('hand_loop_mfu'), False)} |",
        f"| peak memory ({head['memory_kind']}) | {head['peak_memory_mb']:,.0f} MB ({head['rss_before_model_mb']:,.0f} MB before the model) |",
        f"| data wait per step: median / max / share of step time | {head['data_wait_median_ms']:.2f} ms / "
        f"{head['data_wait_max_ms']:.2f} ms / {pct(head['data_wait_fraction'], False)} |",
        f"| logged `train/tokens_per_sec` (median) | {head['logged_tokens_per_sec']:,.0f}: {pct(head['logged_vs_headline'])} vs "
        f"tokens/s above, {pct(head['logged_vs_timed_same_steps'])} vs the same steps timed |",
    ]
    for cb, ms in (head.get("callback_ms_per_step") or {}).items():
        lines.append(f"| {cb} hooks per step | {ms:.3f} ms |")
    return lines


def _markdown_ratios(groups: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "**Ratios** (median over rounds of per-round mean step-time ratios; min–max over rounds)",
        "",
        "| group | ratio | of | median | min–max | rounds | load | others' CPU |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for gname, g in groups.items():
        for i, (rname, r) in enumerate(g["ratios"].items()):
            group, load, others = (
                (gname, f"{g['load_avg_1min']:.2f}", pct(g["other_processes_cpu_share"], False))
                if i == 0
                else ("", "", "")
            )
            lines.append(
                f"| {group} | `{rname}` | {r['of']} | {r['median']:.3f} | {r['min']:.3f}–{r['max']:.3f} | "
                f"{len(r['per_round'])} | {load} | {others} |"
            )
    return lines


def _markdown_budgets(budgets: dict[str, Any]) -> list[str]:
    lines = [
        "",
        "**Budgets**",
        "",
        "| budget | measured | A/A control | direct | limit | verdict |",
        "| --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for key, b in budgets.items():
        verdict = (
            "not measured"
            if b["met"] is None
            else "met"
            if b["met"]
            else f"missed by {100 * b['missed_by']:.1f} points"
            + (", within this run's noise (A/A)" if b.get("within_noise") else "")
        )
        lines.append(
            f"| {b['what']} | {pct(b['measured'], key != 'data_wait')} | "
            f"{pct(b['aa_control'], False) if 'aa_control' in b else ''} | {pct(b['direct']) if 'direct' in b else ''} | "
            f"≤ {pct(b['limit'], False)} | {verdict} |"
        )
    return lines


def jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return str(obj)
