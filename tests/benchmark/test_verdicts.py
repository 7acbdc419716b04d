"""The verdict simulations beside the package (benchmarks/verdicts/, issue 51 item 1), each at a
small size: the fixed design's error rates and power, divergence, the one Holm family, the planner,
and the script that prints the tables of benchmarks/verdicts/README.md."""

from __future__ import annotations

import numpy as np

from benchmarks.verdicts import calibration, simulate


def test_the_fixed_design_keeps_its_level_where_the_text_does_not_dominate():
    """10 seeds, 4 blocks, text SD 0.3 x the seed SD: false better/worse near 5% (200,000 sweeps in
    the README: 4.6%), power near 80% at the calibrated MDE."""
    design = calibration.Design(sd_text=0.3)
    rng = np.random.default_rng(8)
    mde = calibration.mde_fixed(design, 20_000, rng)
    null = calibration.fixed_rates(design, 0.0, mde, 40_000, rng)
    alt = calibration.fixed_rates(design, mde, mde, 40_000, rng)
    assert null["better"] + null["worse"] <= 0.055 and alt["worse"] >= 0.75, (null, alt)


def test_four_text_dominated_blocks_run_liberal_and_eight_do_not():
    """What the table's caution rests on: text SD 2 x the seed SD on 4 blocks, 10 seeds, a fixed
    table at alpha 5% says better/worse about 6% of the time with no true difference; 8 blocks are near 5%."""
    rng = np.random.default_rng(12)
    four, eight = calibration.Design(sd_text=2.0), calibration.Design(blocks=8, sd_text=2.0)
    rate = {}
    for name, design in (("four", four), ("eight", eight)):
        r = calibration.fixed_rates(design, 0.0, 1.0, 60_000, rng)
        rate[name] = r["better"] + r["worse"]
    assert rate["four"] > 0.055 and rate["eight"] < 0.056, rate


def test_one_diverged_seed_in_ten_is_decided():
    rng = np.random.default_rng(9)
    design = calibration.Design()
    mde = calibration.mde_fixed(design, 20_000, rng)
    worse = calibration.divergence_rates(design, mde, 4000, rng)
    better = calibration.divergence_rates(design, -mde, 4000, rng)
    assert worse["worse"] > 0.8 and better["better"] > 0.55, (worse, better)


def test_one_family_keeps_its_error_at_alpha():
    """Two Holm families (one per kind) let the family-wise error reach about 2 alpha; one
    procedure over both keeps it at alpha (20,000 simulated families where the old reaches ~9%)."""
    rates = calibration.family_rates(4, 4.0, 20_000, np.random.default_rng(10))
    assert rates["two Holm families (old)"] > 0.07 and rates["one family (now)"] <= 0.055, rates


def test_the_simulation_script_prints_its_tables(capsys):
    """python -m benchmarks.verdicts.simulate at a tiny size: the tables the README quotes."""
    simulate.main(["--scale", "0.001", "--only", "fixed", "planner", "divergence", "family", "levels"])
    out = capsys.readouterr().out
    assert "| design | MDE (seed SD = 1) | false better/worse | equivalent at Δ = 0 | power at the MDE |" in out
    assert "| 4 blocks, text/seed SD 2 |" in out and "| 8 blocks, text/seed SD 3 |" in out
    assert "| design | seeds asked | power | pilots with no answer |" in out
    assert "| margin | two Holm families (old) | Holm, then Holm on the rest | one family (now) |" in out
    assert "| truth | better | worse | neither |" in out
    assert "| design | α = 0.05 | α = 0.01 | α = 0.002 |" in out
