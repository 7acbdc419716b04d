"""A stand-in for ``srun`` on one node, for the SLURM tests: ``python srun.py OUT_DIR NTASKS CMD...``
starts NTASKS copies of CMD, each with its task's ``SLURM_PROCID``/``SLURM_LOCALID``, all in this
process's process group (which the caller makes a new one: what SLURM signals), waits for them and
writes each one's exit code, stdout and stderr to ``OUT_DIR/task<i>.{rc,out,err}``. Like ``srun``
it is not itself stopped by the signals meant for the tasks."""

import os
import signal
import subprocess
import sys
from pathlib import Path

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1)


def _defaults() -> None:
    """In a task, before it runs: the signals this process ignores back to their defaults (an
    ignored signal stays ignored across ``exec``)."""
    for signum in FORWARDED:
        signal.signal(signum, signal.SIG_DFL)


def main() -> None:
    out, ntasks, cmd = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    for signum in FORWARDED:
        signal.signal(signum, signal.SIG_IGN)
    out.mkdir(parents=True, exist_ok=True)
    tasks = []
    for rank in range(ntasks):
        env = {**os.environ, "SLURM_NTASKS": str(ntasks), "SLURM_PROCID": str(rank), "SLURM_LOCALID": str(rank)}
        with open(out / f"task{rank}.out", "w") as stdout, open(out / f"task{rank}.err", "w") as stderr:
            task = subprocess.Popen(
                cmd, env=env, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, preexec_fn=_defaults
            )
        tasks.append(task)
    for rank, task in enumerate(tasks):
        (out / f"task{rank}.rc").write_text(str(task.wait()))


if __name__ == "__main__":
    main()
