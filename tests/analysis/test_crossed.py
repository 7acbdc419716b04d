"""The crossed seed x text interval (issue 34 item 1, ablate.analysis.crossed): it covers a new
seed and a new text, where a seed-only interval covers the seeds only; its difference is exactly
the difference of the runs' logged metrics; pairing the windows shrinks it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ablate.analysis.crossed import anova, crossed, unit_groups
from ablate.eval_units import Units


def simulate(rng, n: int, seeds: int, units: int, sd_seed: float, sd_text: float, sd_error: float) -> np.ndarray:
    """n sweeps of per-seed, per-unit differences with true mean 0 (the model of the module docstring)."""
    return (
        rng.normal(0, sd_seed, (n, seeds, 1))
        + rng.normal(0, sd_text, (n, 1, units))
        + rng.normal(0, sd_error, (n, seeds, units))
    )


@pytest.mark.parametrize(
    "sd_seed, sd_text, sd_error",
    [(1.0, 1.0, 1.0), (0.3, 1.0, 1.0), (1.0, 0.3, 1.0)],
    ids=["seed~text", "text dominates", "seed dominates"],
)
def test_crossed_interval_covers_a_new_seed_and_a_new_text(sd_seed, sd_text, sd_error):
    """3 seeds x 16 text units, both random: the 95% interval covers the truth in >= 93% of
    50,000 simulated sweeps (measured: 93.3%, 95.8%, 94.0%)."""
    z = simulate(np.random.default_rng(34), 50_000, 3, 16, sd_seed, sd_text, sd_error)
    mean, var, df, _, _ = anova(z)
    covered = np.abs(mean) <= stats.t.ppf(0.975, df) * np.sqrt(var)
    assert covered.mean() >= 0.93, covered.mean()


def test_a_seed_only_interval_misses_the_text():
    """What the crossed interval fixes: when the text varies more than the seeds (the ALiBi case of
    issue 34), the paired t interval over seeds covers the truth far less often than 95%."""
    z = simulate(np.random.default_rng(35), 50_000, 3, 16, 0.3, 1.0, 1.0)
    per_seed = z.mean(-1)
    se = per_seed.std(-1, ddof=1) / math.sqrt(3)
    covered = np.abs(per_seed.mean(-1)) <= stats.t.ppf(0.975, 2) * se
    assert covered.mean() < 0.91, covered.mean()  # measured: 0.89


def test_anova_matches_the_variance_components_by_hand():
    z = np.array([[1.0, 2.0, 4.0, 3.0], [2.0, 2.5, 5.0, 3.5], [0.5, 2.0, 3.0, 3.5]])
    n_s, n_t = z.shape
    grand = z.mean()
    ms_s = n_t * sum((z[i].mean() - grand) ** 2 for i in range(n_s)) / (n_s - 1)
    ms_t = n_s * sum((z[:, j].mean() - grand) ** 2 for j in range(n_t)) / (n_t - 1)
    ms_e = sum((z[i, j] - z[i].mean() - z[:, j].mean() + grand) ** 2 for i in range(n_s) for j in range(n_t)) / (
        (n_s - 1) * (n_t - 1)
    )
    mean, var, df, got_s, got_t = (float(x) for x in anova(z))
    assert mean == pytest.approx(grand) and got_s == pytest.approx(ms_s) and got_t == pytest.approx(ms_t)
    assert var == pytest.approx(max(ms_s + ms_t - ms_e, ms_s, ms_t) / (n_s * n_t))
    if ms_s + ms_t - ms_e >= max(ms_s, ms_t):
        combined = ms_s + ms_t - ms_e
        assert df == pytest.approx(combined**2 / (ms_s**2 / 2 + ms_t**2 / 3 + ms_e**2 / 6))


def units(nats: np.ndarray, block: np.ndarray, text: str = "k") -> Units:
    n = len(nats)
    return Units(
        np.arange(n),
        nats.astype(np.float32),
        np.full(n, 64, dtype=np.int32),
        np.full(n, 64, dtype=np.int32),
        block.astype(np.int16),
        text,
    )


def test_the_difference_is_the_difference_of_the_logged_metrics():
    rng = np.random.default_rng(0)
    windows, block = 64, np.repeat(np.arange(4), 16)
    difficulty = rng.gamma(4.0, 30.0, windows)  # shared by both variants: cancels when paired
    base = {s: units(difficulty + rng.normal(0, 3, windows), block) for s in (1, 2, 3)}
    var = {s: units(difficulty - 5 + rng.normal(0, 3, windows), block) for s in (1, 2, 3)}
    result = crossed(var, base, "test/bpb", margin=10.0)
    bpb = {
        k: [u.nats.astype(float).sum() / (u.bytes.sum() * math.log(2)) for u in arm.values()]
        for k, arm in (("v", var), ("b", base))
    }
    assert result.diff == pytest.approx(np.mean(bpb["v"]) - np.mean(bpb["b"]), rel=1e-9)
    assert result.n_seeds == 3 and result.n_units == 16 and result.seeds == (1, 2, 3)
    assert result.low < result.diff < result.high and result.p < 0.05
    # pairing: the texts' difficulty cancels, so the paired text SE is far below the unpaired one
    assert result.text_se < result.text_se_unpaired / 5
    assert result.half_width_unpaired > 3 * (result.high - result.diff)
    with pytest.raises(ValueError, match="different texts"):
        crossed(var, {**base, 3: units(difficulty, block, text="other")}, "test/bpb")
    with pytest.raises(ValueError, match="needs 2"):
        crossed({1: var[1]}, base, "test/bpb")


def test_text_units_are_contiguous_within_each_block():
    u = units(np.zeros(40), np.repeat(np.arange(4), 10))
    groups = unit_groups(u, 16)
    assert len(np.unique(groups)) == 16
    assert all(np.all(np.diff(groups[u.block == b]) >= 0) for b in range(4))  # runs of neighbouring windows
    assert set(groups[u.block == 0]) == {0, 1, 2, 3} and set(groups[u.block == 3]) == {12, 13, 14, 15}


def test_summarize_uses_the_crossed_interval_when_the_runs_saved_their_windows(tmp_path):
    """A sweep whose runs saved test_units.npz: the row's test is crossed, its Δ the logged
    metrics' difference, the seed and text SE in the table; a run without the file falls back
    to the paired t-test and the table says why."""
    from ablate.analysis.markdown import markdown_table
    from ablate.analysis.runs import load_sweep
    from ablate.analysis.tables import summarize
    from ablate.eval_units import write_units
    from helpers.sweeps import write_job

    rng = np.random.default_rng(1)
    difficulty = rng.gamma(4.0, 30.0, 64)
    index = 0
    for act, shift in (("gelu", 0.0), ("relu", 4.0)):
        for seed in (1, 2, 3):
            nats = difficulty + shift + rng.normal(0, 3, 64)
            bpb = nats.astype(np.float32).astype(float).sum() / (64 * 64 * math.log(2))
            job = write_job(tmp_path, index, [f"act={act}", f"seed={seed}"], "test/bpb", bpb)
            write_units(
                job / "test_units.npz",
                {
                    "": {
                        "index": np.arange(64),
                        "nats": nats,
                        "tokens": np.full(64, 64),
                        "bytes": np.full(64, 64),
                        "block": np.repeat(np.arange(4), 16),
                        "text": "k",
                    }
                },
                {"task": "lm"},
            )
            index += 1
    sweep = load_sweep(tmp_path)
    frame = summarize(sweep, "test/bpb", baseline="act=gelu", margin=0.01)
    relu = frame[frame["act"] == "relu"].iloc[0]
    assert relu["test"] == "crossed" and relu["text_blocks"] == 16 and relu["verdict"] == "worse"
    means = frame.set_index("act")["test/bpb final mean"]
    assert relu["diff"] == pytest.approx(means["relu"] - means["gelu"], rel=1e-6)
    assert relu["seed_se"] > 0 and relu["text_se"] > 0 and relu["text_se"] < relu["text_se_unpaired"]
    table = markdown_table(frame, sweep)
    assert "| seed SE | text SE |" in table and "crossed, seeds 1,2,3 x 16 text blocks" in table
    (tmp_path / "005" / "test_units.npz").unlink()  # relu, seed 3: no windows saved
    frame = summarize(load_sweep(tmp_path), "test/bpb", baseline="act=gelu")
    relu = frame[frame["act"] == "relu"].iloc[0]
    assert relu["test"] == "paired" and "no per-window losses for seed 3" in relu["inference"]
