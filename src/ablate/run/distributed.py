"""How many processes a job trains with, how the global batch is split over them, and how a job's
processes are started: one process group per job, started by PyTorch's elastic launcher.

Why not Lightning's default DDP launcher: it starts ranks 1..N-1 by re-running ``sys.argv``, which
under a Hydra multirun is the whole sweep, and rank 0 keeps ``LOCAL_RANK``/``WORLD_SIZE``, so its
later jobs pair up with a child's copy of the sweep. Instead the job hands its resolved config to
``elastic_launch`` (``torchrun --standalone``), whose N processes alone get ``RANK``/``WORLD_SIZE``
(Lightning's ``TorchElasticEnvironment``); the Hydra process never joins a process group, so each
job runs once, with one output directory and one W&B run, and a failed rank is recorded as a crash.

Stop signals belong to the job, not to the elastic agent (which would SIGKILL the ranks, losing
the step and the checkpoint): while the ranks run, :class:`StopRelay` passes the first one on to
every rank, which stop after an agreed step, save it and return (:mod:`ablate.callbacks.interrupt`;
the job is recorded ``interrupted``, exit 130); a second one ends the ranks at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import multiprocessing
import os
import signal
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from ablate.cli import EXIT_INTERRUPTED, EXIT_USER_ERROR
from ablate.errors import UserError

# strategies with which Lightning starts the processes itself, inside fit (spawn/fork)
_SELF_SPAWNING = ("ddp_spawn", "ddp_fork", "ddp_notebook", "spawn", "fork")


def devices_per_node(trainer_cfg: Mapping[str, Any]) -> int:
    """The processes per node the Trainer runs, from ``trainer.devices`` (an int, ``"0,1"``, a list,
    ``-1``/``"auto"``) and ``trainer.accelerator``, as Lightning reads them."""
    devices = trainer_cfg.get("devices", "auto")
    accelerator = str(trainer_cfg.get("accelerator", "auto")).lower()
    if isinstance(devices, str):
        text = devices.strip()
        if "," in text:
            return len([d for d in text.split(",") if d.strip()])
        devices = int(text) if text.lstrip("-").isdigit() else text
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        return len(devices)
    if devices in ("auto", -1):
        gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and _cuda_available())
        import torch

        return max(1, torch.cuda.device_count()) if gpu else 1
    return int(devices)


def world_size(trainer_cfg: Mapping[str, Any]) -> int:
    return devices_per_node(trainer_cfg) * int(trainer_cfg.get("num_nodes", 1) or 1)


def batch_layout(global_batch: int, micro_batch: int | None, world: int) -> tuple[int, int]:
    """``(per-device batch, accumulation steps)`` of a global batch over ``world``; ``micro_batch`` caps it."""
    if global_batch % world:
        raise ValueError(
            f"data.batch_size={global_batch} (the global batch) is not divisible by the world size {world} "
            f"(trainer.devices x trainer.num_nodes). Choose a global batch that is a multiple of {world}."
        )
    per_device = global_batch // world
    micro = micro_batch or per_device
    if micro < 1 or per_device % micro:
        raise ValueError(
            f"data.micro_batch_size={micro_batch} does not divide the per-device batch {per_device} "
            f"(data.batch_size={global_batch} / world size {world}); gradient accumulation needs a whole number "
            "of micro-batches per device."
        )
    return micro, per_device // micro


def global_rank() -> int:
    """This process's rank from the launcher's environment (0 when not launched as a rank)."""
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        if key in os.environ:
            return int(os.environ[key])
    return 0


def launched_externally() -> bool:
    """A launcher (torchrun, our own launch, SLURM tasks, Lightning's) started this process as a rank."""
    from lightning.fabric.plugins.environments import SLURMEnvironment, TorchElasticEnvironment

    if TorchElasticEnvironment.detect() or "LOCAL_RANK" in os.environ:
        return True
    return SLURMEnvironment.detect() and int(os.environ.get("SLURM_NTASKS", "1")) > 1


def needs_launch(trainer_cfg: Mapping[str, Any]) -> bool:
    """Whether this job must start its own processes (see the module docstring)."""
    strategy = trainer_cfg.get("strategy", "auto")
    if isinstance(strategy, Mapping):
        if str(strategy.get("start_method", "popen")) != "popen":
            return False
    elif str(strategy) in _SELF_SPAWNING:
        return False
    return devices_per_node(trainer_cfg) > 1 and not launched_externally()


def start_method() -> str:
    """``spawn`` (CUDA-safe) with CUDA; ``fork`` on CPU, which saves re-importing torch (~10 s a job)."""
    return "spawn" if _cuda_available() else "fork"


def _cuda_available() -> bool:
    import torch  # here: a job's config is checked (every job of a sweep) before torch is imported

    return torch.cuda.is_available()


def launch(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    nprocs: int,
    method: str | None = None,
    stop_file: Path | None = None,
) -> Any:
    """Run ``fn(*args)`` (importable) in ``nprocs`` new processes forming one process group on this
    node, as ``torchrun --standalone``; returns rank 0's value. ``stop_file``: the sweep's stop
    request, written by the first stop signal."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    options: dict[str, Any] = {}
    if "signals_to_handle" in LaunchConfig.__dataclass_fields__:  # torch >= 2.9
        # the stop signals are the job's (StopRelay); the agent keeps SIGQUIT, which ends everything
        options["signals_to_handle"] = "SIGQUIT"
    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=nprocs,
        run_id=f"{RUN_ID_PREFIX}{uuid.uuid4().hex[:12]}",
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",  # a free port, as torchrun --standalone
        max_restarts=0,
        monitor_interval=0.5,
        start_method=method or start_method(),
        **options,
    )
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    with StopRelay(stop_file), quiet_agent_failures(), crash_notes() as notes:
        try:
            return elastic_launch(config, fn)(*args)[0]
        except ChildFailedError as err:
            failure = rank_failure(err, notes)
        if isinstance(failure, RankCrashed) and failure.rank_traceback:
            print(failure.rank_traceback, file=sys.stderr, flush=True)  # the rank's, once
        raise failure from None


@contextmanager
def quiet_agent_failures() -> Iterator[None]:
    """Silence the agent's 40-line traceback of a failed rank: :func:`launch` reports the rank's own."""
    agent = logging.getLogger("torch.distributed.elastic.multiprocessing.api")
    level = agent.level
    agent.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        agent.setLevel(level)


CRASH_NOTES = "ABLATE_CRASH_NOTES"
RUN_ID_PREFIX = "ablate-"  # the elastic run id of the ranks launch() starts (TORCHELASTIC_RUN_ID)


class StopRelay:
    """While a job's ranks run, in the process that launched them: the first SIGINT, SIGTERM or
    SIGHUP is passed on to every rank; the second (or one before any rank exists) ends the ranks
    at once (SIGKILL) and raises ``KeyboardInterrupt`` here. SLURM's requeue signal is passed on
    as a requeue request, and the SIGTERM with which SLURM then ends the job is ignored."""

    def __init__(self, stop_file: Path | None = None) -> None:
        self.received: int | None = None
        self.requeue = False  # SLURM's requeue signal came
        self.stop_file = stop_file
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopRelay:
        import threading

        from ablate.callbacks.interrupt import relayed_signals

        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            self._previous = {signum: signal.signal(signum, self._handle) for signum in relayed_signals()}
        return self

    def __exit__(self, *exc: object) -> None:
        for signum, previous in self._previous.items():  # after a requeue, SLURM's SIGTERM may come late
            signal.signal(signum, signal.SIG_IGN if self.requeue and signum == signal.SIGTERM else previous)
        self._previous = {}

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        from ablate.callbacks.interrupt import REQUEUE_SIGNAL

        if signum == REQUEUE_SIGNAL:
            self._requeue(signum)
            return
        ranks = multiprocessing.active_children()  # the elastic agent starts them with multiprocessing
        if self.received is not None or not ranks:  # again, or before any rank exists (nothing trained): at once
            for rank in ranks:
                _send(rank.pid, signal.SIGKILL)
            raise KeyboardInterrupt
        self.received = signum
        name = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        self._stop_sweep(name)
        self._relay(
            ranks,
            signum,
            f"{name}: every rank stops after the same step and saves it (press Ctrl-C again to stop at once)",
        )

    def _requeue(self, signum: int) -> None:
        """SLURM's requeue signal: passed on once; SIGTERM ignored from now on (see the class)."""
        from ablate.callbacks.interrupt import requeue_slurm_job

        if self.requeue:
            return
        self.requeue = True
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        name = signal.Signals(signum).name
        self._stop_sweep(f"{name} (SLURM's requeue signal)")
        ranks = multiprocessing.active_children()
        if not ranks:  # before any rank exists: nothing to save; the job is requeued as it is
            requeue_slurm_job()
            raise KeyboardInterrupt
        self._relay(
            ranks,
            signum,
            f"{name} (SLURM's requeue signal): every rank stops after the same step and saves it, then the job "
            "is requeued",
        )

    @staticmethod
    def _relay(ranks: list[Any], signum: int, message: str) -> None:
        print(f"\n{message}", file=sys.stderr, flush=True)
        for rank in ranks:
            _send(rank.pid, signum)

    def _stop_sweep(self, why: str) -> None:
        if self.stop_file is not None:  # the sweep's other jobs stop too
            from ablate.callbacks.stop_file import request_stop

            request_stop(self.stop_file, f"{why} in a job")


def _send(pid: int | None, signum: int) -> None:
    if pid is not None:
        with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
            os.kill(pid, signum)


# ------------------------------------------------------- how a rank ends, told to the launching process

_EXIT_CODE_KEY = "ablate_exit_code"  # beside torchelastic's own fields in a rank's error file


class RankUserError(UserError):
    """A rank stopped on a user error (missing data, a bad data file, ...): its own message, exit 2."""


class RankInterrupted(KeyboardInterrupt):
    """A rank was interrupted outside a training step: exit 130, the job recorded as interrupted."""


class RankCrashed(RuntimeError):
    """A rank crashed: the first line of its error, its traceback in :attr:`rank_traceback`; exit 1."""

    def __init__(self, message: str, rank_traceback: str = "") -> None:
        super().__init__(message)
        self.rank_traceback = rank_traceback


def end_rank(err: BaseException, code: int) -> NoReturn:
    """End this rank with exit ``code``, ``err``'s message in torchelastic's error file, where the
    launching process reads it (:func:`rank_failure`) instead of a bare ``ChildFailedError``."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        message = str(err) if isinstance(err, UserError) else f"{type(err).__name__} in rank {global_rank()}"
        data = {
            "message": {
                "message": message,
                "extraInfo": {
                    "py_callstack": traceback.format_exc(),
                    "timestamp": str(int(time.time())),
                    _EXIT_CODE_KEY: code,
                },
            }
        }
        with open(error_file, "w") as f:
            json.dump(data, f)
    raise SystemExit(code)


@contextmanager
def crash_notes() -> Iterator[Path]:
    """A folder where each rank notes its crash as it happens (the agent stops the others unreported)."""
    previous = os.environ.get(CRASH_NOTES)
    with tempfile.TemporaryDirectory(prefix="ablate-crashes-") as folder:
        os.environ["ABLATE_CRASH_NOTES"] = folder  # the ranks inherit it (a literal: tests/test_process_state.py)
        try:
            yield Path(folder)
        finally:
            if previous is None:
                os.environ.pop(CRASH_NOTES, None)
            else:
                os.environ["ABLATE_CRASH_NOTES"] = previous


def note_crash(err: BaseException) -> None:
    """In a rank :func:`launch` started: its crash's error and traceback, for :func:`rank_failure`."""
    folder = os.environ.get(CRASH_NOTES)
    if folder and Path(folder).is_dir():
        note = {"message": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
        (Path(folder) / f"{global_rank()}.json").write_text(json.dumps(note))


def rank_failure(err: BaseException, notes: Path | None = None) -> BaseException:
    """A failed launch as the first failed rank's own error, with its exit code (:func:`end_rank`):
    a user error, an interrupt, or a crash (each failed rank's first line, also from ``notes``; one
    that failed only because a peer went away, :data:`PEER_GONE`, after the others)."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError

    if not isinstance(err, ChildFailedError):
        return err
    failed = sorted(err.failures.items(), key=lambda item: (_peer_went_away(_rank_error(item[1])[1]), item[0]))
    _, failure = failed[0]
    code, message, trace, _ = _rank_error(failure)
    if code == EXIT_USER_ERROR:
        return RankUserError(message)
    if code == EXIT_INTERRUPTED:
        return RankInterrupted(message)
    crashes = {r: (_first_line(f), _rank_error(f)[2]) for r, f in failed}
    for path in sorted(notes.glob("*.json")) if notes is not None else ():
        noted = json.loads(path.read_text())
        first = next((line for line in str(noted["message"]).splitlines() if line.strip()), "")
        crashes.setdefault(int(path.stem), (first, str(noted["traceback"])))  # stopped before it was reported
    order = sorted(crashes, key=lambda r: (_peer_went_away(crashes[r][0]), r))
    order = [r for i, r in enumerate(order) if crashes[r][0] not in (crashes[o][0] for o in order[:i])]  # said once
    lines = [
        f"rank {r} failed: {crashes[r][0]}" if i == 0 else f"then rank {r}: {crashes[r][0]}"
        for i, r in enumerate(order)
    ]
    traces = [f"rank {r}:\n{crashes[r][1]}" for r in order if crashes[r][1]] if len(order) > 1 else [trace]
    return RankCrashed("; ".join(lines), "\n".join(traces))


# what a rank says when another rank of its process group went away (gloo, NCCL): a consequence
PEER_GONE = ("closed by peer", "reset by peer", "remote worker crash", "Broken pipe", "communicator was aborted")


def _peer_went_away(message: str) -> bool:
    """The rank failed because another one did (its collective lost its peer)."""
    return any(sign in message for sign in PEER_GONE)


def _rank_error(failure: Any) -> tuple[int | None, str, str, bool]:
    """``(exit code the rank chose, message, traceback, recorded)`` of one rank's failure."""
    recorded: Any = failure.message  # the error file's JSON (torchelastic's stub says str)
    info: dict[str, Any] = recorded if isinstance(recorded, dict) else {"message": str(recorded or "")}
    extra: dict[str, Any] = info.get("extraInfo") or {}
    code = extra.get(_EXIT_CODE_KEY) if extra.get(_EXIT_CODE_KEY) == failure.exitcode else None
    return code, str(info.get("message", "")), str(extra.get("py_callstack", "")), bool(extra)


def _first_line(failure: Any) -> str:
    """One rank's failure in a line: a signal, its error's first line, or its exit code."""
    _, message, _, recorded = _rank_error(failure)
    if failure.exitcode < 0:
        return f"ended by signal {failure.signal_name()} (out of memory, or killed by another process)"
    if recorded:
        return next((line for line in message.strip().splitlines() if line.strip()), "")
    return f"exit code {failure.exitcode}, no error recorded"


def failure_message(err: BaseException) -> tuple[str, str]:
    """``(message, traceback)`` of a failed job's error for its record."""
    if isinstance(err, RankCrashed):
        return str(err), err.rank_traceback
    return f"{type(err).__name__}: {err}", ""


# ------------------------------------------------------- parallel single-GPU jobs on one node


def uses_one_gpu(trainer_cfg: Mapping[str, Any]) -> bool:
    """A job that trains on exactly one CUDA device, left for Lightning to pick (devices: 1)."""
    accelerator = str(trainer_cfg.get("accelerator", "auto")).lower()
    gpu = accelerator in ("gpu", "cuda") or (accelerator == "auto" and _cuda_available())
    return gpu and str(trainer_cfg.get("devices", "auto")) == "1" and int(trainer_cfg.get("num_nodes", 1) or 1) == 1


@contextmanager
def exclusive_gpu(n_gpus: int, lock_dir: str | os.PathLike[str] | None = None, poll_s: float = 2.0) -> Iterator[int]:
    """Hold the first free one of this node's ``n_gpus`` GPUs (a ``flock``, released even when the job
    is killed) for a job, so that parallel jobs get one each; waits while all are taken."""
    folder = Path(lock_dir or Path(tempfile.gettempdir()) / f"ablate-gpu-locks-{os.getuid()}")
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        for index in range(n_gpus):
            handle = open(folder / f"gpu{index}.lock", "w")  # noqa: SIM115 - held while the job runs
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            try:
                yield index
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
                handle.close()
            return
        time.sleep(poll_s)
