"""What a sweep costs beyond training: per-job start-up and evaluation, and sequential vs parallel.

Issue 10, section 6. Tuning and seeds multiply the number of runs by 10-20, so the time a job
spends outside its training steps becomes the user's wait. This script measures it with the real
``train.py``, in subprocesses, the way a user runs it:

1. **Start-up probe** (``--probe-runs``, default 2): single runs of ``train.py`` (one job, the first
   variant) in a child Python that timestamps each part of a job, from the launch of the process
   to its exit: interpreter, imports (torch, lightning, hydra, wandb, ablate), Hydra's compose,
   config checks, data (instantiate, ``prepare_data`` and its SHA-256 cache verify, ``setup``),
   model build, callbacks, loggers and the W&B init, Trainer build, Lightning's fit set-up (the
   callbacks' ``setup``: the CPU peak probe of ``callbacks.throughput.peak_flops=auto``), the first
   training step, the training loop, validation, the post-fit evaluation (the test split), status,
   ``wandb.finish`` and interpreter exit. The timestamps come from wrappers this script installs
   around functions of ``ablate.run.train`` in the child process; the package itself is not changed.
   Plus ``python -X importtime`` of ``import ablate.run.train, wandb``: the top-level packages'
   cumulative import times.
2. **Sweeps** (``--modes``): the same sweep (``--axis`` over ``--variants`` x ``--seeds``,
   ``model=--model``, ``trainer.max_steps=--steps``, validation once at the end) run as one
   ``train.py -m`` command per mode, back to back:

   - ``sequential``: Hydra's default (basic) launcher, ``OMP_NUM_THREADS=<cores>``;
   - ``parallel``: ``hydra/launcher=cpu_parallel`` (conf/hydra/launcher/cpu_parallel.yaml: joblib,
     one job per core) with ``OMP_NUM_THREADS`` *unset*: loky gives each worker cores // n_jobs
     threads;
   - ``joblib``: ``hydra/launcher=joblib hydra.launcher.n_jobs=<--n-jobs>`` with
     ``OMP_NUM_THREADS=1`` (the command README.md gave before ``cpu_parallel``).

   Each job gets a small callback (:func:`job_probe`, ``+callbacks.overhead_probe``) that writes
   ``overhead_probe.json`` to its directory: pid, torch threads, and wall-clock times of its hooks.
   From the job directories: the sweep's wall time against the sum of the jobs' training time
   (``train/time_s``: training steps only, validation left out; ``status.json`` ``wall_time_s`` is
   ``trainer.fit`` + the post-fit evaluation), the per-job time outside training, and the speed-up
   of the parallel modes over ``sequential``.

Prints tables and writes everything to ``<out>/sweep_overhead.json``. Load is recorded around each
measurement: the 1-minute load average and the share of the machine's CPU time used by other
processes (``/proc/stat`` minus the CPU time of this script's children).

    python scripts/sweep_overhead.py                                   # probes + the 4 x 3 sweep, both modes (~6 min)
    python scripts/sweep_overhead.py --steps 300 --modes sequential,parallel,joblib
    python scripts/sweep_overhead.py --variants learned,rope --seeds 1 --steps 3 --probe-runs 1 \
        --extra data.seq_len=16 data.batch_size=4                      # the test's setting (tests/sweepers/test_sweep_overhead.py)

Only the standard library is imported at module level: the job probe is imported by every job
(``PYTHONPATH=scripts``), and the parent process does not need torch.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, Self

REPO = Path(__file__).resolve().parents[1]
PROBE_FILE = "overhead_probe.json"
LAUNCH_ENV = "SWEEP_OVERHEAD_LAUNCH"  # wall-clock time at which the parent started the child (probe)
MODES = ("sequential", "parallel", "joblib")


# --------------------------------------------------------------------------- the per-job probe callback


def job_probe(path: str | None = None) -> Any:
    """A Lightning callback that records when its hooks run (wall clock, ``time.time()``) and the
    thread count of the job, into ``<trainer.default_root_dir>/overhead_probe.json`` (or ``path``).
    Added to a sweep's jobs as ``+callbacks.overhead_probe._target_=sweep_overhead.job_probe``.
    A factory so that importing this module does not import Lightning."""
    import lightning as L
    import torch

    class JobProbe(L.Callback):
        def __init__(self) -> None:
            self.record: dict[str, Any] = {
                "pid": os.getpid(),
                "torch_threads": torch.get_num_threads(),
                "omp_num_threads_env": os.environ.get("OMP_NUM_THREADS"),
                "callbacks_built": time.time(),
                "validation_s": 0.0,
            }
            self._val_start: float | None = None

        def _mark(self, key: str, overwrite: bool = True) -> None:
            if overwrite or key not in self.record:
                self.record[key] = time.time()

        def setup(self, trainer, pl_module, stage):
            self._mark(f"setup_{getattr(stage, 'value', stage)}", overwrite=False)

        def on_fit_start(self, trainer, pl_module):
            self._mark("fit_start")

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self._mark("first_batch_start", overwrite=False)

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            self._mark("first_batch_end", overwrite=False)
            self._mark("last_batch_end")

        def on_validation_start(self, trainer, pl_module):
            self._val_start = time.time()

        def on_validation_end(self, trainer, pl_module):
            if self._val_start is not None:
                self.record["validation_s"] += time.time() - self._val_start
                self._val_start = None

        def on_fit_end(self, trainer, pl_module):
            self._mark("fit_end")

        def on_test_start(self, trainer, pl_module):
            self._mark("test_start")

        def on_test_end(self, trainer, pl_module):
            self._mark("test_end")

        def teardown(self, trainer, pl_module, stage):
            self._mark(f"teardown_{getattr(stage, 'value', stage)}")
            out = Path(path) if path else Path(trainer.default_root_dir) / PROBE_FILE
            out.write_text(json.dumps(self.record, indent=2))

    return JobProbe()


# --------------------------------------------------------------------------- load


def cpu_times() -> tuple[float, float]:
    """``(busy, total)`` CPU seconds of the whole machine since boot (/proc/stat)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return (sum(fields[:8]) - idle) / tick, sum(fields[:8]) / tick


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def top_processes(n: int = 5) -> list[str]:
    """The busiest processes now (``ps aux --sort=-%cpu``), for the record."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pcpu,etime,args", "--sort=-pcpu"], check=False, capture_output=True, text=True, timeout=10
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return []
    return [line[:160] for line in out[1 : n + 1]]


class LoadWindow:
    """Load average at the start and end of a measurement and the share of the machine's CPU
    that other processes used meanwhile (all CPU time minus that of this script's children;
    a child's own children count only once reaped, e.g. loky workers, not wandb's service)."""

    def __enter__(self) -> Self:
        self.load_start, self.top_start = loadavg(), top_processes()
        self._busy, self._total = cpu_times()
        self._own, self._t = children_cpu(), time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        busy, total = cpu_times()
        own = children_cpu() - self._own
        self.elapsed = time.time() - self._t
        self.load_end = loadavg()
        span = max(total - self._total, 1e-9)
        self.others_cpu_share = max(0.0, (busy - self._busy) - own) / span
        self.own_cpu_s = own

    def as_dict(self) -> dict[str, Any]:
        return {
            "load_start": self.load_start,
            "load_end": self.load_end,
            "others_cpu_share": round(self.others_cpu_share, 4),
            "children_cpu_s": round(self.own_cpu_s, 2),
            "top_processes_at_start": self.top_start,
        }


# --------------------------------------------------------------------------- the start-up probe (child side)


def probe_child(out_path: Path, overrides: list[str]) -> None:
    """Run ``train.py overrides`` (a single run) in this process with timestamps around its parts;
    write them (seconds since the parent launched this process) to ``out_path``."""
    launched = float(os.environ.get(LAUNCH_ENV, time.time()))
    marks: dict[str, float] = {}
    calls: dict[str, list[float]] = {}  # the duration of every call of a wrapped function
    info: dict[str, Any] = {}

    def now() -> float:
        return time.time() - launched

    def mark(name: str) -> None:
        marks.setdefault(name, now())

    def timed(name: str, fn: Any) -> Any:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            mark(f"{name}:start")
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                calls.setdefault(name, []).append(time.perf_counter() - start)
                marks[f"{name}:end"] = now()

        return wrapper

    mark("python_started")
    import torch

    mark("imported_torch")
    import lightning

    mark("imported_lightning")
    import hydra  # noqa: F401
    import omegaconf  # noqa: F401

    mark("imported_hydra")
    import wandb  # noqa: F401

    mark("imported_wandb")
    import ablate.run.status as status_record
    import ablate.run.train as T

    mark("imported_ablate")

    from lightning.pytorch import LightningDataModule

    from ablate.callbacks import throughput
    from ablate.data import cache

    cache.sha256_file = timed("sha256_verify", cache.sha256_file)
    throughput.measure_cpu_peak = timed("cpu_peak_probe", throughput.measure_cpu_peak)
    original_instantiate = T.instantiate

    def instantiate(config: Any, *args: Any, **kwargs: Any) -> Any:
        target = str(config.get("_target_", "")) if hasattr(config, "get") else ""
        if target.endswith("Trainer"):
            obj = timed("trainer_build", original_instantiate)(config, *args, **kwargs)
            obj.fit = timed("trainer_fit", obj.fit)
            obj.test = timed("trainer_test", obj.test)
            return obj
        start, started = time.perf_counter(), now()
        obj = original_instantiate(config, *args, **kwargs)
        if isinstance(obj, LightningDataModule):
            calls["data_instantiate"] = [time.perf_counter() - start]
            marks["data_instantiate:start"] = started
            obj.prepare_data = timed("data_prepare", obj.prepare_data)  # the SHA-256 verify is inside
            obj.setup = timed("data_setup", obj.setup)
            obj._build_cache = timed("data_build_cache", obj._build_cache)
            info["cache_dir"] = str(obj.cache_path())
        return obj

    def build_task(*args: Any, **kwargs: Any) -> Any:
        task = timed("model_build", original_build_task)(*args, **kwargs)
        task.evaluate_after_fit = timed("evaluate_after_fit", task.evaluate_after_fit)
        return task

    def build_callbacks(*args: Any, **kwargs: Any) -> Any:
        return [first, *timed("callbacks_build", original_build_callbacks)(*args, **kwargs), last]

    def build_loggers(*args: Any, **kwargs: Any) -> Any:
        loggers = timed("loggers_build", original_build_loggers)(*args, **kwargs)

        def init_wandb() -> None:  # train.py asks for the W&B run id right after: wandb.init runs here
            for logger in loggers:
                if type(logger).__name__ == "WandbLogger":
                    _ = logger.experiment

        timed("wandb_init", init_wandb)()
        return loggers

    original_build_task, original_build_callbacks = T.build_task, T.build_callbacks
    original_build_loggers = T.build_loggers
    T.run = timed("task_function", T.run)
    T.instantiate, T.build_task, T.build_callbacks, T.build_loggers = (
        instantiate,
        build_task,
        build_callbacks,
        build_loggers,
    )
    T.check_config = timed("config_checks", T.check_config)
    T.finish_wandb = timed("wandb_finish", T.finish_wandb)
    status_record.write_status = timed("write_status", status_record.write_status)  # via record_status

    class Hooks(lightning.pytorch.Callback):
        """Placed first and last among the callbacks: the span of their ``setup`` is the
        callbacks' set-up (the CPU peak probe of the throughput monitor)."""

        def __init__(self, where: str) -> None:
            self.where = where
            self.val_start: float | None = None

        def setup(self, trainer, pl_module, stage):
            mark(f"setup_{getattr(stage, 'value', stage)}_{self.where}")

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            mark(f"first_batch_start_{self.where}")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            mark(f"first_batch_end_{self.where}")
            marks[f"last_batch_end_{self.where}"] = now()

        def on_validation_start(self, trainer, pl_module):
            if self.where == "first" and trainer.state.fn == "fit":
                self.val_start = time.perf_counter()

        def on_validation_end(self, trainer, pl_module):
            if self.where == "last" and first.val_start is not None:
                calls.setdefault("validation_in_fit", []).append(time.perf_counter() - first.val_start)
                first.val_start = None

        def on_test_start(self, trainer, pl_module):
            mark(f"test_start_{self.where}")

        def on_test_end(self, trainer, pl_module):
            marks[f"test_end_{self.where}"] = now()

    first, last = Hooks("first"), Hooks("last")

    sys.argv = [str(REPO / "train.py"), *overrides]
    mark("hydra_main_called")
    import runpy

    try:
        runpy.run_path(str(REPO / "train.py"), run_name="__main__")
    finally:
        mark("hydra_main_returned")
        cache_dir = Path(info["cache_dir"]) if "cache_dir" in info else None
        record = {
            "marks": marks,
            "calls": calls,
            "torch_threads": torch.get_num_threads(),
            **info,
            "cache_built": "data_build_cache" in calls,
            "cache_bytes": sum(f.stat().st_size for f in cache_dir.iterdir() if f.is_file()) if cache_dir else None,
        }
        out_path.write_text(json.dumps(record, indent=2))


# --------------------------------------------------------------------------- the start-up probe (parent side)


def child_env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("WANDB_MODE", "offline")  # never the network: offline runs, as without credentials
    env.setdefault("WANDB_SILENT", "true")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "scripts"), env.get("PYTHONPATH")) if p)
    if threads is None:
        env.pop("OMP_NUM_THREADS", None)
    else:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def run_logged(cmd: list[str], env: dict[str, str], log_path: Path, timeout: float) -> tuple[int, float]:
    """Run ``cmd`` with its output to ``log_path``; ``(exit code, wall seconds)``."""
    start = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.run(
            cmd,
            check=False,
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            timeout=timeout,
        )
    return proc.returncode, time.time() - start


def common_overrides(args: argparse.Namespace, out: Path) -> list[str]:
    return [
        f"model={args.model}",
        f"trainer.max_steps={args.steps}",
        f"trainer.val_check_interval={args.steps}",
        f"paths.log_dir={out / 'logs'}",
        *args.extra,
    ]


def startup_probe(args: argparse.Namespace, out: Path, index: int) -> dict[str, Any]:
    """One single run of the first variant, timestamped (:func:`probe_child`)."""
    run_dir = out / "probe" / f"run{index}"
    marks_path = out / "probe" / f"run{index}.marks.json"
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    overrides = [
        *common_overrides(args, out),
        f"trainer.max_steps={args.probe_steps}",
        f"trainer.val_check_interval={args.probe_steps}",
        f"{args.axis}={args.variants[0]}",
        f"seed={args.seeds[0]}",
        f"hydra.run.dir={run_dir}",
    ]
    env = child_env(args.threads_sequential)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--probe-child", str(marks_path), "--", *overrides]
    with LoadWindow() as load:
        env[LAUNCH_ENV] = repr(time.time())
        code, wall = run_logged(cmd, env, out / "probe" / f"run{index}.log", args.timeout)
    if code != 0:
        raise SystemExit(f"the start-up probe failed ({code}): see {out / 'probe' / f'run{index}.log'}")
    record = json.loads(marks_path.read_text())
    return {
        "run_dir": str(run_dir),
        "process_wall_s": round(wall, 3),
        "steps": args.probe_steps,
        "parts": startup_parts(record, wall),
        "torch_threads": record["torch_threads"],
        "cache_built": record["cache_built"],
        "cache_bytes": record["cache_bytes"],
        "prepare_data_calls": len(record["calls"].get("data_prepare", [])),
        "sha256_calls": len(record["calls"].get("sha256_verify", [])),
        "load": load.as_dict(),
        "raw": record,
    }


def startup_parts(record: dict[str, Any], wall: float) -> dict[str, float]:
    """The parts of one job in seconds, in the order they happen. Lines without leading spaces
    are consecutive intervals of the same process (they add up to its wall time); indented lines
    break the line above them down; lines starting with "=" are cumulative."""
    m, c = record["marks"], record["calls"]

    def first(name: str) -> float:
        return (c.get(name) or [0.0])[0]

    def total(name: str) -> float:
        return sum(c.get(name) or [0.0])

    p: dict[str, float] = {}
    p["interpreter start"] = m["python_started"]
    p["import torch"] = m["imported_torch"] - m["python_started"]
    p["import lightning"] = m["imported_lightning"] - m["imported_torch"]
    p["import hydra, omegaconf"] = m["imported_hydra"] - m["imported_lightning"]
    p["import wandb"] = m["imported_wandb"] - m["imported_hydra"]
    p["import ablate (the rest)"] = m["imported_ablate"] - m["imported_wandb"]
    p["probe's own set-up"] = m["hydra_main_called"] - m["imported_ablate"]
    p["hydra: compose, job dir, logging"] = m["task_function:start"] - m["hydra_main_called"]
    p["job: before data (config checks, resume check, seeding)"] = (
        m["data_instantiate:start"] - m["task_function:start"]
    )
    p["  of which config checks"] = first("config_checks")
    p["data: instantiate, prepare_data, setup"] = m["model_build:start"] - m["data_instantiate:start"]
    p["  of which prepare_data (cache verify, or build)"] = first("data_prepare")
    # each prepare_data call verifies the same files: this call's share of all the SHA-256 time
    p["  of which SHA-256 of the cache files"] = total("sha256_verify") / max(1, len(c.get("data_prepare", [])))
    p["  of which setup (memory maps, tokenizer)"] = first("data_setup")
    p["model build (task, init)"] = m["model_build:end"] - m["model_build:start"]
    p["callbacks build"] = first("callbacks_build")
    p["loggers build (CSV; W&B: wandb.init, offline)"] = first("loggers_build")
    p["W&B init not done by the loggers build"] = first("wandb_init")
    p["trainer build"] = first("trainer_build")
    p["job: the rest before fit (header, run config, gaps)"] = (
        m["trainer_fit:start"]
        - m["model_build:end"]
        - sum(first(k) for k in ("callbacks_build", "loggers_build", "wandb_init", "trainer_build"))
    )
    p["fit: Lightning set-up to callbacks' setup (prepare_data, setup again)"] = (
        m["setup_fit_first"] - m["trainer_fit:start"]
    )
    p["fit: callbacks' setup"] = m["setup_fit_last"] - m["setup_fit_first"]
    p["  of which CPU peak probe (peak_flops=auto)"] = first("cpu_peak_probe")
    p["fit: callbacks' setup to first batch (optimiser, dataloader)"] = (
        m["first_batch_start_first"] - m["setup_fit_last"]
    )
    p["= launch to first training step"] = m["first_batch_start_first"]
    p["first training step"] = m["first_batch_end_last"] - m["first_batch_start_first"]
    p["rest of fit: later steps, validation, checkpoints, teardown"] = m["trainer_fit:end"] - m["first_batch_end_last"]
    p["  of which validation (full split at the last step)"] = total("validation_in_fit")
    p["  of which after the last step (validation, last checkpoint, teardown)"] = (
        m["trainer_fit:end"] - m["last_batch_end_last"]
    )
    eval_start = m.get("evaluate_after_fit:start", m["trainer_fit:end"])
    eval_end = m.get("evaluate_after_fit:end", eval_start)
    p["between fit and evaluation"] = eval_start - m["trainer_fit:end"]
    p["post-fit evaluation (evaluate_after_fit)"] = eval_end - eval_start
    if "test_start_first" in m:
        p["  of which test set-up (prepare_data, setup, dataloader)"] = m["test_start_first"] - eval_start
        p["  of which test loop"] = m["test_end_last"] - m["test_start_first"]
        p["  of which after the test loop"] = eval_end - m["test_end_last"]
    p["status, summary, W&B finish"] = m["task_function:end"] - eval_end
    p["  of which W&B finish"] = total("wandb_finish")
    p["hydra: after the job"] = m["hydra_main_returned"] - m["task_function:end"]
    p["interpreter exit"] = wall - m["hydra_main_returned"]
    p["= process wall time"] = wall
    p["= SHA-256 verify, all prepare_data calls of the job"] = total("sha256_verify")
    return {k: round(v, 3) for k, v in p.items()}


# --------------------------------------------------------------------------- imports (-X importtime)


def import_times(env: dict[str, str]) -> dict[str, float]:
    """Cumulative import time (s) of each top-level package that ``train.py`` imports, from
    ``python -X importtime``; a package's imports count for the first package that imports them,
    so the big ones are imported first, one by one."""
    code = "import torch, lightning, hydra, omegaconf, wandb, ablate.run.train"
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        check=False,
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    totals: dict[str, float] = {}
    for line in proc.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if not match or match.group(3):  # nested imports are inside their importer's cumulative time
            continue
        top = match.group(4).split(".")[0]
        totals[top] = totals.get(top, 0.0) + int(match.group(2)) / 1e6
    ordered = dict(sorted(totals.items(), key=lambda kv: -kv[1]))
    return {k: round(v, 3) for k, v in ordered.items() if v >= 0.01}


# --------------------------------------------------------------------------- sweeps


def sweep_command(args: argparse.Namespace, out: Path, mode: str) -> tuple[list[str], int | None, int]:
    """``(command, OMP_NUM_THREADS or None for unset, jobs at a time)`` of one mode."""
    sweep_dir = out / "sweeps" / mode
    cmd = [
        sys.executable,
        str(REPO / "train.py"),
        "-m",
        f"hydra.sweep.dir={sweep_dir}",
        *common_overrides(args, out),
        f"{args.axis}={','.join(args.variants)}",
        f"seed={','.join(str(s) for s in args.seeds)}",
        "skip_completed=false",
        "+callbacks.overhead_probe._target_=sweep_overhead.job_probe",
    ]
    if mode == "sequential":
        return cmd, args.threads_sequential, 1
    if mode == "parallel":  # cpu_parallel's own n_jobs (one job per core) unless --n-jobs is given
        if args.n_jobs is None:
            return [*cmd, "hydra/launcher=cpu_parallel"], None, usable_cores()
        return [*cmd, "hydra/launcher=cpu_parallel", f"hydra.launcher.n_jobs={args.n_jobs}"], None, args.n_jobs
    if mode == "joblib":
        n_jobs = args.n_jobs or usable_cores()
        return [*cmd, "hydra/launcher=joblib", f"hydra.launcher.n_jobs={n_jobs}"], 1, n_jobs
    raise ValueError(mode)


def usable_cores() -> int:
    """The cores this process may run on (what joblib's n_jobs=-1 counts, cgroup quotas aside)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def last_value(csv_path: Path, column: str) -> float | None:
    """The largest logged value of ``column`` in a Lightning metrics.csv (time only grows)."""
    try:
        with open(csv_path, newline="") as f:
            values = [float(row[column]) for row in csv.DictReader(f) if row.get(column) not in (None, "")]
    except (OSError, KeyError, ValueError):
        return None
    return max(values) if values else None


def read_job(job_dir: Path) -> dict[str, Any]:
    """One job's numbers from its directory: status.json, csv/metrics.csv, overhead_probe.json and
    the times at which Hydra wrote ``.hydra/overrides.yaml`` (the job's start) and the job wrote
    ``status.json`` (after the post-fit evaluation, before ``wandb.finish``)."""
    status = json.loads((job_dir / "status.json").read_text())
    probe_path = job_dir / PROBE_FILE
    probe = json.loads(probe_path.read_text()) if probe_path.exists() else {}
    started = (job_dir / ".hydra" / "overrides.yaml").stat().st_mtime
    finished = (job_dir / "status.json").stat().st_mtime
    train_s = last_value(job_dir / "csv" / "metrics.csv", "train/time_s")
    job: dict[str, Any] = {
        "job": job_dir.name,
        "status": status.get("status"),
        "steps": status.get("steps"),
        "train_time_s": round(train_s, 3) if train_s is not None else None,
        "wall_time_s": status.get("wall_time_s"),
        "val_loss": (status.get("metrics") or {}).get("val/loss"),
        "pid": probe.get("pid"),
        "torch_threads": probe.get("torch_threads"),
        "omp_num_threads_env": probe.get("omp_num_threads_env"),
        "started": started,
        "status_written": finished,
    }
    if probe.get("first_batch_start") and status.get("wall_time_s") is not None:
        fit_start = finished - status["wall_time_s"]  # wall_time_s: from trainer.fit to the end of the evaluation
        job["before_fit_s"] = round(fit_start - started, 3)  # config checks, data, model, loggers (W&B), Trainer
        job["start_to_first_step_s"] = round(probe["first_batch_start"] - started, 3)
        job["fit_setup_s"] = round(probe["first_batch_start"] - fit_start, 3)  # incl. the CPU peak probe
        job["validation_s"] = round(probe.get("validation_s", 0.0), 3)
        if probe.get("fit_end") is not None:
            job["post_fit_eval_s"] = round(finished - probe["fit_end"], 3)
    return job


def summarize_sweep(jobs: list[dict[str, Any]], wall: float, n_jobs: int) -> dict[str, Any]:
    train = [j["train_time_s"] for j in jobs if j["train_time_s"] is not None]
    fit_eval = [j["wall_time_s"] for j in jobs if j["wall_time_s"] is not None]
    sum_train = sum(train)
    first_start = min(j["started"] for j in jobs)
    last_status = max(j["status_written"] for j in jobs)

    def mean(key: str) -> float | None:
        values = [j[key] for j in jobs if j.get(key) is not None]
        return round(statistics.mean(values), 3) if values else None

    return {
        "jobs_run": len(jobs),
        "jobs_completed": sum(j["status"] == "completed" for j in jobs),
        "jobs_at_a_time": n_jobs,
        # 4 decimals: a few-step test sweep trains for ~0.2 s, and a ratio of values
        # rounded to 2 decimals would be off by several per cent
        "wall_s": round(wall, 4),
        "sum_train_time_s": round(sum_train, 4),
        "sum_fit_and_eval_s": round(sum(fit_eval), 4),
        "wall_over_sum_train": round(wall / sum_train, 3) if sum_train else None,
        # parallel: what the jobs' training would take if the n slots were always busy
        "wall_over_sum_train_per_slot": round(wall * n_jobs / sum_train, 3) if sum_train else None,
        "outside_training_s": round(wall - sum_train / n_jobs, 2),
        "sweep_start_to_first_job_s": None,  # filled in by the caller (needs the launch time)
        "last_status_to_exit_s": None,
        "mean_train_time_s": round(statistics.mean(train), 3) if train else None,
        "mean_before_fit_s": mean("before_fit_s"),
        "mean_start_to_first_step_s": mean("start_to_first_step_s"),
        "mean_fit_setup_s": mean("fit_setup_s"),
        "mean_validation_s": mean("validation_s"),
        "mean_post_fit_eval_s": mean("post_fit_eval_s"),
        "torch_threads": sorted({j["torch_threads"] for j in jobs if j.get("torch_threads") is not None}),
        "worker_pids": len({j["pid"] for j in jobs if j.get("pid") is not None}),
        "_first_start": first_start,
        "_last_status": last_status,
    }


def run_sweep(args: argparse.Namespace, out: Path, mode: str) -> dict[str, Any]:
    cmd, threads, n_jobs = sweep_command(args, out, mode)
    sweep_dir = out / "sweeps" / mode
    if sweep_dir.exists():
        shutil.rmtree(sweep_dir)
    print(
        f"[{mode}] {'OMP_NUM_THREADS=' + str(threads) if threads is not None else '(OMP_NUM_THREADS unset)'} "
        f"{' '.join(cmd[1:])}",
        flush=True,
    )
    with LoadWindow() as load:
        launched = time.time()
        code, wall = run_logged(cmd, child_env(threads), out / f"sweep_{mode}.log", args.timeout)
    jobs = sorted((read_job(d) for d in sweep_dir.iterdir() if (d / "status.json").exists()), key=lambda j: j["job"])
    expected = len(args.variants) * len(args.seeds)
    if code != 0 or len(jobs) != expected:
        raise SystemExit(
            f"the {mode} sweep failed (exit {code}, {len(jobs)}/{expected} jobs): see {out / f'sweep_{mode}.log'}"
        )
    summary = summarize_sweep(jobs, wall, n_jobs)
    summary["sweep_start_to_first_job_s"] = round(summary.pop("_first_start") - launched, 2)
    summary["last_status_to_exit_s"] = round(launched + wall - summary.pop("_last_status"), 2)
    for j in jobs:  # times relative to the sweep's launch, for the record
        j["started"], j["status_written"] = round(j["started"] - launched, 3), round(j["status_written"] - launched, 3)
    env_text = f"OMP_NUM_THREADS={threads}" if threads is not None else "OMP_NUM_THREADS unset"
    return {
        "mode": mode,
        "command": f"{env_text} python {' '.join(Path(c).name if c.endswith('.py') else c for c in cmd[1:])}",
        "exit_code": code,
        **summary,
        "load": load.as_dict(),
        "jobs": jobs,
    }


# --------------------------------------------------------------------------- report


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    lines.insert(1, "| " + " | ".join("-" * w for w in widths) + " |")
    return "\n".join(lines)


def fmt(value: Any, digits: int = 2) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def render(report: dict[str, Any]) -> str:
    out = []
    probes = report.get("startup", {}).get("runs", [])
    if probes:
        names = list(probes[-1]["parts"])
        rows = [["part (s)", *(f"run {i + 1}" for i in range(len(probes)))]]
        rows += [[n, *(fmt(p["parts"].get(n)) for p in probes)] for n in names]
        out.append("Start-up probe: one single run, seconds per part\n" + table(rows))
        out.append(
            "loads: "
            + "; ".join(
                f"run {i + 1}: {p['load']['load_start']:.2f}->{p['load']['load_end']:.2f}, "
                f"others {p['load']['others_cpu_share']:.0%}"
                for i, p in enumerate(probes)
            )
        )
    if report.get("imports"):
        rows = [["package (-X importtime, cumulative)", "s"]]
        rows += [[k, fmt(v)] for k, v in report["imports"].items()]
        out.append(table(rows))
    sweeps = report.get("sweeps", {})
    if sweeps:
        keys = [
            ("jobs", "jobs_completed"),
            ("jobs at a time", "jobs_at_a_time"),
            ("torch threads per job", "torch_threads"),
            ("wall time (s)", "wall_s"),
            ("sum of train/time_s (s)", "sum_train_time_s"),
            ("sum of status wall_time_s (fit+eval) (s)", "sum_fit_and_eval_s"),
            ("wall / sum train", "wall_over_sum_train"),
            ("wall x jobs at a time / sum train", "wall_over_sum_train_per_slot"),
            ("mean train/time_s per job (s)", "mean_train_time_s"),
            ("mean job start -> first step (s)", "mean_start_to_first_step_s"),
            ("mean job start -> trainer.fit (s)", "mean_before_fit_s"),
            ("mean fit set-up -> first step (s)", "mean_fit_setup_s"),
            ("mean validation in fit (s)", "mean_validation_s"),
            ("mean post-fit eval (s)", "mean_post_fit_eval_s"),
            ("sweep launch -> first job (s)", "sweep_start_to_first_job_s"),
            ("last status -> sweep exit (s)", "last_status_to_exit_s"),
            ("load avg start -> end", None),
            ("others' CPU share", None),
        ]
        rows = [["", *sweeps]]
        for label, key in keys:
            if key is None:
                cells = [
                    (
                        f"{s['load']['load_start']:.2f} -> {s['load']['load_end']:.2f}"
                        if label.startswith("load")
                        else f"{s['load']['others_cpu_share']:.0%}"
                    )
                    for s in sweeps.values()
                ]
            else:
                cells = [fmt(s.get(key), 3 if "/" in label and "(s)" not in label else 2) for s in sweeps.values()]
            rows.append([label, *cells])
        out.append(f"Sweeps: {report['settings']['sweep']}\n" + table(rows))
    if report.get("comparison"):
        out.append("\n".join(f"{k}: {v}" for k, v in report["comparison"].items()))
    return "\n\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    cores = os.cpu_count() or 1
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--axis", default="pos", help="the swept config key (default: pos)")
    p.add_argument(
        "--variants",
        default="learned,rope,alibi,sinusoidal",
        type=lambda s: s.split(","),
        help="the values of --axis, comma-separated",
    )
    p.add_argument(
        "--seeds",
        default="1,2,3",
        type=lambda s: [int(x) for x in s.split(",")],
        help="seeds of every variant, comma-separated",
    )
    p.add_argument("--model", default="tiny", help="model= of every run")
    p.add_argument(
        "--steps", type=int, default=500, help="trainer.max_steps of every sweep job (validated once, at the end)"
    )
    p.add_argument(
        "--modes",
        default="sequential,parallel",
        type=lambda s: s.split(","),
        help=f"sweeps to run, back to back, in this order: {', '.join(MODES)}, or none",
    )
    p.add_argument(
        "--n-jobs",
        type=int,
        default=None,
        help="jobs at a time of the parallel and joblib modes (default: one per core)",
    )
    p.add_argument(
        "--threads-sequential",
        type=int,
        default=cores,
        help="OMP_NUM_THREADS of the sequential sweep and the start-up probe (default: cores)",
    )
    p.add_argument("--probe-runs", type=int, default=2, help="single runs of the start-up probe (0: none)")
    p.add_argument("--probe-steps", type=int, default=1, help="trainer.max_steps of a probe run")
    p.add_argument("--no-importtime", action="store_true", help="skip python -X importtime")
    p.add_argument(
        "--extra", nargs="*", default=[], help="more train.py overrides for every run (e.g. data.seq_len=64)"
    )
    p.add_argument("--out", type=Path, default=None, help="output folder (default: logs/sweep_overhead/<time>)")
    p.add_argument("--json", type=Path, default=None, help="the report (default: <out>/sweep_overhead.json)")
    p.add_argument("--timeout", type=float, default=3600, help="seconds per subprocess")
    args = p.parse_args(argv)
    bad = [m for m in args.modes if m not in (*MODES, "none")]
    if bad:
        p.error(f"--modes: unknown {bad}; choose from {MODES}")
    args.modes = [m for m in args.modes if m != "none"]
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--probe-child"]:
        sep = argv.index("--")
        probe_child(Path(argv[1]), argv[sep + 1 :])
        return {}
    args = parse_args(argv)
    out = (args.out or REPO / "logs" / "sweep_overhead" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    sweep_text = (
        f"model={args.model} {args.axis}={','.join(args.variants)} seed={','.join(map(str, args.seeds))} "
        f"trainer.max_steps={args.steps} trainer.val_check_interval={args.steps} {' '.join(args.extra)}"
    ).strip()
    report: dict[str, Any] = {
        "machine": {"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "platform": sys.platform},
        "settings": {
            "axis": args.axis,
            "variants": args.variants,
            "seeds": args.seeds,
            "model": args.model,
            "steps": args.steps,
            "probe_steps": args.probe_steps,
            "extra": args.extra,
            "modes": args.modes,
            "n_jobs": args.n_jobs,
            "threads_sequential": args.threads_sequential,
            "sweep": sweep_text,
        },
        "started": datetime.now().isoformat(timespec="seconds"),
    }
    json_path = args.json or out / "sweep_overhead.json"

    def save() -> None:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")

    if args.probe_runs:
        runs = []
        for i in range(args.probe_runs):
            print(f"[probe] start-up probe run {i + 1}/{args.probe_runs}", flush=True)
            runs.append(startup_probe(args, out, i + 1))
        report["startup"] = {
            "runs": runs,
            "command": f"python train.py {args.axis}={args.variants[0]} "
            f"model={args.model} trainer.max_steps={args.probe_steps} (timestamped in-process)",
        }
        save()
    if not args.no_importtime:
        report["imports"] = import_times(child_env(args.threads_sequential))
    report["sweeps"] = {}
    for mode in args.modes:
        report["sweeps"][mode] = run_sweep(args, out, mode)
        save()
    seq = report["sweeps"].get("sequential")
    comparison = {}
    for mode in ("parallel", "joblib"):
        par = report["sweeps"].get(mode)
        if seq and par:
            comparison[f"speed-up {mode} vs sequential (wall)"] = round(seq["wall_s"] / par["wall_s"], 3)
    if seq:
        comparison["sequential wall / sum of train/time_s"] = seq["wall_over_sum_train"]
    report["comparison"] = comparison
    report["finished"] = datetime.now().isoformat(timespec="seconds")
    save()
    print(render(report), flush=True)
    print(f"\nreport: {json_path}", flush=True)
    return report


if __name__ == "__main__":
    main()
