"""One inference engine for every verdict (issue 43 item 1, issue 51 item 2): the fixed design's
tests (crossed seed x block; worst-rank when a seed diverged), the words and the one family of
issue 43 item 5, and the planner of a fixed design. The simulations of their error rates are
tests/benchmark/test_verdicts.py."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from scipy import stats as scipy_stats

from ablate.analysis import stats
from helpers.verdict_sweeps import write_units_sweep


def test_equivalent_and_different_when_both_hold(tmp_path: Path):
    """Δ 0.0104 with a tiny spread and δ 0.03: 20535cc printed "equivalent (±0.03)", hiding a
    significant difference; both hold, and the verdict says both."""
    from ablate.analysis.runs import load_sweep
    from ablate.analysis.tables import summarize
    from helpers.sweeps import write_sweep

    base = [3.0, 3.1, 2.9, 3.05]
    sweep = load_sweep(
        write_sweep(tmp_path, {"gelu": base, "relu": [b + 0.0104 + e for b, e in zip(base, (0, 1e-4, -1e-4, 2e-4))]})
    )
    row = summarize(sweep, "val/loss", baseline="act=gelu", margin=0.03).set_index("act").loc["relu"]
    assert row["p_holm"] < 1e-3 and row["p_tost_holm"] < 0.05
    assert row["verdict"] == "equivalent (±0.03), and different (worse)"


def test_the_family_procedure_by_hand():
    """Holm's step-down counting open rows (Shaffer 1986): 3 rows, p0 = (0.001, 0.02, 0.6), p_tost
    = (0.9, 0.01, 0.03): step 1 (3 rows open) 0.001*3; step 2, row 3's 0.01... by hand below."""
    p0, pe = np.array([0.001, 0.02, 0.6]), np.array([0.9, 0.01, 0.03])
    a0, ae = stats.family_adjusted(p0, pe)
    # sorted: 0.001 (r0, H0), 0.01 (r1, HE), 0.02 (r1, H0), 0.03 (r2, HE), 0.6 (r2, H0), 0.9 (r0, HE)
    # rows with a hypothesis at or after each place: 3, 3, 3, 2, 2, 1
    assert a0 == pytest.approx([0.003, 0.06, 1.0]) and ae == pytest.approx([1.0, 0.03, 0.06])
    untested = stats.family_adjusted(np.array([0.01, np.nan]), np.array([np.nan, np.nan]))[0]
    assert untested[0] == pytest.approx(0.01) and math.isnan(untested[1])


def test_rows_asked_no_equivalence_leave_the_family_once_decided(tmp_path: Path):
    """Hopeless equivalence rows diluted the rest (issue 43: ALiBi's TOST p 0.05 -> 0.40 under Holm
    over 8 rows). With the equivalence question asked only of the rows it was meant for
    (--equivalence, declared in the plan), the decided differences leave the family."""
    from ablate.analysis.runs import load_sweep
    from ablate.analysis.tables import summarize
    from helpers.sweeps import write_sweep

    base = np.array([3.0, 3.1, 2.9, 3.05, 2.95])
    values = {"gelu": list(base)}
    for k in range(4):
        values[f"far{k}"] = list(base + 1.0 + 0.01 * np.array([1, -1, 2, -2, 0]) * (k + 1))
    values["near"] = list(base + 0.002 * np.array([1, -1, 2, -2, 0.5]))
    sweep = load_sweep(write_sweep(tmp_path, values))
    every = summarize(sweep, "val/loss", baseline="act=gelu", margin=0.02).set_index("act")
    only = summarize(sweep, "val/loss", baseline="act=gelu", margin=0.02, equivalence=("act=near",)).set_index("act")
    assert only.loc["near", "p_tost_holm"] < every.loc["near", "p_tost_holm"]
    assert math.isnan(only.loc["far0", "p_tost"]) and only.loc["far0", "verdict"] == "worse"


def test_the_worst_rank_p_is_the_exact_permutation_p():
    from ablate.analysis.divergence import worst_rank_test

    rng = np.random.default_rng(11)
    for _ in range(5):
        v, b = list(rng.normal(0, 1, 4)), list(rng.normal(0.5, 1, 5))
        p, _ = worst_rank_test(v, b, 1, 1, False)
        vv, bb = np.array([*v, math.inf]), np.array([*b, math.inf])

        def shift(x, y, axis=-1):
            r = scipy_stats.rankdata(np.concatenate([x, y], axis=axis), axis=axis)
            return r[..., : x.shape[axis]].mean(-1) - r[..., x.shape[axis] :].mean(-1)

        ref = scipy_stats.permutation_test(
            (vv, bb), shift, permutation_type="independent", vectorized=True, n_resamples=math.inf
        )
        assert p == pytest.approx(ref.pvalue)


def test_the_interval_is_one_for_the_mean_difference(tmp_path: Path):
    """Issue 43 item 5: "covers a new seed and a new text" read as a prediction interval; the docs
    and the table's legend call it what it is, an interval for the mean difference."""
    from helpers.runs import REPO

    docs = (REPO / "docs" / "analysis.md").read_text()
    assert "covers a new seed **and** a new text" not in docs and "interval for the **mean difference**" in docs
    assert "It is not a prediction interval" in docs

    from ablate.analysis.markdown import markdown_table
    from ablate.analysis.runs import load_sweep
    from ablate.analysis.tables import summarize

    write_units_sweep(tmp_path, {"gelu": 0.0, "relu": 0.3})
    sweep = load_sweep(tmp_path)
    legend = markdown_table(summarize(sweep, "test/loss", baseline="act=gelu"), sweep)
    assert "a 95% interval for the mean difference over seeds and held-out text" in legend
    assert "not a prediction for one new run" in legend


def test_the_planner_gives_the_seeds_whose_mde_is_delta():
    """Issue 51 item 2: the fixed design's planner. A paired test with seed SD 1 has at 10 seeds an
    MDE of stats.mde(1/sqrt(10), 9); from a 3-seed pilot with that SD the planner asks for 10 seeds.
    A text part that alone keeps the MDE above δ gets no seed count (hold out more blocks)."""
    delta = stats.mde(1 / math.sqrt(10), 9)
    assert stats.seeds_for(delta, 1 / math.sqrt(3), 0.0, 3) == 10
    assert stats.seeds_for(delta * 1.0001, 1 / math.sqrt(3), 0.0, 3) == 10  # the fewest: 9 would not do
    assert stats.seeds_for(2 * delta, 1 / math.sqrt(3), 0.0, 3) < 10
    assert stats.seeds_for(delta, 0.1, 2 * delta, 3, n_blocks=4) is None


def test_the_table_prints_the_planner_with_a_margin(tmp_path: Path):
    """The verdict table with a margin δ says how many seeds detect ±δ at each row's spread (the
    planner that replaces seeds=auto), and links to docs/analysis.md instead of a page of methods."""
    from ablate.analysis.markdown import markdown_table
    from ablate.analysis.runs import load_sweep
    from ablate.analysis.tables import summarize

    write_units_sweep(tmp_path, {"gelu": 0.0, "relu": 0.01})
    sweep = load_sweep(tmp_path)
    legend = markdown_table(summarize(sweep, "test/loss", baseline="act=gelu", margin=0.005), sweep)
    assert "Planner, seeds to detect ±0.005 (80%, α/m) at each row's spread: act=relu: " in legend
    assert "docs/analysis.md" in legend
