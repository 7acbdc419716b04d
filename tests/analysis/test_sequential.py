"""Seeds to a decision (ablate.analysis.sequential): the alpha spending and, by simulation over
4,000 sweeps per case, the error rates the design promises: no more than 5% false better/worse
when there is no difference, no more than 5% false equivalent at |Δ| = δ, whereas looking at the
fixed 5% level after every batch of seeds exceeds both."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as scipy_stats

from ablate.analysis import sequential as seq

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
    assert worse.verdict == "worse" and worse.seeds == 5  # loss up: worse (n=3 cannot pass the 0.00035 level)
    n = seq.seeds_for_precision(sd=0.01, half_width=0.01)
    assert scipy_stats.t.ppf(0.975, n - 1) / math.sqrt(n) <= 1 < scipy_stats.t.ppf(0.975, n - 2) / math.sqrt(n - 1)
    assert n == 7
