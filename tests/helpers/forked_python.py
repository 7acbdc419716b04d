"""``python script.py ARGS`` for the integration tests, in a process forked from a server that has
already imported torch, Lightning and Hydra.

A fresh interpreter spends ~5 s importing those before ``train.py`` does anything (experiments/
benchmarks/README.md, "One job, launch to first training step"), and the suite starts a few hundred
runs: most of its time was interpreters starting. Here each run is a child of
:mod:`multiprocessing`'s fork server, a clean interpreter that imported :data:`PRELOAD` and nothing
else (not ``ablate``, not pytest), so the child starts at the script with a fresh ``ablate`` and
untouched libraries. The child gets the command's working directory, environment, argv, stdin
(``/dev/null``), stdout and stderr (files), its own session if asked, and exits with the script's
exit code (``-N`` when signal N ends it), like :func:`subprocess.run`.

What differs from a new interpreter: settings that the preloaded libraries read from the
environment *at import* come from the test process's environment (``scripts/test.sh``: one thread,
W&B and the Hub offline), not from the run's. A test that needs a fresh interpreter (it varies such a
variable, or tests start-up itself) uses :func:`subprocess.run`; the acceptance tier runs the README's
commands in real shells. ``ABLATE_TESTS_FORK=0`` runs every command as a real subprocess.
"""

from __future__ import annotations

import atexit
import io
import multiprocessing
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

# Not W&B: it makes its media folder (a temporary directory) at import and deletes it at exit, so
# forked children would share one folder and the first to exit would delete it under the others.
PRELOAD = ["torch", "lightning.pytorch", "hydra", "omegaconf", "numpy"]
_context: multiprocessing.context.ForkServerContext | None = None


def enabled() -> bool:
    return os.environ.get("ABLATE_TESTS_FORK", "1") != "0"


def _forkserver() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _context = context
    return _context


def _child(script: str, args: list[str], cwd: str, env: dict[str, str], out: str, err: str, session: bool) -> None:
    """In the forked process: become ``python script args`` and exit with its code."""
    if session:
        os.setsid()
    for fd, path, flags in ((0, os.devnull, os.O_RDONLY), (1, out, os.O_WRONLY), (2, err, os.O_WRONLY)):
        opened = os.open(path, flags)
        os.dup2(opened, fd)
        os.close(opened)
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdin = open(0, closefd=False)  # noqa: SIM115 (the process's own stdin, for its life)
    sys.stdout = io.TextIOWrapper(open(1, "wb", closefd=False), line_buffering=True, write_through=unbuffered)  # noqa: SIM115
    sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), line_buffering=True, write_through=True)  # noqa: SIM115
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.argv = [script, *args]
    extra = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[:0] = [str(Path(script).parent), *extra]
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exit_:
        if isinstance(exit_.code, str):
            print(exit_.code, file=sys.stderr)
            code = 1
        else:
            code = int(exit_.code or 0)
    except BaseException:
        traceback.print_exc()
        code = 1
    # what the interpreter runs at exit, in its order: threading's exit hooks (loky's: it shuts its
    # workers down) and joining non-daemon threads, then atexit (W&B, logging); then no teardown of
    # torch's modules, which is most of a real exit's time
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


class ForkedProcess:
    """A started ``python script args``: ``pid``, ``wait()``, ``returncode``, ``stdout``/``stderr``
    (the text it wrote, read after it ended), as far as the tests use :class:`subprocess.Popen`."""

    def __init__(self, cmd: Sequence[str], cwd: str | os.PathLike[str], env: Mapping[str, str], session: bool) -> None:
        self.args = list(cmd)
        self._dir = tempfile.TemporaryDirectory(prefix="forked-")
        self._out, self._err = Path(self._dir.name) / "stdout", Path(self._dir.name) / "stderr"
        self._out.touch()
        self._err.touch()
        self._process = _forkserver().Process(
            target=_child,
            args=(str(cmd[1]), [str(a) for a in cmd[2:]], str(cwd), dict(env), str(self._out), str(self._err), session),
        )
        self._process.start()
        self.pid = self._process.pid
        self.returncode: int | None = None
        self.stdout = self.stderr = ""

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        self.returncode = self._process.exitcode
        self.stdout = self._out.read_text(errors="replace")
        self.stderr = self._err.read_text(errors="replace")
        self._process.close()
        self._dir.cleanup()
        return self.returncode

    def kill(self) -> None:
        self._process.kill()


def forkable(cmd: Sequence[str]) -> bool:
    """``[sys.executable, "<file>.py", ...]``: a script this module can run."""
    return len(cmd) >= 2 and cmd[0] == sys.executable and str(cmd[1]).endswith(".py") and enabled()


def run(
    cmd: Sequence[str | os.PathLike[str]],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    start_new_session: bool = False,
    check: bool = False,
    fresh: bool = False,
    **kwargs: Any,
) -> subprocess.CompletedProcess[str]:
    """:func:`subprocess.run`, forked when it can be: a ``.py`` script run by this interpreter with
    ``capture_output=True, text=True`` and stdin from ``/dev/null`` (or not given). ``fresh``: a new
    interpreter all the same (a test of what a process prints or does while it starts)."""
    args = [str(c) for c in cmd]
    plain = kwargs.get("capture_output") is True and kwargs.get("text") is True
    plain = plain and set(kwargs) <= {"capture_output", "text", "stdin"}
    plain = plain and kwargs.get("stdin", subprocess.DEVNULL) == subprocess.DEVNULL
    if fresh or not (plain and forkable(args)):
        return subprocess.run(
            args, cwd=cwd, env=None if env is None else dict(env), timeout=timeout,
            start_new_session=start_new_session, check=check, **kwargs,
        )  # fmt: skip
    process = ForkedProcess(args, cwd or os.getcwd(), os.environ if env is None else env, start_new_session)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    result = subprocess.CompletedProcess(args, int(process.returncode or 0), process.stdout, process.stderr)
    if check:
        result.check_returncode()
    return result
