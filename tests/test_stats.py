"""Statistics of the summary (CIs, t-tests, Holm, MDE, verdicts) and the effective compute multiplier.

The formulas are checked against scipy on fixed data; their behaviour (a planted effect is found,
a null one is flagged at the nominal rate, Holm holds the family-wise rate, a known multiplier is
recovered) on synthetic data drawn with fixed seeds; the scripts end to end on synthetic sweep
directories written here in the layout that :func:`ablate.analysis.runs.load_sweep` reads
(``status.json``, ``csv/metrics.csv``, ``.hydra/overrides.yaml`` and ``config.yaml``), so no
training run is needed.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from scipy import stats as scipy_stats

from ablate.analysis import stats
from ablate.analysis.runs import load_sweep
from ablate.analysis.scaling import Curve, PowerLaw, compute_multiplier, fit_power_law, multiplier, scaling_curves
from ablate.analysis.tables import find_baseline, markdown_table, summarize

from conftest import HANG_TIMEOUT, REPO

A = np.array([3.02, 2.95, 3.10, 3.04, 2.99])
B = np.array([3.11, 3.05, 3.12, 3.20, 3.08, 3.15])


# ----------------------------------------------------------------------------- against scipy, fixed data


def test_interval_is_the_student_t_interval():
    ci = stats.interval(list(A))
    low, high = scipy_stats.t.interval(0.95, len(A) - 1, loc=A.mean(), scale=scipy_stats.sem(A))
    assert (ci.mean, ci.std, ci.n) == (pytest.approx(A.mean()), pytest.approx(A.std(ddof=1)), 5)
    assert (ci.low, ci.high) == (pytest.approx(low), pytest.approx(high))
    reference = scipy_stats.ttest_1samp(A, 0).confidence_interval(0.95)
    assert (ci.low, ci.high) == (pytest.approx(reference.low), pytest.approx(reference.high))
    one = stats.interval([3.0, math.nan, math.inf])  # non-finite values (a blown-up run) are left out
    assert one.n == 1 and one.mean == 3.0 and math.isnan(one.low) and math.isnan(one.std)


def test_welch_when_seeds_do_not_pair():
    result = stats.compare(list(A), list(B), [1, 2, 3, 4, 5], [6, 7, 8, 9, 10, 11])
    reference = scipy_stats.ttest_ind(A, B, equal_var=False)
    ci = reference.confidence_interval(0.95)
    assert result.test == "welch" and result.n_pairs == 0
    assert result.p == pytest.approx(reference.pvalue, rel=1e-12)
    assert (result.low, result.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert result.diff == pytest.approx(A.mean() - B.mean())
    # Welch-Satterthwaite degrees of freedom, not the pooled n1 + n2 - 2
    va, vb = A.var(ddof=1) / len(A), B.var(ddof=1) / len(B)
    assert result.df == pytest.approx((va + vb) ** 2 / (va**2 / (len(A) - 1) + vb**2 / (len(B) - 1)))
    assert result.df != pytest.approx(len(A) + len(B) - 2)


def test_paired_on_the_shared_seeds():
    # seeds 2..5 shared (in another order on the baseline's side), seed 1 and 9 unpaired
    variant_seeds, baseline_seeds = [1, 2, 3, 4, 5], [5, 4, 3, 2, 9, 7]
    result = stats.compare(list(A), list(B), variant_seeds, baseline_seeds)
    pairs = [(A[variant_seeds.index(s)], B[baseline_seeds.index(s)]) for s in (2, 3, 4, 5)]
    v, b = np.array(pairs).T
    reference = scipy_stats.ttest_rel(v, b)
    ci = reference.confidence_interval(0.95)
    assert result.test == "paired" and result.n_pairs == 4
    assert result.p == pytest.approx(reference.pvalue, rel=1e-12)
    assert (result.low, result.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert result.diff == pytest.approx(np.mean(v - b))
    # a single shared seed is no pairing: Welch on everything
    assert stats.compare(list(A), list(B), [1, 2, 3, 4, 5], [5, 6, 7, 8, 9, 10]).test == "welch"
    # a diverged seed (NaN) does not pair: 2 finite pairs left
    assert stats.compare([1.0, math.nan, 2.5], [1.5, 2.0, 2.6], [1, 2, 3], [1, 2, 3]).n_pairs == 2


def test_untested_without_two_values_or_spread():
    assert not stats.compare([3.0], list(B)).tested
    flat = stats.compare([1.0, 2.0, 3.0], [2.0, 3.0, 4.0], [1, 2, 3], [1, 2, 3])  # identical differences
    assert not flat.tested and flat.se == 0
    assert stats.verdict(flat, math.nan, False) == "not tested (no seed spread)"


def test_holm_against_a_worked_example():
    # R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02
    assert stats.holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted = stats.holm([0.01, math.nan, 0.04, 0.5])  # untested: NaN, and not counted in m = 3
    assert adjusted[[0, 2, 3]] == pytest.approx([0.03, 0.08, 0.5]) and math.isnan(adjusted[1])
    assert stats.holm([0.2, 0.9]) == pytest.approx([0.4, 0.9])  # capped at 1 and monotone
    rows = np.array([[0.01, 0.04, 0.03, 0.005], [0.5, 0.01, 0.02, 0.04]])  # one family per row
    assert stats.holm(rows) == pytest.approx(np.array([stats.holm(r) for r in rows]))


def test_mde_is_the_effect_found_with_80_percent_power():
    rng = np.random.default_rng(0)
    n, draws = 5, 20000
    effect = stats.mde(1 / math.sqrt(n), n - 1)  # paired: seed-to-seed sd of the differences = 1
    assert stats.power_t(effect * math.sqrt(n), n - 1) == pytest.approx(0.8)
    found = scipy_stats.ttest_1samp(rng.normal(effect, 1.0, (draws, n)), 0, axis=-1).pvalue < 0.05
    assert found.mean() == pytest.approx(0.80, abs=0.02)
    # large df: the normal approximation (z_0.975 + z_0.8) se
    assert stats.mde(1.0, 1e6) == pytest.approx(scipy_stats.norm.ppf(0.975) + scipy_stats.norm.ppf(0.8), rel=1e-3)
    # Welch, 5 vs 5: at the nominal df 8 (the observed Welch df is at most 8, so a little less power)
    effect = stats.mde(math.sqrt(2 / n), 2 * n - 2)
    found = stats.t_test(rng.normal(effect, 1.0, (draws, n)), rng.normal(0, 1.0, (draws, n)), paired=False).pvalue < 0.05
    assert 0.74 <= found.mean() <= 0.82


# ----------------------------------------------------------------------------- detection and error rates


def test_three_std_effect_is_detected_with_five_seeds():
    """3 seed-std apart, 5 seeds each: found in nearly every draw (power 0.98 Welch, 0.94 paired
    on independent noise), in the right direction."""
    rng = np.random.default_rng(1)
    variant, baseline = rng.normal(3.0, 1.0, (2000, 5)), rng.normal(0.0, 1.0, (2000, 5))
    for paired in (False, True):
        result = stats.t_test(variant, baseline, paired)
        assert (result.pvalue < 0.05).mean() > 0.9
        assert (result.confidence_interval(0.95).low > 0).mean() > 0.9


def test_null_effect_is_flagged_at_the_nominal_rate_and_holm_holds_the_family():
    """Welch on independent seeds; paired on shared seeds with a common part per seed (the same
    data order), which Welch would wrongly count as noise: 2000 draws of a 3-variant sweep each."""
    rng = np.random.default_rng(2)
    draws, variants, n = 2000, 3, 5
    for paired in (False, True):
        seed_part = rng.normal(0, 1.0, (draws, 1, n)) if paired else 0.0
        baseline = seed_part + rng.normal(0, 0.5, (draws, 1, n))
        variant = seed_part + rng.normal(0, 0.5, (draws, variants, n))  # no true difference
        p = stats.t_test(variant, baseline, paired).pvalue
        assert 0.03 <= (p < 0.05).mean() <= 0.07  # per comparison
        family = (stats.holm(p) < 0.05).any(axis=-1).mean()
        assert family <= 0.07  # Holm: the chance that some variant is flagged stays at alpha ...
        assert (p < 0.05).any(axis=-1).mean() > 0.09  # ... which uncorrected p-values exceed


# ----------------------------------------------------------------------------- synthetic sweeps


def write_job(root: Path, index: int, overrides: list[str], metric: str, value: float | None, status: str = "completed",
              params: int = 1000, steps: int = 100, config: dict | None = None, metrics: pd.DataFrame | None = None) -> Path:
    """One job directory as train.py leaves it (the files the loader reads). ``metrics``: the
    whole ``metrics.csv`` (a ``step`` column and one per metric) instead of two rows of ``metric``
    (``value`` + 1 half-way, ``value`` at the end)."""
    job = root / f"{index:03d}"
    (job / ".hydra").mkdir(parents=True)
    (job / "csv").mkdir()
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    config_file = job / ".hydra" / "config.yaml"
    config_file.write_text(yaml.safe_dump(config or {"data": {"batch_size": 4, "seq_len": 16}}))
    os.utime(config_file, (1e9 + index, 1e9 + index))  # run order = index
    (job / "status.json").write_text(json.dumps({"status": status, "steps": steps, "params": params,
                                                 "wall_time_s": 1.0, "metrics": {}}))
    if metrics is not None:
        metrics.to_csv(job / "csv" / "metrics.csv", index=False)
        return job
    rows = [f"{steps // 2},{(value if value is not None else math.nan) + 1}"]
    rows += [f"{steps},{value}"] if value is not None else []
    (job / "csv" / "metrics.csv").write_text(f"step,{metric}\n" + "\n".join(rows) + "\n")
    return job


def write_sweep(root: Path, values: dict[str, list[float | None]], metric: str = "val/loss",
                diverged: dict[str, list[int]] | None = None) -> Path:
    """``{act: [value per seed]}``; seeds 1..n; ``diverged``: ``{act: [seed, ...]}`` (no final value)."""
    index = 0
    for act, seeds in values.items():
        for seed, value in enumerate(seeds, start=1):
            bad = seed in (diverged or {}).get(act, [])
            write_job(root, index, [f"act={act}", f"seed={seed}"], metric, None if bad else value,
                      "diverged" if bad else "completed")
            index += 1
    return root


def _row(frame: pd.DataFrame, act: str) -> pd.Series:
    return frame[frame["act"] == act].iloc[0]


@pytest.mark.parametrize("metric", ["val/loss", "val/bleu"])
def test_planted_effect_gets_the_right_verdict(tmp_path: Path, metric: str):
    rng = np.random.default_rng(3)
    seed_part = rng.normal(0, 1.0, 5)  # a seed's data order moves all variants alike

    def noise() -> np.ndarray:
        return seed_part + rng.normal(0, 0.5, 5)

    sd = math.sqrt(1.0**2 + 0.5**2)  # the seed-to-seed std of one variant
    values = {"gelu": 30 + noise(), "up": 30 + 3 * sd + noise(), "down": 30 - 3 * sd + noise(), "same": 30 + noise()}
    frame = summarize(load_sweep(write_sweep(tmp_path, {k: list(v) for k, v in values.items()}, metric)),
                      metric, baseline="act=gelu")
    higher = metric.endswith("bleu")
    assert _row(frame, "gelu")["verdict"] == "baseline"
    assert _row(frame, "up")["verdict"] == ("better" if higher else "worse")
    assert _row(frame, "down")["verdict"] == ("worse" if higher else "better")
    assert _row(frame, "same")["verdict"] == "no detectable difference"
    assert set(frame["test"].dropna()) == {"paired"} and (frame["pairs"].dropna() == 5).all()
    up = _row(frame, "up")
    assert up["diff_ci_low"] < up["diff"] < up["diff_ci_high"] and up["diff"] > 0
    same = _row(frame, "same")
    assert same["mde"] > abs(same["diff"]) and same["mde"] > 0


def test_holm_turns_two_borderline_results_into_no_difference(tmp_path: Path):
    """Two variants, each p = 0.03 on its own: Holm makes them 0.06, not significant at 0.05."""
    spread = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
    shift = scipy_stats.t.ppf(1 - 0.03 / 2, 4) * spread.std(ddof=1) / math.sqrt(5)  # paired t for p = 0.03
    base = np.array([3.0, 3.4, 2.8, 3.1, 2.9])
    frame = summarize(load_sweep(write_sweep(tmp_path, {"gelu": list(base), "a": list(base + shift + spread),
                                                        "b": list(base + shift + spread[::-1])})),
                      "val/loss", baseline="act=gelu")
    for act in ("a", "b"):
        row = _row(frame, act)
        assert row["p"] == pytest.approx(0.03) and row["p_holm"] == pytest.approx(0.06)
        assert row["verdict"] == "no detectable difference"


def test_divergence_counts_as_failure(tmp_path: Path):
    values = {"gelu": [3.0, 3.1, 2.9], "silu": [2.0, 2.1, 1.9], "tanh": [None, None, None]}
    frame = summarize(load_sweep(write_sweep(tmp_path, values, diverged={"silu": [2], "tanh": [1, 2, 3]})),
                      "val/loss", baseline="act=gelu")
    silu = _row(frame, "silu")
    assert silu["verdict"] == "worse (diverged 1/3)"  # better on its 2 surviving seeds, but it diverged
    assert silu["val/loss final n"] == 2 and silu["diff"] < 0  # the surviving seeds are still compared
    assert _row(frame, "tanh")["verdict"] == "worse (diverged 3/3)"
    sweep = load_sweep(tmp_path)
    assert "worse (diverged 1/3)" in markdown_table(frame, sweep)


def test_bad_baseline_lists_the_rows(tmp_path: Path):
    sweep = load_sweep(write_sweep(tmp_path, {"gelu": [3.0, 3.1], "relu": [3.2, 3.3]}))
    with pytest.raises(ValueError, match="act=gelu; act=relu"):
        find_baseline(sweep, "act=swiglu")
    with pytest.raises(ValueError, match="axis=value"):
        find_baseline(sweep, "gelu")


def _summarize_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "summarize.py"), *args], capture_output=True,
                          text=True, timeout=HANG_TIMEOUT, stdin=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.integration
def test_summarize_script_with_a_baseline(tmp_path: Path):
    sweep = write_sweep(tmp_path / "sweep", {"gelu": [3.0, 3.1, 2.9], "relu": [3.6, 3.75, 3.45], "swiglu": [2.8]})
    proc = _summarize_script(str(sweep), "--metric", "val/loss", "--baseline", "act=gelu", "--out", str(tmp_path / "out"))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("| act | seeds |")  # the summary table as before ...
    header = next(line for line in lines if "Δ vs baseline" in line)  # ... then the comparison
    for column in ("95% CI", "p (Holm)", "test", "MDE (80%)", "verdict"):
        assert column in header
    relu = next(line for line in lines if line.startswith("| relu |") and "paired" in line)
    assert relu.rstrip(" |").endswith("worse")
    swiglu = next(line for line in lines if line.startswith("| swiglu |") and "not tested" in line)
    assert swiglu.split(" | ")[3] == "—"  # 1 seed: no CI ...
    assert "No CI or test for act=swiglu: fewer than 2 completed seeds" in proc.stdout  # ... and why
    summary = pd.read_csv(tmp_path / "out" / "summary.csv")
    assert {"verdict", "p_holm", "mde", "val/loss final ci_low"} <= set(summary.columns) and len(summary) == 3

    bad = _summarize_script(str(sweep), "--metric", "val/loss", "--baseline", "act=swish", "--out", str(tmp_path / "o2"))
    assert bad.returncode != 0
    assert "act=swish" in bad.stderr and "act=gelu; act=relu; act=swiglu" in bad.stderr


# ----------------------------------------------------------------------------- compute multiplier

E_TRUE, ALPHA_TRUE = 1.5, 0.3
A_TRUE = 0.5 * 1e18**ALPHA_TRUE  # L - E = 0.5 at the largest compute: far from saturation
COMPUTES = np.geomspace(1e15, 1e18, 5)


def synthetic_curve(label: str, factor: float, rng: np.random.Generator, seeds: int = 3, sd: float = 0.002) -> Curve:
    """L(C) = E + A (factor C)^-alpha + seed noise: worth ``factor`` x the compute of ``factor=1``."""
    curve = Curve(label)
    for i, compute in enumerate(COMPUTES):
        for _ in range(seeds):
            curve.scale.append(f"s{i}"), curve.compute.append(float(compute))
            curve.loss.append(E_TRUE + A_TRUE * (factor * compute) ** -ALPHA_TRUE + rng.normal(0, sd))
    return curve


def test_power_law_fit_recovers_its_parameters():
    law = PowerLaw(E_TRUE, A_TRUE * 1e16**-ALPHA_TRUE, ALPHA_TRUE, 1e16)
    assert law.A == pytest.approx(A_TRUE)
    fit = fit_power_law(COMPUTES, law.loss(COMPUTES))
    assert (fit.E, fit.A, fit.alpha) == (pytest.approx(E_TRUE, rel=1e-4), pytest.approx(A_TRUE, rel=1e-3),
                                         pytest.approx(ALPHA_TRUE, rel=1e-4))
    assert law.compute_for(float(law.loss(3e17))) == pytest.approx(3e17) and law.compute_for(E_TRUE) == math.inf


def test_compute_multiplier_recovers_a_known_factor():
    rng = np.random.default_rng(4)
    baseline, variant = synthetic_curve("base", 1.0, rng), synthetic_curve("fast", 2.0, rng)
    result = compute_multiplier(variant, baseline, n_boot=200, seed=0)
    assert result.compute == COMPUTES[-1]  # at the largest measured compute
    assert result.value == pytest.approx(2.0, rel=0.05)
    assert result.low < 2.0 < result.high and result.high / result.low < 1.5 and result.failed_fits == 0
    again = compute_multiplier(variant, baseline, n_boot=200, seed=0)
    assert (again.low, again.high) == (result.low, result.high)  # a fixed rng: reproducible
    slow = compute_multiplier(synthetic_curve("slow", 0.5, rng), baseline, n_boot=0)
    assert slow.value == pytest.approx(0.5, rel=0.05)


def test_compute_multiplier_is_infinite_below_the_baselines_asymptote():
    baseline = PowerLaw(2.0, 1.0, 0.3, 1e16)
    variant = PowerLaw(1.5, 0.3, 0.3, 1e16)  # its loss at 1e16 (1.8) is below the baseline's E = 2.0
    assert multiplier(variant, baseline, 1e16) == math.inf


def test_compute_multiplier_refuses_fewer_than_three_scales():
    rng = np.random.default_rng(5)
    curve = synthetic_curve("base", 1.0, rng)
    keep = [i for i, s in enumerate(curve.scale) if s in ("s0", "s1")]
    short = Curve("short", {}, [curve.scale[i] for i in keep], [curve.compute[i] for i in keep],
                  [curve.loss[i] for i in keep])
    with pytest.raises(ValueError, match="needs >= 3 scales"):
        compute_multiplier(short, curve, n_boot=0)
    with pytest.raises(ValueError, match=">= 3 compute scales"):
        fit_power_law(np.array([1e15, 1e16]), np.array([3.0, 2.5]))


def write_scaling_sweep(root: Path, rng: np.random.Generator, scales: int = 4) -> Path:
    """act=gelu,swiglu x model=s0..s{scales-1} x seed=1,2,3; swiglu is worth 2x the compute; one
    swiglu seed of the largest model diverged."""
    index = 0
    steps, batch, seq, layers = 1000, 8, 64, 2
    for act, factor in (("gelu", 1.0), ("swiglu", 2.0)):
        for i in range(scales):
            params, d_model = 1e5 * 4**i, 16 * 2**i
            compute = (6 * params + 12 * layers * d_model * seq) * steps * batch * seq
            for seed in (1, 2, 3):
                loss = E_TRUE + 0.5 * (6 * 1e5 * 4 ** (scales - 1) * steps * batch * seq / (factor * compute)) ** 0.3
                bad = act == "swiglu" and i == scales - 1 and seed == 3
                write_job(root, index, [f"act={act}", f"model=s{i}", f"seed={seed}"], "val/loss",
                          None if bad else loss + rng.normal(0, 0.002), "diverged" if bad else "completed",
                          params=int(params), steps=steps, config={"model": {"n_layers": layers, "d_model": d_model},
                                                                   "data": {"batch_size": batch, "seq_len": seq}})
                index += 1
    return root


def test_scaling_curves_count_compute_and_failures(tmp_path: Path):
    sweep = load_sweep(write_scaling_sweep(tmp_path, np.random.default_rng(6)))
    curves = {c.label: c for c in scaling_curves(sweep, "model", "val/loss", "6N")}
    assert set(curves) == {"act=gelu", "act=swiglu"}
    assert curves["act=gelu"].compute[0] == 6 * 1e5 * 1000 * 8 * 64
    with_attention = scaling_curves(sweep, "model", "val/loss", "6N+attn")[0]
    assert with_attention.compute[0] == (6 * 1e5 + 12 * 2 * 16 * 64) * 1000 * 8 * 64
    assert curves["act=swiglu"].failed == {"s3": ["diverged"]} and len(curves["act=swiglu"].loss) == 11
    with pytest.raises(ValueError, match="not an axis"):
        scaling_curves(sweep, "model.d_model")
    with pytest.raises(ValueError, match="falls with compute"):
        scaling_curves(sweep, "model", "val/bleu")


def _multiplier_script(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "scripts" / "compute_multiplier.py"), *args], capture_output=True,
                          text=True, timeout=HANG_TIMEOUT, stdin=subprocess.DEVNULL, env={**os.environ, "OMP_NUM_THREADS": "1"})


@pytest.mark.integration
def test_compute_multiplier_script(tmp_path: Path):
    sweep = write_scaling_sweep(tmp_path / "sweep", np.random.default_rng(7))
    out = tmp_path / "out"
    proc = _multiplier_script(str(sweep), "--baseline", "act=gelu", "--scale-key", "model", "--flops", "6N",
                              "--bootstrap", "50", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "diverged 1" in proc.stdout and "largest measured compute" in proc.stdout
    result = pd.read_csv(out / "compute_multiplier.csv").iloc[0]
    assert result["variant"] == "act=swiglu" and result["multiplier"] == pytest.approx(2.0, rel=0.05)
    assert (out / "compute_multiplier.png").stat().st_size > 0

    short = write_scaling_sweep(tmp_path / "short", np.random.default_rng(8), scales=2)
    proc = _multiplier_script(str(short), "--baseline", "act=gelu", "--scale-key", "model", "--bootstrap", "0",
                              "--out", str(tmp_path / "o2"))
    assert proc.returncode != 0 and "needs >= 3 scales" in proc.stderr
    proc = _multiplier_script(str(sweep), "--baseline", "act=relu", "--scale-key", "model", "--out", str(tmp_path / "o3"))
    assert proc.returncode != 0 and "act=gelu; act=swiglu" in proc.stderr
