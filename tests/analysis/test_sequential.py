"""Seeds to a decision (ablate.analysis.sequential): the alpha spending, the exact boundaries
and, by simulation, the error rates the design promises: false better/worse within [4%, 5%]
when there is no difference (exact boundaries: not far below alpha, as a union bound is), power
>= 78% at the fixed design's minimum detectable effect, no more than 5% false equivalent at
|Δ| = δ, whereas looking at the fixed 5% level after every batch of seeds exceeds them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from ablate.analysis import sequential as seq
from ablate.analysis.stats import mde as stats_mde

LOOKS = [3, 5, 7, 10]
DRAWS = 4000


def test_spending_sums_to_alpha():
    for kind in seq.SPENDING:
        levels = seq.look_levels(LOOKS, 0.05, kind)
        assert levels.sum() == pytest.approx(0.05) and (levels > 0).all()
    obf = seq.look_levels(LOOKS, 0.05, "obrien-fleming")
    assert obf[0] == pytest.approx(2 - 2 * scipy_stats.norm.cdf(1.959964 / math.sqrt(0.3)), rel=1e-4)  # ~3.5e-4
    assert obf[0] < 0.001 < obf[-1]
    pocock = seq.look_levels(LOOKS, 0.05, "pocock")
    assert pocock[0] == pytest.approx(0.05 * math.log(1 + (math.e - 1) * 0.3))
    with pytest.raises(ValueError, match="increasing"):
        seq.look_levels([5, 3])
    with pytest.raises(ValueError, match="spending="):
        seq.spent(0.5, kind="haybittle")


def test_boundaries_spend_exactly_the_increments():
    """Under no difference, the share of simulated sweeps (independent of the ones the boundaries
    were computed on) that first cross at each look is that look's increment of the spending."""
    rng = np.random.default_rng(33)
    crit = seq.boundaries(tuple(LOOKS))
    d = rng.normal(0.0, 1.0, (400_000, LOOKS[-1]))
    alive = np.ones(len(d), dtype=bool)
    first = []
    for n, c in zip(LOOKS, crit, strict=True):
        t = d[:, :n].mean(1) / (d[:, :n].std(1, ddof=1) / math.sqrt(n))
        crossed = alive & (np.abs(t) > c)
        first.append(crossed.mean())
        alive &= ~crossed
    levels = seq.look_levels(LOOKS)
    np.testing.assert_allclose(first, levels, atol=0.0008)  # simulation error of 400,000 sweeps
    assert crit[-1] > scipy_stats.t.ppf(0.975, LOOKS[-1] - 1)  # the last look pays for the earlier ones


def test_exact_type_one_error_and_power():
    """1,000,000 simulated sweeps (looks at 3, 5, 7, 10 seeds, the default spending, margin half
    the MDE): false better/worse within [4%, 5%] (measured 4.95%; the union bound gave 4.0-4.1%),
    power >= 78% at the MDE of the fixed 10-seed t-test (measured 78.3%)."""
    mde = stats_mde(1 / math.sqrt(LOOKS[-1]), LOOKS[-1] - 1)
    rng = np.random.default_rng(34)
    false, power = [], []
    for _ in range(4):
        code, _ = seq.decide(rng.normal(0.0, 1.0, (250_000, LOOKS[-1])), mde / 2, LOOKS)
        false.append(np.isin(code, [seq.BETTER, seq.WORSE]).mean())
        code, _ = seq.decide(rng.normal(mde, 1.0, (250_000, LOOKS[-1])), mde / 2, LOOKS)
        power.append((code == seq.WORSE).mean())
    assert 0.04 <= np.mean(false) <= 0.05, np.mean(false)
    assert np.mean(power) >= 0.78, np.mean(power)


def _rates(true: float, margin: float, kind: str, rng: np.random.Generator) -> dict[str, float]:
    diffs = rng.normal(true, 1.0, (DRAWS, LOOKS[-1]))
    code, seeds = seq.decide(diffs, margin, LOOKS, 0.05, kind)
    out = {seq.NAMES[c]: float((code == c).mean()) for c in seq.NAMES}
    out["seeds"] = float(seeds.mean())
    return out


@pytest.mark.parametrize("kind", seq.SPENDING)
def test_error_rates_by_simulation(kind: str):
    rng = np.random.default_rng(30)
    margin = 1.0  # in units of the seed-to-seed sd of the paired differences
    null = _rates(0.0, margin, kind, rng)
    assert null["better"] + null["worse"] <= 0.055, null  # false better/worse, no true difference
    assert null["continue"] == 0 and null["equivalent"] > 0.35  # it stops, and finds the equivalence (0.69 / 0.42)
    for true in (margin, -margin):  # at the margin: equivalence is false
        edge = _rates(true, margin, kind, rng)
        assert edge["equivalent"] <= 0.055, edge
    big = _rates(2.0, margin, kind, rng)  # 2 sd: found, in the right direction (lower is better), early
    assert big["worse"] > 0.9 and big["better"] == 0 and big["seeds"] < LOOKS[-1]


def test_looking_at_the_fixed_level_every_time_is_what_this_prevents():
    """The naive design, each look at 5%: false positives and false equivalence above 5.5%."""
    rng = np.random.default_rng(31)
    diffs = rng.normal(0.0, 1.0, (DRAWS, LOOKS[-1]))
    flagged = np.zeros(DRAWS, dtype=bool)
    for n in LOOKS:
        flagged |= scipy_stats.ttest_1samp(diffs[:, :n], 0, axis=-1).pvalue < 0.05
    assert flagged.mean() > 0.055
    code, _ = seq.decide(diffs, 1.0, LOOKS)
    assert np.isin(code, [seq.BETTER, seq.WORSE]).mean() <= 0.055


def test_one_comparison_and_planning():
    rng = np.random.default_rng(32)
    decision = seq.sequential_verdict(list(rng.normal(0.0, 0.01, 10)), margin=0.05, looks=LOOKS)
    assert decision.verdict == "equivalent (±0.05)" and decision.seeds in LOOKS and decision.level > 0
    early = seq.sequential_verdict([0.1, 0.2], margin=0.05, looks=LOOKS)
    assert early.verdict == "continue" and early.seeds == 0
    worse = seq.sequential_verdict([1.0, 1.1, 0.9, 1.05, 0.95], margin=0.05, looks=LOOKS)
    assert worse.verdict == "worse" and worse.seeds == 5  # loss up: worse (n=3 cannot pass |t| > 48)
    n = seq.seeds_for_precision(sd=0.01, half_width=0.01)
    assert scipy_stats.t.ppf(0.975, n - 1) / math.sqrt(n) <= 1 < scipy_stats.t.ppf(0.975, n - 2) / math.sqrt(n - 1)
    assert n == 7
