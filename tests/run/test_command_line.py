"""A command line is checked before Hydra runs (ablate.cli.check_command_line): our message first,
Hydra's advice to append a misspelt key never, every group strict (the top level too), every value of
its type, and no run folder for a refused command. The refusal imports neither torch nor Lightning."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, REPO, offline_env


def run_script(tmp_path: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    return forked_python.run(
        [sys.executable, str(REPO / script), *args],
        cwd=tmp_path,
        env=offline_env(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )


REFUSED = [
    # issue 35 item 7: ours first, no "+key" advice, no search-path block
    (["trainer.max_step=10"], "did you mean trainer.max_steps?"),
    (["norm=prenorm"], "norm=prenorm is not an option of norm (did you mean norm=pre?); options: deepnorm, post, pre"),
    (["-m", "norm=pre,prenorm"], "norm=prenorm is not an option of norm (did you mean norm=pre?)"),
    # issue 32 item 7: every group strict, the top level included, and the other task's model keys
    (["+foo=1"], "foo is not a key of the top level"),
    (["+logger.csv.foo=1"], "logger.csv is not a key of logger; valid keys: mlflow, tensorboard, wandb"),
    (["+debug.foo=1"], "debug is a config group: choose one of its options with debug=<name>"),
    (["+callbacks.foo.bar=1"], "callbacks.foo is not a callback of this run (it has no _target_"),
    (["+model.encoder_layers=6"], "model.encoder_layers is not a key of model"),
    (["+model.decoder_layers=6"], "model.decoder_layers is not a key of model"),
    (["task=translation", "+model.n_layers=6"], "model.n_layers is not a key of model"),
    # issue 32 item 8: every value's type, naming the key and the type
    (["model.n_layers=abc"], "model.n_layers='abc' has the wrong type: expected an integer"),
    (["model.n_layers=2.5"], "model.n_layers=2.5 has the wrong type: expected an integer"),
    (["model.n_heads=null"], "model.n_heads=null has the wrong type: expected an integer"),
    (["model.d_model=true"], "model.d_model=true has the wrong type: expected an integer"),
    (["trainer.precision=7"], "trainer.precision=7 is invalid: expected null or one of 64, 32, 16"),
    (["seed=abc"], "seed='abc' has the wrong type: expected an integer"),
    # issue 32 item 13: an override with '=' and ',' in its value: how to quote it, before Hydra's grammar error
    (
        ["ckpt_path=logs/multirun/s/seed=1,model.d_model=64/last.ckpt"],
        "ckpt_path=\"'logs/multirun/s/seed=1,model.d_model=64/last.ckpt'\"",
    ),
]


@pytest.mark.integration
@pytest.mark.parametrize(("args", "message"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_bad_command_line_is_refused_with_our_message_and_no_run_folder(tmp_path, args, message):
    proc = run_script(tmp_path, "train.py", *args, "logger=csv", "debug=fdr")  # fdr: one step where accepted
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert proc.stderr.startswith("error: ") and message in proc.stderr, proc.stderr
    assert "To append to your config" not in proc.stderr and "Config search path" not in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "logs").exists()  # refused before Hydra made a run folder


@pytest.mark.integration
def test_a_value_a_rule_refuses_exits_2_without_a_type_error(tmp_path):
    """optim.betas=0.9 (a number where two are due) crashed the check itself with a TypeError (len() of
    a float), exit 1; its rule now says what it takes (checked in the job: ablate.config.checks)."""
    proc = run_script(tmp_path, "train.py", "optim.betas=0.9", "logger=csv", "debug=fdr")
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "optim.betas=0.9 is invalid: two coefficients in [0, 1)" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.integration
@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("generate.py", ["ckpt_path=x.ckpt", "+foo=1"], "foo is not a key of the top level"),
        ("eval.py", ["ckpt_path=x.ckpt", "+foo=1"], "foo is not a key of the top level"),
        ("translate.py", ["ckpt_path=x.ckpt", "beam_sizee=2"], "did you mean beam_size?"),
    ],
)
def test_the_other_entry_points_refuse_unknown_keys_too(tmp_path, script, args, message):
    proc = run_script(tmp_path, script, *args)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert "To append to your config" not in proc.stderr


def test_sweep_jobs_to_check_cover_every_value_once():
    from ablate.cli import _job_overrides

    jobs = _job_overrides(["a=1,2", "b=x,y,z", "c=3", "lr=interval(0.1,1)"], multirun=True)
    assert jobs == [["a=1", "b=x", "c=3"], ["a=2", "b=x", "c=3"], ["a=1", "b=y", "c=3"], ["a=1", "b=z", "c=3"]]
    assert _job_overrides(["a=1"], multirun=False) == [["a=1"]]


def test_an_unknown_option_is_named_with_the_closest_one():
    from ablate.cli.unknown_key import unknown_option_message

    assert "did you mean norm=pre?" in unknown_option_message("norm/prenorm", ["deepnorm", "post", "pre", "sandwich"])
    assert "did you mean pos=rope?" in unknown_option_message("pos/ropee", ["alibi", "learned", "rope"])
