"""Analysis that survives damage (issue 32 items 2-4): a crashed, damaged or duplicated job, or a
rewritten .hydra/, never breaks or skews the table; user errors exit 2."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
import yaml

from ablate.analysis.commands import multiplier as multiplier_command
from ablate.analysis.commands import plot as plot_command
from ablate.analysis.commands import summarize as summarize_command
from ablate.analysis.runs import load_sweep
from ablate.analysis.tables import summarize
from helpers.sweeps import write_job, write_sweep


def test_a_job_that_crashed_before_timing_does_not_break_the_table(tmp_path: Path):
    sweep_dir = write_sweep(tmp_path, {"gelu": [3.0, 3.1], "relu": [3.2, 3.3]})
    crashed = write_job(tmp_path, 9, ["act=relu", "seed=3"], "val/loss", None, status="crashed")
    record = json.loads((crashed / "status.json").read_text())
    (crashed / "status.json").write_text(json.dumps({**record, "wall_time_s": None, "steps": None}))
    frame = summarize(load_sweep(sweep_dir), "val/loss", baseline="act=gelu")
    relu = frame[frame["act"] == "relu"].iloc[0]
    assert relu["crashed"] == 1 and relu["completed"] == 2 and relu["wall_time_s"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    "damage, file",
    [
        (lambda job: (job / "status.json").write_text('{"status": "completed\x01"}'), "status.json"),
        (lambda job: (job / "status.json").write_text("[1, 2]"), "status.json"),
        (lambda job: (job / "csv" / "metrics.csv").write_bytes(b""), "csv/metrics.csv"),
        (lambda job: (job / "csv" / "metrics.csv").write_bytes(bytes(range(256)) * 4), "csv/metrics.csv"),
    ],
    ids=["control character", "not an object", "0-byte metrics", "binary metrics"],
)
def test_a_damaged_job_is_left_out_with_a_note_naming_its_file(tmp_path: Path, capsys, damage, file):
    sweep_dir = write_sweep(tmp_path, {"gelu": [3.0, 3.1, 2.9], "relu": [3.6, 3.7, 3.5]})
    bad = sorted(p for p in sweep_dir.iterdir() if p.is_dir())[-1]  # relu, seed 3
    damage(bad)
    summarize_command.main(
        [str(sweep_dir), "--metric", "val/loss", "--baseline", "act=gelu", "--out", str(tmp_path / "o")]
    )
    captured = capsys.readouterr()
    notes = [line for line in captured.err.splitlines() if line.startswith("summarize.py: note: skipped (damaged)")]
    assert len(notes) == 1 and str(bad / file) in notes[0], captured.err
    assert "| relu | 1,2 | 2 |" in captured.out  # the other seeds still counted
    plot_command.main([str(sweep_dir), "--out", str(tmp_path / "figs")])
    assert "plot.py: note: skipped (damaged)" in capsys.readouterr().err


def test_two_sweeps_under_one_name_count_a_seed_once(tmp_path: Path, capsys):
    """`-m norm=pre,post sweep_name=shared` then `-m act=relu,gelu sweep_name=shared`: the norm=pre
    job and the act=gelu job are the same run (defaults elsewhere, seed 1337)."""
    config = {"data": {"batch_size": 4}, "norm": {"placement": "pre"}, "act": {"name": "gelu"}, "seed": 1337}
    runs = [
        (["norm=pre"], {**config}),
        (["norm=post"], {**config, "norm": {"placement": "post"}}),
        (["act=relu"], {**config, "act": {"name": "relu"}}),
        (["act=gelu"], {**config}),
    ]
    for index, (overrides, cfg) in enumerate(runs):
        write_job(tmp_path, index, overrides, "val/loss", 3.0 + index / 10, config=cfg)
    sweep = load_sweep(tmp_path)
    assert len(sweep.jobs) == 3 and len(sweep.notes) == 1
    assert "003: the same run as 000 (same configuration and seed 1337): counted once" in sweep.notes[0]
    frame = summarize(sweep, "val/loss")
    assert frame["seeds"].tolist() == [1, 1, 1]  # never "n=2, ± 0" from one run counted twice


def test_identity_is_what_the_run_recorded_not_a_rewritten_hydra_dir(tmp_path: Path):
    """A refused later command rewrote .hydra/ of a finished run (n_layers 3, seed 99): the
    analysis reads the run's own record (status.json's overrides, csv/hparams.yaml)."""
    write_sweep(tmp_path, {"gelu": [3.0, 3.1]})
    job = sorted(p for p in tmp_path.iterdir() if p.is_dir())[0]
    record = json.loads((job / "status.json").read_text())
    (job / "status.json").write_text(json.dumps({**record, "overrides": ["act=gelu", "seed=1"]}))
    (job / "csv" / "hparams.yaml").write_text(yaml.safe_dump({"model": {"n_layers": 2}, "seed": 1}))
    old = time.time() - 100
    os.utime(job / "status.json", (old, old))
    (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(["act=gelu", "seed=99", "model.n_layers=3"]))
    (job / ".hydra" / "config.yaml").write_text(yaml.safe_dump({"model": {"n_layers": 3}, "seed": 99}))
    sweep = load_sweep(tmp_path)
    rewritten = next(j for j in sweep.jobs if j.source == str(job))
    assert rewritten.seed == 1 and rewritten.value("model.n_layers") == "2"
    assert sweep.axes == []  # one configuration, two seeds: not two variants


@pytest.mark.parametrize(
    "args, message",
    [
        (["--metric", "val/nope"], "--metric val/nope: no job"),
        (["--metric", "val/loss", "--baseline", "act=bogus"], "--baseline act=bogus: matches no configuration"),
    ],
)
def test_user_errors_exit_2(tmp_path: Path, capsys, args, message):
    sweep_dir = write_sweep(tmp_path / "s", {"gelu": [3.0, 3.1], "relu": [3.2, 3.3]})
    with pytest.raises(SystemExit) as exit_info:
        summarize_command.main([str(sweep_dir), *args, "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2 and message in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        plot_command.main([str(sweep_dir), "--metric", "val/nope", "--out", str(tmp_path / "f")])
    assert exit_info.value.code == 2 and "val/nope" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        multiplier_command.main([str(sweep_dir), "--baseline", "act=bogus", "--scale-key", "act"])
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit) as exit_info:
        summarize_command.main([str(tmp_path / "missing"), "--out", str(tmp_path / "o")])
    assert exit_info.value.code == 2 and "is not a directory" in capsys.readouterr().err
