"""``scripts/simulate_verdicts.py``: re-simulate the verdict machinery and print the tables of
docs/analysis.md ("Does each verdict keep its promise?").

    python scripts/simulate_verdicts.py                  # every table (about 4 min of CPU)
    python scripts/simulate_verdicts.py --scale 0.05     # the same at 1/20 of the sweeps (a smoke check)
    python scripts/simulate_verdicts.py --only coverage sequential

The simulations are :mod:`ablate.analysis.calibration`; every number comes from a fixed seed, so
the same command prints the same tables.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ablate.analysis import calibration as cal
from ablate.analysis.sequential import SPENDING

SECTIONS = ("coverage", "sequential", "spending", "bias", "divergence", "family", "levels", "exact")
SEED = 20261128
FIXED_STREAM = 6  # the fixed-test columns' streams ([SEED, 6, i]: no section's [SEED, k])


def _n(base: int, scale: float) -> int:
    return max(200, int(base * scale))


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] + [" ---: "] * (len(header) - 1)) + "|"]
    return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)])


def coverage(scale: float, rng: np.random.Generator) -> str:
    ratios = (0.3, 1.0, 3.0, 6.0)
    rows = []
    for seeds in (2, 3, 5):
        for blocks in (4, 8):
            cells = []
            for ratio in ratios:
                c = cal.coverage(seeds, blocks, ratio, _n(20_000, scale), rng)
                cells.append(
                    f"**{cal.fmt_pct(c['blocks'])}** ({cal.fmt_pct(c['runs in blocks (old)'])} / "
                    f"{cal.fmt_pct(c['seed only'])})"
                )
            rows.append([f"{seeds} seeds x {blocks} blocks", *cells])
    note = (
        f"Coverage of the 95% interval of the mean difference, {_n(20_000, scale):,} sweeps per cell, text effects "
        "at block level: **blocks as the text unit (now)** (runs of windows inside the blocks as units, the old "
        "analysis / the seed-only paired t)."
    )
    return note + "\n\n" + table(["design", *(f"text/seed SD {r:g}" for r in ratios)], rows)


DESIGNS = (
    ("one passage (seed-only t)", cal.Design(blocks=1, sd_text=0.0)),
    ("4 blocks, text/seed SD 0.3", cal.Design(sd_text=0.3)),
    ("4 blocks, text/seed SD 1", cal.Design(sd_text=1.0)),
    ("4 blocks, text/seed SD 3", cal.Design(sd_text=3.0)),
    ("8 blocks, text/seed SD 1", cal.Design(blocks=8, sd_text=1.0)),
)


SMALL_MARGIN = tuple(  # a margin too small for TOST to stop a null sweep: the difference test's own error
    (f"{blocks} blocks, text/seed SD {sd:g}, δ = MDE/100", cal.Design(blocks=blocks, sd_text=sd, margin_mdes=0.01), j)
    # 8 blocks at text/seed SD 0.3 to 6: what the caution's remedy keeps
    for blocks, sd, j in (
        (4, 1.0, 4),
        (4, 1.5, 0),
        (4, 2.0, 1),
        (4, 3.0, 2),
        (8, 0.3, 5),
        (8, 2.0, 3),
        (8, 3.0, 6),
        (8, 6.0, 7),
    )
)
SMALL_MARGIN_STREAM = 9  # row j's streams ([SEED, 9, j]: no section's), so no row's numbers depend on another's


def _sequential_row(
    name: str, design: cal.Design, sims: int, scale: float, rng: np.random.Generator, fixed_rng: np.random.Generator
) -> list[str]:
    mde = cal.mde_fixed(design, _n(100_000, scale), rng)
    null = cal.sequential_rates(design, 0.0, mde, sims, rng)
    alt = cal.sequential_rates(design, mde, mde, sims, rng)
    # the fixed 10-seed test at its nominal level, on a stream of its own (the columns before are
    # unchanged by it): what the crossed test itself gives up where it is conservative
    fixed = replace(design, looks=design.looks[-1:])
    fixed_null = cal.sequential_rates(fixed, 0.0, mde, sims, fixed_rng)
    fixed_alt = cal.sequential_rates(fixed, mde, mde, sims, fixed_rng)
    return [
        name,
        f"{mde:.3g}",
        cal.fmt_pct(null["better"] + null["worse"]),
        cal.fmt_pct(alt["worse"]),
        f"{null['E[seeds]']:.2f}",
        f"{alt['E[seeds]']:.2f}",
        cal.fmt_pct(fixed_null["better"] + fixed_null["worse"]),
        cal.fmt_pct(fixed_alt["worse"]),
    ]


def sequential(scale: float, rng: np.random.Generator) -> str:
    sims = _n(200_000, scale)
    rows = [
        _sequential_row(name, design, sims, scale, rng, np.random.default_rng([SEED, FIXED_STREAM, i]))
        for i, (name, design) in enumerate(DESIGNS)
    ]
    old = cal.old_false_rate(cal.Design(sd_text=1.0), sims, rng)
    rows += [
        _sequential_row(
            name,
            design,
            sims,
            scale,
            np.random.default_rng([SEED, SMALL_MARGIN_STREAM, j]),
            np.random.default_rng([SEED, FIXED_STREAM, len(DESIGNS) + j]),
        )
        for name, design, j in SMALL_MARGIN
    ]
    return (
        f"Group-sequential, looks at 3, 5, 7, 10 seeds, kim-demets spending, δ = MDE/2 (but the δ = MDE/100 rows), {sims:,} "
        "sweeps per cell; "
        "MDE: the effect the fixed 10-seed test (calibrated to a 5% false-positive rate) finds 80% of the time.\n\n"
        + table(
            [
                "design",
                "MDE (seed SD = 1)",
                "false better/worse",
                "power at the MDE",
                "E[seeds], Δ = 0",
                "E[seeds], Δ = MDE",
                "fixed 10 seeds, nominal α: false better/worse",
                "fixed: power at the MDE",
            ],
            rows,
        )
        + f"\n\nThe old rule (a paired t over seeds on the test text as fixed), judged on a new seed and a new text, "
        f"4 blocks, text/seed SD 1: false better/worse {cal.fmt_pct(old)}."
    )


def spending(scale: float, rng: np.random.Generator) -> str:
    deltas = (0.0, 0.5, 1.0, 1.5, 2.0)
    rows = []
    for kind in SPENDING:
        design = cal.Design(sd_text=1.0, spending=kind)
        mde = cal.mde_fixed(design, _n(100_000, scale), rng)
        alt = cal.sequential_rates(design, mde, mde, _n(100_000, scale), rng)
        seeds = cal.expected_seeds(design, mde, _n(50_000, scale), rng, deltas)
        rows.append([kind, cal.fmt_pct(alt["worse"]), *(f"{s:.2f}" for s in seeds)])
    return "E[seeds] of 10 by the true Δ (in MDEs), 4 blocks, text/seed SD 1, δ = MDE/2:\n\n" + table(
        ["spending", "power at the MDE", *(f"Δ = {d:g} MDE" for d in deltas)], rows
    )


def bias(scale: float, rng: np.random.Generator) -> str:
    design = cal.Design(sd_text=1.0)
    mde = cal.mde_fixed(design, _n(100_000, scale), rng)
    rows = []
    keys = list(cal.bias(design, mde, mde, 400, np.random.default_rng(0)))
    for f in (1.0, 0.5):
        b = cal.bias(design, f * mde, mde, _n(100_000, scale), rng)
        rows.append([f"Δ = {f:g} MDE", *(f"{100 * v:+.1f}%" for v in list(b.values())[:-1]), cal.fmt_pct(b[keys[-1]])])
    return "The estimate at stopping relative to the truth (E[Δ̂]/Δ - 1), 4 blocks, text/seed SD 1:\n\n" + table(
        ["truth", *keys], rows
    )


def divergence(scale: float, rng: np.random.Generator) -> str:
    design = cal.Design(sd_text=1.0)
    mde = cal.mde_fixed(design, _n(100_000, scale), rng)
    rows = []
    for name, delta in (("Δ = 0", 0.0), ("Δ = +MDE (variant worse)", mde), ("Δ = -MDE (variant better)", -mde)):
        r = cal.divergence_rates(design, delta, mde, _n(50_000, scale), rng)
        rows.append([name, *(cal.fmt_pct(v) for v in r.values())])
    keys = list(cal.divergence_rates(design, 0.0, mde, 200, np.random.default_rng(0)))
    return (
        "One diverged variant seed in 10 (worst-rank test at every look that holds it), 4 blocks, text/seed SD 1:\n\n"
        + table(["truth", *keys], rows)
    )


def family(scale: float, rng: np.random.Generator) -> str:
    rows = []
    for ratio in (1.0, 2.0, 3.0, 4.0, 5.0):
        r = cal.family_rates(4, ratio, _n(200_000, scale), rng)
        rows.append([f"δ = {ratio:g} SE", *(cal.fmt_pct(v) for v in r.values())])
    keys = list(cal.family_rates(4, 1.0, 200, np.random.default_rng(0)))
    return (
        "Family-wise error (any false better, worse or equivalent), 4 rows: 2 with Δ = 0, 2 with |Δ| = δ:\n\n"
        + table(["margin", *keys], rows)
    )


LEVEL_DESIGNS = ((3, 4), (5, 4), (10, 4), (10, 8))
ALPHAS = (0.05, 0.01, 0.002)


def levels(scale: float, rng: np.random.Generator) -> str:
    sims = _n(200_000, scale)
    rows = []
    for seeds, blocks in LEVEL_DESIGNS:
        for sd_text in (0.3, 1.0, 3.0):
            over_alpha = cal.level_ratios(seeds, blocks, sd_text, ALPHAS, sims, rng)
            rows.append(
                [f"{seeds} seeds x {blocks} blocks, text/seed SD {sd_text:g}", *(f"{r:.2f}" for r in over_alpha)]
            )
    return (
        f"The crossed test's false-positive rate over its nominal level α (1.00: exact), Δ = 0, {sims:,} sweeps "
        "per row, text effects at block level:\n\n" + table(["design", *(f"α = {a:g}" for a in ALPHAS)], rows)
    )


def exact(scale: float, rng: np.random.Generator) -> str:
    sims = _n(200_000, scale)
    rows, names = [], []
    for name, design in DESIGNS[1:]:  # the crossed designs (one passage is the paired t: exact)
        mde = cal.mde_fixed(design, _n(100_000, scale), rng)
        rates = cal.exact_test_rates(design, mde, sims, rng)
        names = list(rates)
        rows.append([name, *(f"{cal.fmt_pct(null)} / {cal.fmt_pct(power)}" for null, power in rates.values())])
    return (
        "The sequential rule (looks at 3, 5, 7, 10 seeds, kim-demets, difference test only) with a better test: "
        f"false better/worse / power at the MDE, {sims:,} sweeps per cell and per reference:\n\n"
        + table(["design", *names], rows)
    )


RUN: dict[str, Callable[[float, np.random.Generator], str]] = {
    "coverage": coverage,
    "sequential": sequential,
    "spending": spending,
    "bias": bias,
    "divergence": divergence,
    "family": family,
    "levels": levels,
    "exact": exact,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="simulate_verdicts.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="the share of the default number of sweeps")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args(argv)
    if not args.scale > 0:
        parser.error(f"--scale {args.scale}: give a positive share of the sweeps")
    for name in args.only:
        start = time.process_time()
        text = RUN[name](args.scale, np.random.default_rng([SEED, SECTIONS.index(name)]))
        print(f"## {name} ({time.process_time() - start:.0f} s CPU)\n\n{text}\n", flush=True)
