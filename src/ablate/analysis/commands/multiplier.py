"""Effective compute multiplier of each variant over a baseline, from a sweep over model sizes.

    python train.py -m scale=xs,s,m act=gelu,swiglu seed=1,2,3          # the size ladder (conf/scale)
    python scripts/compute_multiplier.py logs/multirun/<sweep> --baseline act=gelu   # --scale-key scale
    python train.py -m model=tiny,small,gpt2_small act=gelu,swiglu seed=1,2,3 ...     # any other size axis
    python scripts/compute_multiplier.py logs/multirun/<sweep> --baseline act=gelu --scale-key model
    python scripts/compute_multiplier.py logs/multirun/<sweep> --baseline act=gelu --scale-key model.d_model \
        --metric val/loss --flops 6N --bootstrap 2000 --out figs/
    python scripts/compute_multiplier.py logs/<sweep-xs> logs/<sweep-s> logs/<sweep-m> --baseline act=gelu  # pooled

Prints the points and the fits as Markdown, and writes ``compute_multiplier.png`` and
``compute_multiplier.csv`` to ``--out`` (default ``<sweep>/figures``); the method:
:mod:`ablate.analysis.scaling`.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, never a window

import numpy as np
import pandas as pd

from ablate.analysis.compute import FLOPS
from ablate.analysis.figures.comparisons import compute_multiplier_figure
from ablate.analysis.runs import Sweep, at_tuned_rates, load_sweep, tuned_key
from ablate.analysis.scaling import METHODS, Curve, Multiplier, compute_multiplier
from ablate.analysis.scaling_sweep import find_curve, scaling_curves


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="compute_multiplier.py", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "sweep_dir",
        nargs="+",
        help="a sweep's directory (logs/multirun/<sweep>), or several whose jobs are pooled (e.g. one "
        "tune=lr sweep per size, each at its own tuned rates)",
    )
    parser.add_argument(
        "--baseline", required=True, metavar="AXIS=VALUE,...", help="the reference curve, e.g. act=gelu"
    )
    parser.add_argument(
        "--scale-key",
        help="the axis that sets the size, e.g. model or model.d_model (default: "
        "scale, when the sweep has that axis: the size ladder conf/scale)",
    )
    parser.add_argument("--metric", default="val/loss", help="the loss to fit (default: val/loss)")
    parser.add_argument(
        "--flops",
        choices=FLOPS,
        default="6N+attn",
        help="FLOPs per token: 6N+attn = 6N + 12 L d T (as train/mfu; default) or 6N (Kaplan et al.)",
    )
    parser.add_argument("--bootstrap", type=int, default=1000, metavar="N", help="bootstrap resamples (0: no interval)")
    parser.add_argument("--seed", type=int, default=0, help="the bootstrap's random seed")
    parser.add_argument(
        "--ci",
        choices=METHODS,
        default="parametric",
        help="the bootstrap: parametric = refit curves drawn around the fits with the seed-to-seed "
        "noise (pooled over scales, its own uncertainty included; calibrated at 3 sizes x 3 "
        "seeds), seeds = resample the seeds jointly across scales and curves (needs many seeds)",
    )
    parser.add_argument(
        "--shared-asymptote",
        action="store_true",
        help="fit one irreducible loss E for the variant and the baseline (each its own A, alpha): "
        "for ladders too short to pin E per curve",
    )
    parser.add_argument(
        "--no-extrapolation",
        action="store_true",
        help="refuse a multiplier whose answer (or interval) needs the baseline's law beyond its "
        "largest measured compute, instead of flagging it",
    )
    parser.add_argument("--out", metavar="DIR", help="where the PNG and CSV go (default: <sweep_dir>/figures)")
    return parser.parse_args(argv)


def default_scale_key(sweep) -> str:
    """``scale`` when the sweep varies it, else an error asking for ``--scale-key``."""
    if "scale" in sweep.axes:
        return "scale"
    raise ValueError(
        f"--scale-key not given and {sweep.source} has no `scale` axis (the size ladder, "
        f"scale=xs,s,m): name the axis that sets the size; its axes are {', '.join(sweep.axes) or 'none'}"
    )


def points_table(curves: list[Curve]) -> str:
    lines = ["| variant | scale | compute (FLOPs) | n | loss | left out |", "| --- | --- | ---: | ---: | ---: | --- |"]
    for curve in curves:
        scale = np.array(curve.scale)
        by_compute = sorted(curve.scales(), key=lambda n: np.array(curve.compute)[scale == n].mean())
        for name in dict.fromkeys([*by_compute, *curve.failed]):  # smallest model first
            loss = np.array(curve.loss)[scale == name]
            compute = np.array(curve.compute)[scale == name]
            mean = f"{loss.mean():.4g}" + (f" ± {loss.std(ddof=1):.2g}" if len(loss) > 1 else "") if len(loss) else "—"
            flops = f"{compute.mean():.3g}" if len(compute) else "—"
            failed = curve.failed.get(name, [])
            left = ", ".join(f"{s} {failed.count(s)}" for s in dict.fromkeys(failed)) or ""
            lines.append(f"| {curve.label} | {name} | {flops} | {len(loss)} | {mean} | {left} |")
    return "\n".join(lines)


def _multiplier(value: float) -> str:
    return "∞" if math.isinf(value) else ("—" if math.isnan(value) else f"{value:.3g}")


def result_row(result: Multiplier) -> dict[str, object]:
    return {
        "variant": result.variant,
        "baseline": result.baseline,
        "compute": result.compute,
        "variant_loss": result.loss,
        "multiplier": result.value,
        "ci_low": result.low,
        "ci_high": result.high,
        "E": result.variant_fit.E,
        "A": result.variant_fit.A,
        "alpha": result.variant_fit.alpha,
        "baseline_E": result.baseline_fit.E,
        "baseline_A": result.baseline_fit.A,
        "baseline_alpha": result.baseline_fit.alpha,
        "bootstrap": result.n_boot,
        "failed_fits": result.failed_fits,
        "ci_method": result.method,
        "shared_asymptote": result.shared_E,
        "extrapolation": result.extrapolation,
    }


def results_table(base: Curve, results: list[Multiplier], refused: dict[str, str], fits: dict) -> str:
    lines = [
        "| variant | E | A | α | compute C* | loss at C* | multiplier at C* | 95% CI | extrapolates |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    b = fits[base.label]
    lines.append(f"| {base.label} (baseline) | {b.E:.4g} | {b.A:.4g} | {b.alpha:.3g} | — | — | 1 | — | — |")
    for r in results:
        f = r.variant_fit
        value = _multiplier(r.value) + (" (below the baseline's E)" if math.isinf(r.value) else "")
        ci = "—" if math.isnan(r.low) else f"[{_multiplier(r.low)}, {_multiplier(r.high)}]"
        flag = f"**yes**: {r.extrapolation}" if r.extrapolation else "no"
        lines.append(
            f"| {r.variant} | {f.E:.4g} | {f.A:.4g} | {f.alpha:.3g} | {r.compute:.3g} | {r.loss:.4g} | "
            f"{value} | {ci} | {flag} |"
        )
    for label, why in refused.items():
        lines.append(f"| {label} | — | — | — | — | — | refused: {why} | — | — |")
    return "\n".join(lines)


def notes(args: argparse.Namespace, results: list[Multiplier]) -> str:
    failed = sum(r.failed_fits for r in results)
    compute = {"6N+attn": "(6N + 12 L d T) FLOPs/token", "6N": "6N FLOPs/token"}[args.flops]
    return "\n".join(
        [
            f"Fit: final {args.metric} = E + A C^-α per variant over every (scale, seed) point: least squares in "
            "log-compute by variable projection (E and A in closed form for each α, a one-dimensional search over α; "
            "src/ablate/analysis/power_law.py).",
            f"Compute C = {compute} x steps x data.batch_size x data.seq_len (translation: x data.max_tokens), "
            "N = status.json params.",
            "Multiplier at C* (the variant's largest measured compute): the compute the baseline's fit needs to reach the "
            "variant's fitted loss at C*, over C*; ∞ when that loss is below the baseline's asymptote E.",
            (
                f"95% CI: percentile bootstrap of the whole pipeline, {args.bootstrap} replicates, both curves refitted each "
                "time, "
                + (
                    "parametric (curves drawn around the fits with each curve's seed-to-seed sd pooled over its "
                    "scales, the sd itself redrawn from its chi-square distribution)"
                    if args.ci == "parametric"
                    else "the seeds resampled jointly (one draw of seeds for every scale and both curves)"
                )
                + f" (numpy rng seed {args.seed}); {failed} replicate fits failed and are left out."
                if args.bootstrap
                else "No bootstrap (--bootstrap 0): no interval."
            ),
            "Asymptote: one E shared by the variant and the baseline (--shared-asymptote)."
            if args.shared_asymptote
            else "Asymptote: each curve its own E.",
            "Extrapolates: the multiplier (or the interval's upper end) needs the baseline's fitted law beyond its largest "
            "measured compute, where the data do not check it"
            + (" (such rows refused: --no-extrapolation)." if args.no_extrapolation else "."),
            "Left out: jobs without a final value (diverged, crashed, unfinished), counted per scale above.",
        ]
    )


def plan_standing(args: argparse.Namespace) -> str:
    """Whether this multiplier is the one the sweep's analysis plan declared."""
    from ablate.analysis.plan import Declaration, standing
    from ablate.analysis.specs import parse_baseline

    asked = {
        "metric": args.metric,
        "scale_key": args.scale_key,
        "ci": args.ci,
        "shared_asymptote": bool(args.shared_asymptote),
    }

    def problem(declaration: Declaration) -> str | None:
        declared = declaration.plan.extra.get("multiplier")
        if not declared:
            return "the plan declares no compute multiplier"
        if parse_baseline(str(declaration.plan.baseline)) != parse_baseline(args.baseline):
            return f"the baseline is not the plan's ({declaration.plan.baseline})"
        return next(
            (f"{k}={asked[k]} is not the plan's {declared.get(k)}" for k in asked if declared.get(k) != asked[k]), None
        )

    none = "Analysis plan: none declared (scripts/declare.py): this multiplier is exploratory."
    return standing(args.sweep_dir[0], none, "exploratory", problem)


def pooled_sweep(sweep_dirs: list[str]) -> tuple[Sweep, list[str], list[str]]:
    """The jobs of one or more sweep directories as one sweep (``tune=lr`` ones at their tuned rates)."""
    jobs, notes, per_point, skipped = [], [], [], []
    for sweep_dir in sweep_dirs:
        sweep, note = at_tuned_rates(load_sweep(sweep_dir), sweep_dir)
        jobs += sweep.jobs
        skipped += sweep.notes
        if note:
            notes.append(note if len(sweep_dirs) == 1 else f"{sweep_dir}: {note}")
            key = tuned_key(sweep_dir)
            if key and key not in per_point:
                per_point.append(key)
    if len(sweep_dirs) == 1:
        return sweep, notes, per_point
    return Sweep.from_jobs(", ".join(sweep_dirs), jobs, skipped), notes, per_point


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out or Path(args.sweep_dir[0]) / "figures")
    try:
        sweep, tuned, per_point = pooled_sweep(args.sweep_dir)
        args.scale_key = args.scale_key or default_scale_key(sweep)
        curves = scaling_curves(sweep, args.scale_key, args.metric, args.flops, per_point=per_point)
        base = find_curve(curves, args.baseline, sweep.short_names())
        base.check()  # the baseline must have a fit; another variant with too few scales is refused in its row
        fits, results, refused = {base.label: base.fit()}, [], {}
        for curve in curves:
            if curve is base:
                continue
            try:
                result = compute_multiplier(
                    curve, base, args.bootstrap, args.seed, method=args.ci, shared_E=args.shared_asymptote
                )
            except ValueError as err:
                refused[curve.label] = str(err).split(": ", 1)[-1]
                continue
            if args.no_extrapolation and result.extrapolation:
                refused[curve.label] = f"extrapolates ({result.extrapolation}; --no-extrapolation)"
                continue
            if args.shared_asymptote:  # the baseline's fit with the E it shares with this variant (drawn: the last)
                fits[base.label] = result.baseline_fit
            results.append(result)
            fits[curve.label] = result.variant_fit
    except (OSError, ValueError) as err:  # a bad --baseline / --metric / directory: the user's (exit 2)
        print(f"compute_multiplier.py: error: {err}", file=sys.stderr)
        sys.exit(2)
    except RuntimeError as err:  # a fit that failed
        sys.exit(f"compute_multiplier.py: {err}")
    for skipped in sweep.notes:  # damaged jobs left out, duplicates counted once
        print(f"compute_multiplier.py: note: {skipped}", file=sys.stderr)
    print(points_table(curves) + "\n")
    print(results_table(base, results, refused, fits) + "\n")
    print(notes(args, results))
    print(plan_standing(args))
    for note in tuned:
        print(note)
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "compute_multiplier.csv"
    pd.DataFrame([result_row(r) for r in results]).to_csv(csv_path, index=False)
    png = compute_multiplier_figure(curves, fits, results, args.metric, args.flops, out / "compute_multiplier.png")
    print(f"wrote {png} and {csv_path}")
