"""Console progress (ablate.callbacks.progress) and the end-of-run summaries (ablate.cli.console).

The end-to-end tests run train.py with stdout to a file, as under SLURM or nohup: stdout is not a
terminal, so ``callbacks.progress_bar.mode=auto`` must print plain-text lines, not Rich's bar."""

from __future__ import annotations

import io
import logging
import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
from lightning.pytorch.callbacks import RichProgressBar
from lightning.pytorch.callbacks.progress import ProgressBar

from ablate.callbacks.progress import TextProgress, progress_callback, wants_progress_bar
from ablate.cli.console import format_run_summary, format_sweep_summary, format_wall_time
from ablate.run.status import RunStatus
from helpers.fake_trainer import Clock, fake_trainer
from helpers.runs import TINY

STEP = re.compile(r"^step\s+(\d+)/(\d+) \(\s*\d+%\)  loss ", re.M)
VAL = re.compile(r"^val\s+(\d+)/(\d+) \(\s*\d+%\)  loss \d+\.\d{3}  ppl\s+\d+\.\d\d  elapsed \d+:\d\d$", re.M)
RICH_BAR = "\u2501"  # the heavy line Rich draws its bars with
ANSI = "\x1b["


def steps(pattern: re.Pattern, text: str) -> list[int]:
    return [int(m.group(1)) for m in pattern.finditer(text)]


# ----------------------------------------------------------------------------- the callback, driven


def drive(
    bar: TextProgress,
    trainer,
    clock: Clock,
    n_steps: int,
    seconds_per_step: float,
    accumulate: int = 1,
    end: bool = True,
) -> list[int]:
    """Runs ``n_steps`` optimiser steps through the hooks; returns the steps that got a line."""
    out = io.StringIO()
    bar.stream = out
    bar.on_train_start(trainer, None)
    for _ in range(n_steps):
        for micro in range(accumulate):
            clock.now += seconds_per_step / accumulate
            if micro == accumulate - 1:
                trainer.global_step += 1
            bar.on_train_batch_end(trainer, None, None, None, 0)
    if end:
        bar.on_train_end(trainer, None)
    return steps(STEP, out.getvalue())


def test_cadence_is_whichever_is_rarer():
    # 1 s per step, every 10 steps but at least 30 s apart: time is the rarer (the first multiple of
    # 10 at least 30 s after the previous line)
    clock = Clock()
    bar = TextProgress(every_n_steps=10, every_n_seconds=30, clock=clock)
    assert drive(bar, fake_trainer(), clock, 100, 1.0) == [1, 40, 70, 100]
    # 10 s per step: the step count is the rarer, every 10 steps
    clock = Clock()
    bar = TextProgress(every_n_steps=10, every_n_seconds=30, clock=clock)
    assert drive(bar, fake_trainer(), clock, 100, 10.0) == [1, *range(10, 101, 10)]
    # the last step has its line at its batch end (before the final validation), due or not
    clock = Clock()
    bar = TextProgress(every_n_steps=10, every_n_seconds=30, clock=clock)
    assert drive(bar, fake_trainer(max_steps=95), clock, 95, 1.0, end=False) == [1, 40, 70, 95]


def test_cadence_defaults_to_log_every_n_steps_and_counts_optimiser_steps():
    clock = Clock()
    bar = TextProgress(every_n_seconds=0, clock=clock)  # every_n_steps: the trainer's log_every_n_steps
    # 4 micro-batches per optimiser step: still one line per 25 optimiser steps, never one per batch
    assert drive(bar, fake_trainer(max_steps=100, log_every_n_steps=25), clock, 100, 1.0, accumulate=4) == [
        1,
        25,
        50,
        75,
        100,
    ]


def test_last_line_when_stopped_early():
    clock = Clock()
    bar = TextProgress(every_n_steps=10, every_n_seconds=0, clock=clock)
    assert drive(bar, fake_trainer(max_steps=100), clock, 37, 1.0) == [1, 10, 20, 30, 37]  # e.g. diverged


def test_line_content_and_alignment():
    clock = Clock()
    trainer = fake_trainer(max_steps=1500)
    bar = TextProgress(every_n_steps=10, every_n_seconds=0, clock=clock)
    out = io.StringIO()
    bar.stream = out
    bar.on_train_start(trainer, None)
    for step, metrics in ((1, {}), (120, {"val/loss": 2.4012})):
        trainer.global_step, clock.now = step, clock.now + 41
        trainer.callback_metrics.update(metrics)
        bar.on_train_batch_end(trainer, None, None, None, 0)
    trainer.callback_metrics.update({"val/ppl": 11.034, "val/bleu": 23.456})
    bar.on_validation_end(trainer, None)
    first, second, val = out.getvalue().splitlines()
    assert second == ("step   120/1500 (  8%)  loss 2.500  val 2.401  lr 1.0e-03  17.1k tok/s  elapsed 1:22  eta 15:43")
    assert [first.index(f) for f in ("loss", "val", "lr", "tok/s", "elapsed", "eta")] == [
        second.index(f) for f in ("loss", "val", "lr", "tok/s", "elapsed", "eta")
    ]  # aligned columns
    assert first.startswith("step     1/1500 (  0%)")
    assert val == "val    120/1500 (  8%)  loss 2.401  ppl   11.03  bleu 23.46  elapsed 1:22"
    # not rank zero: nothing
    trainer.is_global_zero = False
    trainer.global_step = 1500
    bar.on_train_batch_end(trainer, None, None, None, 0)
    assert len(out.getvalue().splitlines()) == 3


def test_progress_callback_modes(monkeypatch):
    monkeypatch.setattr(sys, "stdout", SimpleNamespace(isatty=lambda: True))
    assert isinstance(progress_callback("auto"), RichProgressBar)
    monkeypatch.setattr(sys, "stdout", io.StringIO())  # a file: not a terminal
    text = progress_callback("auto", every_n_steps=5, every_n_seconds=2)
    assert isinstance(text, TextProgress) and (text.every_n_steps, text.every_n_seconds) == (5, 2.0)
    assert isinstance(progress_callback("bar"), RichProgressBar)
    monkeypatch.setattr(sys, "stdout", SimpleNamespace(isatty=lambda: True))
    assert isinstance(progress_callback("text"), TextProgress)
    with pytest.raises(ValueError, match="mode"):
        progress_callback("tqdm")
    with pytest.raises(ValueError, match="every_n_steps"):
        TextProgress(every_n_steps=0)


def test_lightning_takes_the_text_progress_as_its_bar():
    text = TextProgress()
    trainer = L.Trainer(
        callbacks=[text],
        enable_progress_bar=wants_progress_bar([text]),
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    assert trainer.progress_bar_callback is text
    assert [cb for cb in trainer.callbacks if isinstance(cb, ProgressBar)] == [text]  # no Rich/TQDM added
    # no progress callback configured: the flag is False and Lightning adds none
    assert not wants_progress_bar([])
    trainer = L.Trainer(
        callbacks=[],
        enable_progress_bar=wants_progress_bar([]),
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
    )
    assert trainer.progress_bar_callback is None
    assert wants_progress_bar([RichProgressBar()])


# ----------------------------------------------------------------------------- summaries

COMPLETED = {
    "status": "completed",
    "diverged_at_step": None,
    "divergence_reason": None,
    "steps": 1500,
    "wall_time_s": 3723.4,
    "params": 10_000,
    "metrics": {
        "train/loss": 1.2,
        "val/loss": 1.471234,
        "val/ppl": 4.35449,
        "test/loss": 1.48213,
        "test/ppl": 4.40255,
        "test/loss@512": 1.5,
        "grad_norm/total": 0.3,
    },
}


def test_format_run_summary_completed():
    text = format_run_summary(RunStatus.from_json(COMPLETED), Path("logs/runs/x"))
    assert text.splitlines() == [
        "run completed",
        "  steps      1500",
        "  wall time  1:02:03",
        "  val/loss   1.4712",
        "  val/ppl    4.35",
        "  test/loss  1.4821",
        "  test/ppl   4.40",
        "  output     logs/runs/x",
    ]


def test_a_test_metric_on_the_validation_text_says_so():
    """data.splits=nanogpt: test/* grades the validation text again; the summary must not read as two measurements."""
    reason = "data.splits=nanogpt: Tiny Shakespeare's test split is its validation text"
    text = format_run_summary(RunStatus.from_json({**COMPLETED, "test_is_validation": reason}), "out")
    assert re.search(r"test/loss\s+1\.4821  \(the validation text\)$", text, re.M)
    assert re.search(r"val/loss\s+1\.4712$", text, re.M) and f"test text  {reason}" in text


def test_format_run_summary_other_outcomes():
    diverged = {
        "status": "diverged",
        "diverged_at_step": 23,
        "divergence_reason": "loss 41.2 > 10 x first loss",
        "steps": 23,
        "wall_time_s": 5.0,
        "metrics": {"val/loss": None, "val/bleu": 12.345},
    }
    text = format_run_summary(RunStatus.from_json(diverged), "out")
    assert "run diverged" in text and "at step 23: loss 41.2 > 10 x first loss" in text
    assert re.search(r"val/loss\s+-$", text, re.M) and re.search(r"val/bleu\s+12\.35$", text, re.M)
    assert re.search(r"wall time\s+0:00:05$", text, re.M)
    crashed = {"status": "crashed", "error": "RuntimeError: boom\nsecond line", "traceback": "...", "overrides": []}
    text = format_run_summary(RunStatus.from_json(crashed), "out")
    assert text.splitlines()[:2] == ["run crashed", "  error      RuntimeError: boom"]
    assert re.search(r"steps\s+-$", text, re.M) and re.search(r"output\s+out$", text, re.M)
    assert format_run_summary(
        RunStatus.from_json({"status": "interrupted", "steps": 7, "wall_time_s": 61}), "o"
    ).splitlines() == [
        "run interrupted",
        "  steps      7",
        "  wall time  0:01:01",
        "  output     o",
    ]
    text = format_run_summary(
        RunStatus.from_json({"status": "interrupted", "error": "KeyboardInterrupt before the end of a training step"}),
        "o",
    )
    assert "  reason     KeyboardInterrupt before the end of a training step" in text.splitlines()


def test_format_sweep_summary():
    rows = [
        {**COMPLETED, "job": Path("/logs/multirun/s/norm=pre,pos=learned")},
        {
            "status": "diverged",
            "steps": 23,
            "wall_time_s": 5,
            "metrics": {"val/loss": None},
            "output_dir": "/logs/multirun/s/norm=post,pos=learned",
        },
        {"status": "crashed", "overrides": ["norm=post", "pos=rope"]},
    ]
    assert format_sweep_summary(rows).splitlines() == [
        "job                    status     steps  val/loss  wall time",
        "norm=pre,pos=learned   completed   1500    1.4712    1:02:03",
        "norm=post,pos=learned  diverged      23         -    0:00:05",
        "norm=post,pos=rope     crashed        -         -          -",
        "3 jobs: 1 completed, 1 diverged, 1 crashed",
    ]
    # translation: BLEU is the headline
    bleu = format_sweep_summary(
        [
            {
                "job": "a",
                "status": "completed",
                "steps": 5,
                "wall_time_s": 1,
                "metrics": {"val/loss": 2.0, "val/bleu": 27.1},
            }
        ]
    )
    assert bleu.splitlines()[0].split() == ["job", "status", "steps", "val/bleu", "wall", "time"]
    assert bleu.splitlines()[1].split()[3] == "27.10" and bleu.splitlines()[-1] == "1 job: 1 completed"
    assert format_wall_time(None) == "-" and format_wall_time(90061) == "25:01:01"


# ----------------------------------------------------------------------------- train.py, stdout to a file


def tiny(*overrides: str) -> list[str]:
    """TINY without its progress_bar=null and with these overrides in place of its own values."""
    keys = {o.split("=")[0].lstrip("+") for o in overrides}
    kept = [o for o in TINY if o.split("=")[0].lstrip("+") not in keys and not o.startswith("callbacks.progress_bar")]
    return [*kept, "logger=csv", *overrides]


RUN_60 = ("trainer.max_steps=60", "trainer.val_check_interval=20")


@pytest.mark.slow
def test_text_progress_when_stdout_is_a_file(run_train):
    # mode=auto (the default), stdout a pipe to a file: text lines every 20 steps, plus 1 and the last
    proc = run_train(
        *tiny(*RUN_60, "callbacks.progress_bar.every_n_steps=20", "callbacks.progress_bar.every_n_seconds=0")
    )
    out = proc.stdout
    assert steps(STEP, out) == [1, 20, 40, 60], out
    assert steps(VAL, out) == [20, 40, 60], out  # one line per validation, with its metrics
    assert all(int(m.group(2)) == 60 for m in STEP.finditer(out))
    last = [line for line in out.splitlines() if line.startswith("step")][-1]
    assert re.search(
        r"\(100%\)  loss \d\.\d{3}  val \d\.\d{3}  lr \d\.\de-0\d  +[\d.]+k? tok/s  elapsed \d+:\d\d  "
        r"eta 0:00$",
        last,
    ), last
    for stream in (proc.stdout, proc.stderr):
        assert RICH_BAR not in stream and ANSI not in stream and "Epoch 0" not in stream
    # the log starts with the run's header (no config tree) and ends with the summary block
    assert re.search(r"^run     experiment=default  task=lm  data=tinyshakespeare$", out, re.M)
    assert "├──" not in out  # print_config=false: no config tree
    lines = out.rstrip().splitlines()
    tail = lines[len(lines) - 1 - lines[::-1].index("run completed") :]  # the summary (a test text line too)
    assert tail[0] == "run completed" and tail[1].split() == ["steps", "60"]
    assert tail[-1].startswith("  output     ") and re.search(r"^  val/loss   \d\.\d{4}$", "\n".join(tail), re.M)


@pytest.mark.slow
def test_text_progress_default_cadence(run_train):
    # defaults: every log_every_n_steps (TINY: 1) but at least 30 s apart -> a fast run prints its
    # first and last step only, besides the validations
    proc = run_train(*tiny(*RUN_60))
    lines = [line for line in proc.stdout.splitlines() if STEP.match(line)]
    minutes, seconds = re.search(r"elapsed (\d+):(\d\d)", lines[-1]).groups()
    if 60 * int(minutes) + int(seconds) < 30:  # a machine so slow that 30 s passed would print more
        assert steps(STEP, proc.stdout) == [1, 60], proc.stdout
        # in the order of the run: the last step, then its validation
        order = [
            (line.split()[0], int(line.split()[1].split("/")[0]))
            for line in proc.stdout.splitlines()
            if STEP.match(line) or VAL.match(line)
        ]
        assert order == [("step", 1), ("val", 20), ("val", 40), ("step", 60), ("val", 60)], proc.stdout
    assert steps(VAL, proc.stdout) == [20, 40, 60]
    assert RICH_BAR not in proc.stdout


@pytest.mark.slow
def test_progress_bar_null_prints_no_progress(run_train):
    # needs train.py to pass enable_progress_bar=wants_progress_bar(callbacks): else Lightning adds its bar
    proc = run_train(*tiny("callbacks.progress_bar=null"))
    for stream in (proc.stdout, proc.stderr):
        assert RICH_BAR not in stream and "Epoch 0" not in stream and "it/s" not in stream, stream
        assert not STEP.search(stream) and not VAL.search(stream)


@pytest.mark.slow
def test_mode_bar_forces_rich(run_train):
    proc = run_train(*tiny("callbacks.progress_bar.mode=bar"))
    assert RICH_BAR in proc.stdout and "train (max_steps=" in proc.stdout  # Rich's final bar, by steps
    assert "Epoch 0/-2" not in proc.stdout  # Lightning's own label when max_steps bounds training
    assert not STEP.search(proc.stdout) and not VAL.search(proc.stdout)


NOISE = (
    "litlogger",
    "LeafSpec",
    "was configured so 100%",
    "Epoch 0/-2",
    "Previous log files",
    "Traceback",
    "TPU available",
    "weights_only",
    "sync_dist",
    "`Trainer.fit` stopped: `max_steps=",
    # issue 31, on a GPU (checked with Lightning's own code below, as there is no GPU here)
    "set `torch.set_float32_matmul_precision",
    "LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES",
)


@pytest.mark.slow
def test_console_carries_none_of_the_known_noise(run_train):
    """Issue 12's noise list, on a run with the defaults that produced it (limit_val_batches: 1.0
    from conf/trainer/cpu.yaml, the Rich bar forced, a W&B offline run)."""
    proc = run_train(
        "model=tiny",
        "data.seq_len=16",
        "data.batch_size=4",
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "+trainer.limit_test_batches=2",
        "callbacks.progress_bar.mode=bar",
        "callbacks.throughput.peak_flops=1e12",
        fresh=True,  # a new interpreter: what the imports print is part of the console
    )
    console = proc.stdout + proc.stderr
    assert [n for n in NOISE if n in console] == []
    assert "run completed" in console
    # the W&B line names the offline run relative to where the command was typed (issue 35.9:
    # ~200 characters with the absolute path)
    wandb_line = next(line for line in console.splitlines() if line.startswith("W&B offline"))
    assert "wandb sync logs/runs/" in wandb_line and len(wandb_line) <= 125, wandb_line


def test_lightnings_gpu_lines_are_filtered(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture):
    """Lightning's own code, run as on one Ampere+ GPU with fp32 matmuls at "highest": its
    "set torch.set_float32_matmul_precision" tip and its ``LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES``
    line reach no handler once :func:`quiet_known_noise` is installed (as ``train.py`` does)."""
    import torch
    from lightning.fabric.accelerators import cuda as fabric_cuda
    from lightning.pytorch.accelerators import CUDAAccelerator

    from ablate.cli.console import quiet_known_noise

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(fabric_cuda, "_is_ampere_or_later", lambda *a: True)
    monkeypatch.setattr(torch, "get_float32_matmul_precision", lambda: "highest")

    def emitted() -> str:
        caplog.clear()
        with caplog.at_level("INFO"):
            fabric_cuda._check_cuda_matmul_precision.cache_clear()  # Lightning shows it once per process
            fabric_cuda._check_cuda_matmul_precision(torch.device("cuda", 0))
            CUDAAccelerator.set_nvidia_flags(0)
        return caplog.text

    names = ("lightning.pytorch.utilities.rank_zero", "lightning.fabric.utilities.rank_zero")
    loggers = [logging.getLogger(n) for n in (*names, "lightning.pytorch.accelerators.cuda")]
    before = [list(lg.filters) for lg in loggers]
    try:
        for lg in loggers:  # as Lightning leaves them (an earlier test in this process may have filtered them)
            lg.filters[:] = [f for f in lg.filters if not type(f).__module__.startswith("ablate.")]
        assert "Tensor Cores" in emitted() and "LOCAL_RANK: 0" in emitted()  # what Lightning prints unfiltered
        with warnings.catch_warnings():
            quiet_known_noise()
            assert "Tensor Cores" not in emitted() and "LOCAL_RANK" not in emitted()
    finally:  # this process's other tests see Lightning's loggers as they were
        for lg, filters in zip(loggers, before):
            lg.filters[:] = filters


def test_gpu_runs_set_the_matmul_precision_that_silences_the_tip():
    """``runtime.matmul_precision: auto`` (set before the Trainer exists): TF32 on CUDA, which keeps
    Lightning's tip away; exact fp32 on the CPU, so no CPU result changes."""
    from hydra import compose, initialize_config_dir

    from ablate.config.checks import matmul_precision

    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        assert matmul_precision(compose("train", overrides=["trainer=gpu"])) == "high"
        assert matmul_precision(compose("train", overrides=["trainer=fsdp"])) == "high"
        assert matmul_precision(compose("train")) == "highest"
        assert (
            matmul_precision(compose("train", overrides=["trainer=gpu", "runtime.matmul_precision=highest"]))
            == "highest"
        )
