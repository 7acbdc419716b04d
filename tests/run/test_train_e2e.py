"""End to end through train.py, as a user runs it: one multirun of four jobs, read back from the
local CSV and from the offline W&B runs."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from ablate.eval_units import read_units
from ablate.nn.flops import flops_per_token
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, TINY

pytestmark = pytest.mark.slow

SWEEP = ["-m", "norm=pre,post", "pos=sinusoidal,learned"]
EXPECTED_JOBS = {("pre", "sinusoidal"), ("pre", "learned"), ("post", "sinusoidal"), ("post", "learned")}
# every metric name the issue promises, per job (model/params at step 0, the rest during training)
PROMISED = [
    "train/loss",
    "train/ppl",
    "val/loss",
    "val/ppl",
    "train/lr",
    "train/tokens_per_sec",
    "grad_norm/total",
    "grad_norm/layer_00/attn",
    "grad_norm/layer_01/ffn",
    "grad_norm/layer_00/attn_norm",
    "grad_norm/embed",
    "model/params",
]


def job_dirs(log_dir: Path) -> dict[tuple[str, str], Path]:
    """The jobs of the one sweep under log_dir, keyed by their (norm, pos) axes."""
    sweeps = sorted((log_dir / "multirun").iterdir())
    assert len(sweeps) == 1, sweeps
    jobs = {}
    for d in sweeps[0].iterdir():
        if (d / "status.json").exists():
            axes = json.loads((d / "status.json").read_text())["axes"]
            jobs[(axes["norm"], axes["pos"])] = d
            # the directory is named by the job's overrides, not by a timestamp or index
            assert f"norm-{axes['norm']}" in d.name and f"pos-{axes['pos']}" in d.name
    return jobs


def read_csv(job: Path) -> list[dict[str, str]]:
    with open(job / "csv" / "metrics.csv") as f:
        return list(csv.DictReader(f))


def column(rows: list[dict[str, str]], key: str) -> list[float]:
    return [float(r[key]) for r in rows if r.get(key) not in (None, "")]


def test_multirun_csv(run_train, tmp_path):
    run_train(*SWEEP, *TINY, "logger=csv")
    jobs = job_dirs(tmp_path / "logs")
    assert set(jobs) == EXPECTED_JOBS
    for name, job in jobs.items():
        status = json.loads((job / "status.json").read_text())
        assert status["status"] == "completed" and status["steps"] == 6
        rows = read_csv(job)
        for key in PROMISED:
            assert column(rows, key), f"{name}: {key} never logged"
        # perplexity is exp of the mean NLL, logged together
        val_loss, val_ppl = column(rows, "val/loss"), column(rows, "val/ppl")
        assert val_ppl == pytest.approx([math.exp(v) for v in val_loss], rel=1e-5)
        # train/mfu = tokens/s x model FLOPs per token / peak (TINY fixes the peak at 1e12)
        fpt = flops_per_token(status["params"], 2, 32, 16)  # model=tiny: 2 layers, d=32; seq_len 16
        mfu_rows = [r for r in rows if r.get("train/mfu")]
        assert mfu_rows, f"{name}: train/mfu never logged"
        for r in mfu_rows:
            assert float(r["train/mfu"]) == pytest.approx(float(r["train/tokens_per_sec"]) * fpt / 1e12, rel=1e-4)
        # warmup is visible: the lr rises over the first steps
        lrs = column(rows, "train/lr")
        assert lrs[0] < 1e-3 and not (job / "wandb").exists()
        # each test window's NLL under its number (issue 34): their ratio is the logged test loss
        units = read_units(job / "test_units.npz")[0][""]
        assert units.index.tolist() == list(range(len(units))) and len(units) > 0
        assert units.nats.sum() / units.tokens.sum() == pytest.approx(status["metrics"]["test/loss"], rel=1e-4)


def test_multirun_wandb_offline(run_train, tmp_path):
    from ablate.tracking.wandb_reader import read_offline_run

    run_train(*SWEEP, *TINY, "logger=wandb")
    jobs = job_dirs(tmp_path / "logs")
    assert set(jobs) == EXPECTED_JOBS
    groups, ids = set(), set()
    for name, job in jobs.items():
        runs = sorted((job / "wandb").glob("offline-run-*"))
        assert len(runs) == 1, f"{name}: one W&B run per job, found {runs}"
        record = read_offline_run(runs[0])
        groups.add(record["group"])
        ids.add(runs[0].name)
        assert f"norm={name[0]}" in record["name"] and f"pos={name[1]}" in record["name"]
        assert record["config"]["axes"]["pos"] == name[1]
        logged = {k for row in record["history"] for k in row}
        assert set(PROMISED) <= logged, set(PROMISED) - logged
        val_ppl = [row["val/ppl"] for row in record["history"] if "val/ppl" in row]
        assert record["summary"]["val/ppl"] == pytest.approx(min(val_ppl))
        assert record["summary"]["status"] == "completed"
    assert len(groups) == 1 and None not in groups, "all jobs of a multirun share one W&B group"
    assert len(ids) == 4


def test_sweep_survives_divergence_and_crash(run_train, tmp_path):
    """One job diverges (huge lr, no clipping), two crash (an eval_seq_len longer than the validation
    split, found at data setup): both are recorded and the sweep still finishes its healthy job; it ends listing
    the crashed jobs, with exit code 1 (a divergence alone would be 0: it is a result, not a failure)."""
    proc = run_train(
        "-m",
        *TINY,
        "data.eval_seq_len=200000,16",
        "optim.lr=1e-3,1e4",
        "optim.grad_clip=null",
        "logger=csv",
        check=False,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "1 completed, 2 crashed, 1 diverged" in proc.stdout and proc.stdout.count("  crashed: ") == 2
    sweep = next((tmp_path / "logs" / "multirun").iterdir())
    statuses, dirs = {}, {}
    for job in sweep.iterdir():
        if (job / "status.json").exists():
            status = json.loads((job / "status.json").read_text())
            values = dict(o.split("=", 1) for o in status["overrides"])
            key = (values["data.eval_seq_len"] == "200000", float(values["optim.lr"]) > 1)
            statuses[key], dirs[key] = status, job
    assert len(statuses) == 4, proc.stdout[-2000:]
    assert statuses[(True, False)]["status"] == statuses[(True, True)]["status"] == "crashed"
    assert "too long" in statuses[(True, False)]["error"]
    assert statuses[(False, False)]["status"] == "completed"
    diverged = statuses[(False, True)]
    assert diverged["status"] == "diverged" and diverged["steps"] < 6, diverged
    rows = read_csv(dirs[(False, True)])
    assert column(rows, "diverged") == [1.0]


def test_checkpoint_generates(run_train, tmp_path):
    """A checkpoint carries its model and tokenizer: generate.py needs nothing else."""
    import subprocess
    import sys

    from helpers.runs import REPO

    run_train(*TINY, "logger=csv")
    ckpt = next((tmp_path / "logs" / "runs").glob("*/checkpoints/last.ckpt"))
    proc = forked_python.run(
        [
            sys.executable,
            str(REPO / "generate.py"),
            f"ckpt_path={ckpt}",
            "prompt=ROMEO:",
            "max_new_tokens=20",
            "num_samples=2",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    samples = [s for s in proc.stdout.split("\n" + "-" * 40 + "\n") if s]
    assert len(samples) == 2
    assert all(s.startswith("ROMEO:") and len(s) == len("ROMEO:") + 20 for s in samples), samples


def test_quick_run_overrides(run_train, tmp_path, data_dir):
    """Every override the README promises for quick runs is honoured."""
    sweep_dir = tmp_path / "my_sweep"
    run_train(
        "-m",
        "seed=1,2",
        f"hydra.sweep.dir={sweep_dir}",
        f"paths.data_dir={data_dir}",
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "trainer.limit_val_batches=1",
        "model.n_layers=1",
        "model.d_model=24",
        "model.n_heads=2",
        "data.seq_len=8",
        "data.batch_size=3",
        "optim.lr=5e-3",
        "optim.warmup_steps=0",
        "logger=csv",
        "+trainer.limit_test_batches=1",
        "trainer.log_every_n_steps=1",
        "callbacks.progress_bar=null",
        "print_config=false",
    )
    jobs = sorted(d for d in sweep_dir.iterdir() if (d / "status.json").exists())
    assert [d.name for d in jobs] == ["seed-1", "seed-2"]  # the constants are in the sweep's name
    losses = []
    for job in jobs:
        status = json.loads((job / "status.json").read_text())
        assert status["status"] == "completed" and status["steps"] == 4
        # 1 layer, d=24 (model=small: no linear biases), V=65 chars, 8 learned positions, tied head:
        # embed 65*24 + pos 8*24 + qkv 24*72 + out 24*24 + fc_in 24*96 + fc_out 96*24 + 3 LN * 48
        assert status["params"] == 1560 + 192 + 1728 + 576 + 2304 + 2304 + 3 * 48
        rows = read_csv(job)
        assert len(column(rows, "val/loss")) == 2  # validated at steps 2 and 4
        assert column(rows, "train/lr")[0] == pytest.approx(5e-3)  # no warmup: the peak from step 0
        losses.append(column(rows, "train/loss"))
    assert losses[0] != losses[1]  # the seed changed the run
