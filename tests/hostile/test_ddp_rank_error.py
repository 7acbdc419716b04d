"""Issue 52 item 4, its DDP bullet (the fifth hostile round): when one rank of a CPU DDP job crashes,
the others fail on their next collective ("Connection closed by peer"). The record, the console and
the job's log said only rank 0's gloo error; the crashed rank's own error appeared nowhere. Now the
first rank to fail is named first, with its error, then every other failed rank's."""

from __future__ import annotations

import json

import pytest

from helpers.hostile_runs import command

pytestmark = pytest.mark.integration

DDP = [
    "model=tiny",
    "data.seq_len=16",
    "data.batch_size=8",
    "trainer.max_steps=8",
    "trainer.val_check_interval=4",
    "trainer.limit_val_batches=2",
    "+trainer.limit_test_batches=2",
    "optim.warmup_steps=2",
    "callbacks.progress_bar=null",
    "print_config=false",
    "logger=csv",
    "trainer=ddp",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
]


def test_a_crash_in_rank_1_is_named_in_the_record_the_console_and_the_log(tmp_path, data_dir):
    run = tmp_path / "run"
    crash = ["+callbacks.crash._target_=helpers.signal_at_step.CrashAtStep", "+callbacks.crash.step=2"]
    args = [*DDP, *crash, "+callbacks.crash.rank=1", f"paths.data_dir={data_dir}", f"hydra.run.dir={run}"]
    proc = command("train.py", args, tmp_path)
    assert proc.returncode == 1, proc.stderr[-4000:]
    first = "rank 1 failed: RuntimeError: injected crash at step 2"
    record = json.loads((run / "status.json").read_text())
    assert record["status"] == "crashed" and record["error"].startswith(first), record["error"]
    assert "RuntimeError: injected crash at step 2" in record["traceback"]
    assert first in proc.stderr, proc.stderr[-4000:]
    assert first in (run / "train.log").read_text()
