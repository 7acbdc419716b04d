"""The replay of successive halving on a finished full-grid ``tune=lr`` sweep
(``scripts/halving_replay.py``, :mod:`benchmarks.lr_selection.halving_replay`), on a synthetic sweep
whose jobs are written as train.py leaves them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from benchmarks.lr_selection.halving_replay import replay_sweep


def write_job(root: Path, lr: str, seed: int, curve: dict[int, float], status: str = "completed", steps: int = 8):
    """A full-grid stage-1 job as train.py leaves it: overrides, config, status and a metrics.csv
    whose step s holds the validation after s + 1 optimiser steps."""
    job = root / f"act=gelu,optim.lr={lr},seed={seed}"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["act=gelu", f"optim.lr={lr}", f"seed={seed}"]))
    config = {"seed": seed, "trainer": {"max_steps": steps, "val_check_interval": 2}, "optim": {"lr": float(lr)}}
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump(config))
    final = curve[max(curve)] if status == "completed" else None
    (job / "status.json").write_text(json.dumps({"status": status, "metrics": {"val/loss": final}}))
    (job / "csv").mkdir()
    with open(job / "csv" / "metrics.csv", "w") as f:
        f.write("epoch,step,val/loss\n" + "".join(f"0,{s - 1},{v}\n" for s, v in sorted(curve.items())))


def synthetic_sweep(root: Path) -> None:
    """Five rates: 0.008 starts slowly and is the best at the end; 0.016 is the best at step 2 and
    diverges at step 3. Halving at 2 and 4 of 8 keeps 0.016 and 0.004 at step 2, 0.004 at step 4
    (0.016 diverged: last), and chooses 0.004, one grid step from the full grid's 0.008."""
    curves = {
        "0.001": {2: 3.0, 4: 2.8, 6: 2.7, 8: 2.6},
        "0.002": {2: 2.6, 4: 2.4, 6: 2.3, 8: 2.2},
        "0.004": {2: 2.5, 4: 2.3, 6: 2.2, 8: 2.1},
        "0.008": {2: 2.7, 4: 2.5, 6: 2.1, 8: 2.0},
    }
    for lr, curve in curves.items():
        write_job(root, lr, 0, curve)
    write_job(root, "0.016", 0, {2: 2.4}, status="diverged")
    write_job(root, "0.008", 1, {2: 2.7, 4: 2.5, 6: 2.1, 8: 2.05})  # stage 2: not part of the replay
    record = {
        "variant": "all",
        "overrides": ["act=gelu"],
        "grid": [0.001, 0.002, 0.004, 0.008, 0.016],
        "chosen_lr": 0.008,
        "chosen_override": "optim.lr=0.008",
    }
    tuning = {"metric": "val/loss", "key": "optim.lr", "selection_seed": 0, "seeds": [1], "variants": [record]}
    (root / "lr_tuning.json").write_text(json.dumps(tuning))


def test_replay_on_a_synthetic_full_grid(tmp_path):
    synthetic_sweep(tmp_path)
    (row,) = replay_sweep(tmp_path, [0.25, 0.5])
    assert (row.full_choice, row.halving_choice, row.steps_apart) == ("0.008", "0.004", 1)
    assert row.steps == (2, 4, 8)
    assert row.compute_fraction == pytest.approx((5 * 2 + 2 * 2 + 1 * 4) / 40)  # 0.45
    out = {t.text: (t.eliminated_at, [r.value for r in t.rungs]) for t in row.tracks}
    assert out == {
        "0.001": (2, [3.0]),
        "0.002": (2, [2.6]),
        "0.004": (None, [2.5, 2.3, 2.1]),
        "0.008": (2, [2.7]),
        "0.016": (4, [2.4, None]),  # measured at step 2 before it diverged, so it went on; diverged by step 4
    }
    assert [r.status for r in row.tracks[-1].rungs] == ["completed", "diverged"]
    # one rung at 3/4: every rate validated at step 6, so 0.008 (2.1) and 0.004 (2.2) go on; the same choice
    (late,) = replay_sweep(tmp_path, [0.75])
    assert (late.full_choice, late.halving_choice, late.steps_apart) == ("0.008", "0.008", 0)


def test_replay_refuses_a_rung_that_was_not_validated(tmp_path):
    synthetic_sweep(tmp_path)
    with pytest.raises(
        ValueError, match=r"step 3 \(0\.375 x 8\).* is not a validation step .*valid: 0\.25, 0\.5, 0\.75"
    ):
        replay_sweep(tmp_path, [0.375])  # refused from the configured trainer.val_check_interval
    for config in tmp_path.glob("*/.hydra/config.yaml"):  # without it, from the curves themselves
        values = yaml.safe_load(config.read_text())
        del values["trainer"]["val_check_interval"]
        config.write_text(yaml.safe_dump(values))
    with pytest.raises(ValueError, match=r"step 3 was not validated .*the steps that were: 2, 4, 6, 8"):
        replay_sweep(tmp_path, [0.375])
    with pytest.raises(ValueError, match=r"--rungs 0.5 0.25: give fractions"):
        replay_sweep(tmp_path, [0.5, 0.25])


def test_replay_script_prints_the_table_and_exits_2_on_a_bad_rung(tmp_path, capsys):
    synthetic_sweep(tmp_path)
    from benchmarks.lr_selection import halving_replay as script  # what scripts/halving_replay.py runs

    script.main([str(tmp_path), "--rungs", "0.25", "0.5"])
    out = capsys.readouterr().out
    assert "| all | 0.008 | 0.004 | 1 | 0.45 |" in out
    assert "0.004: 2.5000>2.3000>2.1000" in out and "0.001: 3.0000 out@2" in out
    with pytest.raises(SystemExit) as exit_:
        script.main([str(tmp_path), "--rungs", "0.375"])
    assert exit_.value.code == 2
    assert "step 3 (0.375 x 8) (all) is not a validation step" in capsys.readouterr().err
