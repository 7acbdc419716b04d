"""Exit codes as documented (ablate.cli): user errors 2 with their message and no traceback, crashes 1
with a traceback, interrupts 130."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ablate import cli
from ablate.errors import UserError
from helpers import forked_python
from helpers.runs import HANG_TIMEOUT, offline_env

REPO = Path(__file__).resolve().parents[2]


def _exit_code(fn, started: bool = True) -> int | str | None:
    cli._started = started
    try:
        cli.entry_point(fn)
    except SystemExit as exit_:
        return exit_.code
    finally:
        cli._started = False
    return 0


def test_user_error_exits_2_with_its_message_only(capsys, monkeypatch):
    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)

    @cli.task
    def main() -> None:
        raise UserError("data.foo=3 is invalid: choose 1 or 2")

    assert _exit_code(main) == cli.EXIT_USER_ERROR
    err = capsys.readouterr().err
    assert "data.foo=3 is invalid" in err and "Traceback" not in err


def test_a_refusal_by_message_exits_2(capsys):
    @cli.task
    def main() -> None:
        raise SystemExit("ckpt_path=x: no such checkpoint file")

    assert _exit_code(main) == cli.EXIT_USER_ERROR
    assert "no such checkpoint file" in capsys.readouterr().err


def test_a_crash_is_not_a_user_error():
    @cli.task
    def main() -> None:
        raise RuntimeError("a bug")

    with pytest.raises(RuntimeError):
        cli.entry_point(main)


def test_interrupt_exits_130():
    def main() -> None:
        raise KeyboardInterrupt

    assert _exit_code(main) == cli.EXIT_INTERRUPTED


def test_hydra_composition_error_exits_2_but_a_crashed_sweep_exits_1():
    def hydra_fails() -> None:
        raise SystemExit(1)  # what Hydra does after printing a composition error

    assert _exit_code(hydra_fails, started=False) == cli.EXIT_USER_ERROR
    assert _exit_code(hydra_fails, started=True) == cli.EXIT_CRASHED


@pytest.mark.integration
@pytest.mark.parametrize(
    ("script", "args", "message"),
    [
        ("train.py", ["pos=bogus"], "pos=bogus is not an option of pos"),
        ("train.py", ["-m", "pos=rope,bogus"], "pos=bogus is not an option of pos"),
        ("train.py", ["-m", "model.n_heads=3,4"], "not divisible by model.n_heads=3"),
        ("train.py", ["data=multi30k", "data.splits=disjoint"], "'data.splits' is a key of data=tinyshakespeare only"),
        ("train.py", ["-m", "data=multi30k", "data.splits=disjoint,nanogpt"], "is a key of data=tinyshakespeare only"),
        (
            "train.py",
            ["data=text", "data.train_path=/nonexistent/train.txt", "data.val_path=/nonexistent/val.txt"],
            "looked for it at /nonexistent/train.txt",
        ),
        ("train.py", ["ckpt_path=/nonexistent/last.ckpt"], "no such checkpoint file"),
        ("eval.py", ["ckpt_path=/nonexistent/best.ckpt"], "no such checkpoint file"),
    ],
)
def test_user_errors_of_the_entry_points_exit_2_without_traceback(tmp_path, script, args, message):
    env = offline_env(tmp_path)
    extra = ["debug=fdr", "logger=csv"] if script == "train.py" else []
    proc = forked_python.run(
        [sys.executable, str(REPO / script), *args, *extra],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=HANG_TIMEOUT,
    )
    assert proc.returncode == cli.EXIT_USER_ERROR, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert message in proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    # nothing left: no run folder, no log file, no crashed record (the missing-data error, found
    # while the data module is built, wrote a crashed record with a traceback)
    assert not [p for p in (tmp_path / "logs").rglob("*") if p.is_file()], list((tmp_path / "logs").rglob("*"))
