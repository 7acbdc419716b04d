"""A callback for the fault-injection tests: send this process a signal after a given optimiser
step, as a user's Ctrl-C (SIGINT) or a scheduler (SIGTERM) would. With ``once_file`` it fires only
if that file does not exist yet (and creates it), so re-running the same command is not
interrupted again."""

import os
import signal
import time
from pathlib import Path

from lightning.pytorch.callbacks import Callback


class SignalAtStep(Callback):
    def __init__(self, step: int, signum: int = int(signal.SIGINT), once_file: str | None = None) -> None:
        self.step, self.signum, self.once_file = step, signum, once_file

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        if self.once_file is not None:
            if Path(self.once_file).exists():
                return
            Path(self.once_file).touch()
        os.kill(os.getpid(), self.signum)


class CtrlCWhenAllTraining(Callback):
    """A terminal's Ctrl-C in a parallel sweep: every job touches ``<ready_dir>/<pid>`` at ``step``
    and waits there until ``jobs`` jobs have, then the first of them sends SIGINT to the whole
    process group (the sweep's main process and every worker), once."""

    def __init__(self, step: int, ready_dir: str, jobs: int) -> None:
        self.step, self.ready, self.jobs = step, Path(ready_dir), jobs

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        self.ready.mkdir(parents=True, exist_ok=True)
        (self.ready / str(os.getpid())).touch()
        while len(list(self.ready.glob("[0-9]*"))) < self.jobs:
            time.sleep(0.05)
        try:
            with (self.ready / "sent").open("x") as sent:  # exactly one job sends it
                sent.write(str(os.getppid()))  # the sweep's process: a re-run of the command is another
        except FileExistsError:
            self.after_another_fired()
            return
        self.fire()

    def fire(self) -> None:
        os.killpg(os.getpgid(0), signal.SIGINT)

    def after_another_fired(self) -> None:
        """Another job fired: go on (Ctrl-C reached this process too, which stops after its step)."""


class CrashAtStep(Callback):
    """A job that crashes while it runs (a bug's RuntimeError at ``step``), for the sweep-report tests;
    with ``rank``, in that rank alone (the others fail on their next collective)."""

    def __init__(self, step: int, rank: int | None = None) -> None:
        self.step, self.rank = step, rank

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step and self.rank in (None, trainer.global_rank):
            raise RuntimeError(f"injected crash at step {self.step}")


class DiskFullAtStep(Callback):
    """The disk fills up at optimiser step ``step``: from then on every write of a checkpoint named
    ``name`` fails as ``torch.save`` fails on a full disk (ENOSPC), and the checkpoint writer names
    it (a 1 MB tmpfs cannot be mounted everywhere the tests run)."""

    def __init__(self, step: int, name: str = "last.ckpt") -> None:
        self.step, self.name = step, name

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step:
            return
        import errno

        from ablate.callbacks import checkpointing

        save, name = checkpointing._save, self.name

        def full(checkpoint, f, path) -> None:
            if Path(path).name == name:
                raise OSError(errno.ENOSPC, "No space left on device")
            save(checkpoint, f, path)

        checkpointing._save = full


class KillOneWhenAllTraining(CtrlCWhenAllTraining):
    """The system's out-of-memory killer in a parallel sweep: every job waits at ``step`` until
    ``jobs`` jobs have reached it, then the first of them SIGKILLs itself, once (a re-run is not
    killed again: the ``sent`` file stays)."""

    def fire(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def after_another_fired(self) -> None:
        """Another worker of this sweep was killed: joblib SIGKILLs this one too once it sees the
        broken pool. Wait for that here, so that the job does not finish its last steps first (a race
        the test is not about); the jobs of a re-run (another sweep process) go on."""
        if (self.ready / "sent").read_text().strip() == str(os.getppid()):
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                time.sleep(0.1)


class SignalJobAtStep(Callback):
    """A DDP job's stop signal, sent by rank 0 after optimiser step ``step``: to the job's whole
    process group (``to="group"``: a terminal's Ctrl-C or a closed terminal's SIGHUP reaches the
    launching process and every rank) or to the launching process alone (``to="launcher"``: ``kill
    <pid>``, a container runtime's SIGTERM). Once per ``once_file``, as :class:`SignalAtStep`."""

    def __init__(self, step: int, signum: int = int(signal.SIGINT), to: str = "group", once_file: str | None = None):
        if to not in ("group", "launcher"):
            raise ValueError(f"to={to!r}: group or launcher")
        self.step, self.signum, self.to, self.once_file = step, signum, to, once_file

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step or not trainer.is_global_zero:
            return
        if self.once_file is not None:
            if Path(self.once_file).exists():
                return
            Path(self.once_file).touch()
        if self.to == "group":
            os.killpg(os.getpgid(0), self.signum)
        else:
            os.kill(os.getppid(), self.signum)  # the elastic agent runs in the launching process


class CtrlCTwice(Callback):
    """A user pressing Ctrl-C twice during a DDP job: rank 0 sends SIGINT to the job's process group
    after ``step``, then again a second later, then waits (the second one ends the ranks at once)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step or not trainer.is_global_zero:
            return
        os.killpg(os.getpgid(0), signal.SIGINT)
        time.sleep(1.0)
        os.killpg(os.getpgid(0), signal.SIGINT)
        time.sleep(120)
