"""Re-simulate the verdict machinery and print the tables of ``benchmarks/verdicts/README.md``
("Does each verdict keep its promise?").

    python -m benchmarks.verdicts.simulate                  # every table (a few minutes of CPU)
    python -m benchmarks.verdicts.simulate --scale 0.05     # the same at 1/20 of the sweeps (a smoke check)
    python -m benchmarks.verdicts.simulate --only coverage fixed

The simulations are :mod:`benchmarks.verdicts.calibration`; every number comes from a fixed seed,
so the same command prints the same tables.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np

from benchmarks.verdicts import calibration as cal

SECTIONS = ("coverage", "fixed", "planner", "divergence", "family", "levels")
SEED = 20261128


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
    ("4 blocks, text/seed SD 1.5", cal.Design(sd_text=1.5)),
    ("4 blocks, text/seed SD 2", cal.Design(sd_text=2.0)),
    ("4 blocks, text/seed SD 3", cal.Design(sd_text=3.0)),
    ("8 blocks, text/seed SD 1", cal.Design(blocks=8, sd_text=1.0)),
    ("8 blocks, text/seed SD 3", cal.Design(blocks=8, sd_text=3.0)),
)


def fixed(scale: float, rng: np.random.Generator) -> str:
    sims = _n(200_000, scale)
    rows = []
    for name, design in DESIGNS:
        mde = cal.mde_fixed(design, _n(100_000, scale), rng)
        null = cal.fixed_rates(design, 0.0, mde, sims, rng)
        alt = cal.fixed_rates(design, mde, mde, sims, rng)
        rows.append(
            [
                name,
                f"{mde:.3g}",
                cal.fmt_pct(null["better"] + null["worse"]),
                cal.fmt_pct(null["equivalent"]),
                cal.fmt_pct(alt["worse"]),
            ]
        )
    return (
        f"The fixed design, 10 seeds, alpha 5%, δ = MDE/2, {sims:,} sweeps per cell; MDE: the effect the 10-seed "
        "crossed test, calibrated to a 5% false-positive rate, finds 80% of the time.\n\n"
        + table(["design", "MDE (seed SD = 1)", "false better/worse", "equivalent at Δ = 0", "power at the MDE"], rows)
    )


def planner(scale: float, rng: np.random.Generator) -> str:
    sims, pilots = _n(20_000, scale), max(5, int(40 * scale))
    rows = []
    for name, design in DESIGNS[:3] + DESIGNS[6:7]:
        delta = cal.mde_fixed(design, _n(100_000, scale), rng)  # the 10-seed MDE: the planner should say ~10
        found = [
            cal.planner_power(cal.Design(3, design.blocks, design.sd_text), delta, sims, rng) for _ in range(pilots)
        ]
        seeds = [n for n, _ in found if n is not None]
        power = [p for n, p in found if n is not None]
        rows.append(
            [
                name,
                f"{np.median(seeds):.0f} [{min(seeds)}, {max(seeds)}]" if seeds else "—",
                cal.fmt_pct(float(np.mean(power))) if power else "—",
                str(len(found) - len(seeds)),
            ]
        )
    return (
        f"The planner (stats.seeds_for) from a 3-seed pilot, δ = the 10-seed MDE, {pilots} pilots x {sims:,} sweeps: "
        "the seeds it asks for (median [range]) and the power they then have (target 80%).\n\n"
        + table(["design", "seeds asked", "power", "pilots with no answer"], rows)
    )


def divergence(scale: float, rng: np.random.Generator) -> str:
    design = cal.Design(sd_text=1.0)
    mde = cal.mde_fixed(design, _n(100_000, scale), rng)
    rows = []
    for name, delta in (("Δ = 0", 0.0), ("Δ = +MDE (variant worse)", mde), ("Δ = -MDE (variant better)", -mde)):
        r = cal.divergence_rates(design, delta, _n(50_000, scale), rng)
        rows.append([name, *(cal.fmt_pct(v) for v in r.values())])
    return "One diverged variant seed in 10 (the worst-rank test), 4 blocks, text/seed SD 1, alpha 5%:\n\n" + table(
        ["truth", "better", "worse", "neither"], rows
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


RUN: dict[str, Callable[[float, np.random.Generator], str]] = {
    "coverage": coverage,
    "fixed": fixed,
    "planner": planner,
    "divergence": divergence,
    "family": family,
    "levels": levels,
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.verdicts.simulate", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--scale", type=float, default=1.0, help="the share of the default number of sweeps")
    parser.add_argument("--only", nargs="+", choices=SECTIONS, default=list(SECTIONS))
    args = parser.parse_args(argv)
    if not args.scale > 0:
        parser.error(f"--scale {args.scale}: give a positive share of the sweeps")
    for name in args.only:
        start = time.process_time()
        text = RUN[name](args.scale, np.random.default_rng([SEED, SECTIONS.index(name)]))
        print(f"## {name} ({time.process_time() - start:.0f} s CPU)\n\n{text}\n", flush=True)


if __name__ == "__main__":
    main()
