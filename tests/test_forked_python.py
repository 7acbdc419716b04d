"""The integration tests' forked runs (tests/helpers/forked_python.py) behave as subprocesses do: the same
exit code, output, working directory, argv, environment and stdin, and death by a signal as -N."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import forked_python

pytestmark = pytest.mark.integration

SCRIPT = """
import os, sys
print("argv", sys.argv[1:], "cwd", os.getcwd(), "var", os.environ.get("FORKED_TEST_VAR"), "stdin", repr(sys.stdin.read()))
print("imported ablate before the script:", "ablate" in sys.modules, file=sys.stderr)
print("script dir first on sys.path:", sys.path[0] == os.path.dirname(os.path.abspath(__file__)), file=sys.stderr)
if sys.argv[1] == "signal":
    os.kill(os.getpid(), 15)
raise SystemExit(int(sys.argv[1]) if sys.argv[1].isdigit() else sys.argv[1])
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "script.py"
    path.write_text(SCRIPT)
    return path


def both(script: Path, arg: str, cwd: Path) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    env = {**os.environ, "FORKED_TEST_VAR": "x y"}
    cmd = [sys.executable, str(script), arg]
    kwargs = dict(cwd=cwd, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    return subprocess.run(cmd, **kwargs), forked_python.run(cmd, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("arg", ["0", "3", "a refusal", "signal"])
def test_a_forked_run_is_the_subprocess_run(script: Path, tmp_path: Path, arg: str) -> None:
    real, forked = both(script, arg, tmp_path)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert real.returncode == {"0": 0, "3": 3, "a refusal": 1, "signal": -signal.SIGTERM}[arg]
    assert f"cwd {tmp_path}" in forked.stdout and "var x y" in forked.stdout and "stdin ''" in forked.stdout
    assert "imported ablate before the script: False" in forked.stderr


def test_ablate_tests_fork_0_runs_real_subprocesses(script: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("ABLATE_TESTS_FORK", "0")
    assert not forked_python.forkable([sys.executable, str(script)])
