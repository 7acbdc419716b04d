"""Issue 52 items 4 (messages), 6 and 7 on real commands (the fifth hostile round): every message is
about the actual cause (a file size limit is not a full disk, a text file is not an ablate
checkpoint, the key named is the key given), a value a config accepts is used as recorded or
refused before work naming the key, and tampered numbers are refused before generation or
evaluation."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from helpers.hostile_runs import WORDS
from helpers.runs import HANG_TIMEOUT, REPO, SHARED_DATA, offline_env

pytestmark = pytest.mark.integration


def run(script: str, args: list[str], where: Path, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """``python <script> args`` offline in ``where``, in a fresh interpreter (a file size limit, when
    given, is set in it alone)."""

    def limited() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    return subprocess.run(
        [sys.executable, str(REPO / script), *args],
        cwd=where,
        env=offline_env(where),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
        preexec_fn=limited,
    )


def refused(proc: subprocess.CompletedProcess, *messages: str) -> None:
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert all(m in proc.stderr for m in messages), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr


def test_a_file_size_limit_is_named_as_such_not_as_a_full_disk(tmp_path):
    """``ulimit -f 200`` while the token cache is built: the limit is named, with its remedy."""
    proc = run(
        "train.py",
        ["model=tiny", "trainer.max_steps=2", "logger=csv", f"paths.data_dir={SHARED_DATA}"],
        tmp_path,
        limit_bytes=200 * 1024,
    )
    refused(proc, "the file size limit (ulimit -f 200", "ulimit -f unlimited")
    assert "disk filled up" not in proc.stderr


@pytest.mark.parametrize("content", ["hello world, notes\n", "PK garbage\n"])
def test_a_text_file_given_as_a_checkpoint_is_not_an_ablate_checkpoint(tmp_path, content):
    """Not "needs a type ... which would run code" nor "corrupt or truncated": what the bytes of a
    text file make of the unpickler depends on its first letters; the file is simply not one."""
    notes = tmp_path / "notes.txt"
    notes.write_text(content)
    proc = run("scripts/average_checkpoints.py", [f"ckpts=[{notes},{notes}]", f"out={tmp_path / 'avg.ckpt'}"], tmp_path)
    refused(proc, f"{notes} is not an ablate checkpoint")
    assert "run code" not in proc.stderr and "corrupt" not in proc.stderr
    assert not (tmp_path / "avg.ckpt").exists()


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ("data.train_stride=-1", "data.train_stride=-1 is invalid"),  # was refused naming seq_len, after the data load
        ("data.train_stride=0", "data.train_stride=0 is invalid"),  # was null in effect, 0 in the record
        ("norm.eps=-1", "norm.eps=-1.0 is invalid: a positive finite number"),  # was "diverged at step 1", exit 0
        ("norm.eps=nan", "norm.eps=nan is invalid: a positive finite number"),
    ],
)
def test_a_value_the_run_cannot_use_is_refused_before_work_naming_its_key(tmp_path, override, named):
    proc = run("train.py", ["model=tiny", "trainer.max_steps=2", "logger=csv", "data=text", override], tmp_path)
    refused(proc, named)
    assert "Fitting" not in proc.stderr + proc.stdout  # before any data is read


def _huge(checkpoint: dict) -> None:
    """Every weight x1e30: finite, and out of any range a model computes in."""
    state = checkpoint["state_dict"]
    for name, value in state.items():
        if value.is_floating_point():
            state[name] = value * 1e30  # a new tensor: tied weights are scaled once


@pytest.fixture(scope="module")
def huge(tmp_path_factory) -> Path:
    from helpers.checkpoints import lm_checkpoint, rewrite

    folder = tmp_path_factory.mktemp("huge")
    return rewrite(lm_checkpoint(folder / "good.ckpt"), folder / "huge.ckpt", _huge)


@pytest.mark.parametrize("script", ["generate.py", "eval.py"])
def test_finite_but_huge_weights_are_refused_before_generation_or_evaluation(huge, tmp_path, script):
    """Was: generate.py's torch error "probability tensor contains either inf, nan", eval.py's
    TypeError after writing its per-unit losses; export_hf.py refused it (the same check now)."""
    text = tmp_path / "text.txt"
    text.write_text("the cat sat on the mat\n" * 40)
    args = [f"ckpt_path={huge}", *(["max_new_tokens=5"] if script == "generate.py" else [f"text_file={text}"])]
    proc = run(script, args, tmp_path)
    refused(proc, f"{huge}: the model's logits on random tokens are not finite", "largest |weight| is")
    assert not list(huge.parent.glob("*.npz"))  # nothing evaluated, nothing written


@pytest.mark.parametrize("lr", ["1e300", "1e39"])
def test_an_absurd_learning_rate_is_refused_before_work(tmp_path, lr):
    """Was: 1e300 a traceback and a folder recorded crashed (the first update overflows float32)."""
    proc = run("train.py", ["model=tiny", "trainer.max_steps=2", "logger=csv", f"optim.lr={lr}"], tmp_path)
    refused(proc, f"optim.lr={float(lr):g} is invalid: a positive learning rate, at most 1e+06")
    assert not (tmp_path / "logs" / "runs").exists() or not any((tmp_path / "logs" / "runs").iterdir())


@pytest.mark.parametrize(
    ("override", "hint"),
    [
        ("norm=rmsnorm", "(did you mean norm.layer=rmsnorm?)"),  # an option of the group's other axis
        ("lr=1e-3", "(did you mean optim.lr?)"),  # a group's key at the top level
        ("+lr=1e-3", "(did you mean optim.lr?)"),
        ("eps=1e-5", "(did you mean norm.eps or optim.eps?)"),  # not difflib's "pos"
    ],
)
def test_a_cross_group_mistake_points_at_the_key_meant(tmp_path, override, hint):
    refused(run("train.py", ["model=tiny", override], tmp_path), hint)


def test_a_resume_from_another_runs_checkpoint_file_says_how_to_continue_that_run(tmp_path):
    """``ckpt_path=<run>/checkpoints/last.ckpt`` without ``hydra.run.dir`` silently started a new
    folder, recorded ``completed``: the run went on in two folders."""
    corpus = tmp_path / "T.txt"
    corpus.write_text("\n".join(" ".join(WORDS[(i + j) % len(WORDS)] for j in range(10)) for i in range(300)) + "\n")
    tiny = ["model=tiny", "data=text", f"data.train_path={corpus}", f"data.val_path={corpus}", "data.seq_len=16"]
    tiny += [
        "data.batch_size=4",
        "trainer.max_steps=4",
        "trainer.val_check_interval=2",
        "optim.warmup_steps=1",
        "logger=csv",
    ]
    first = run("train.py", [*tiny, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path)
    assert first.returncode == 0, first.stderr[-3000:]
    last = tmp_path / "run" / "checkpoints" / "last.ckpt"
    proc = run("train.py", [*tiny, f"ckpt_path={last}"], tmp_path)
    refused(
        proc, f"is a checkpoint of the run {tmp_path / 'run'}", "ckpt_path=last", f"hydra.run.dir={tmp_path / 'run'}"
    )
    runs = tmp_path / "logs" / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # no new folder, recorded or not
