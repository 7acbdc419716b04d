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
   ``wandb.finish`` and interpreter exit (:func:`benchmarks.overhead_probe.probe_child`).
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

   Each job gets a small callback (:func:`benchmarks.overhead_probe.job_probe`,
   ``+callbacks.overhead_probe``) that writes
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
        --extra data.seq_len=16 data.batch_size=4                      # the test's setting (tests/benchmark/test_sweep_overhead.py)

The probes of the jobs are :mod:`benchmarks.overhead_probe`, the numbers and tables
:mod:`benchmarks.overhead_report`. The parent process does not need torch.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from ablate.config.locations import checkout_root
from benchmarks.load_window import LoadWindow
from benchmarks.overhead_probe import LAUNCH_ENV
from benchmarks.overhead_report import read_job, render, startup_parts, summarize_sweep

REPO = checkout_root() or Path.cwd()  # train.py and logs/ of this checkout
MODES = ("sequential", "parallel", "joblib")


def child_env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("WANDB_MODE", "offline")  # never the network: offline runs, as without credentials
    env.setdefault("WANDB_SILENT", "true")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env["PYTHONUNBUFFERED"] = "1"
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
    cmd = [sys.executable, "-m", "benchmarks.overhead_probe", str(marks_path), "--", *overrides]
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
        "+callbacks.overhead_probe._target_=benchmarks.overhead_probe.job_probe",
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
    args = parse_args(argv)
    out = (args.out or REPO / "logs" / "sweep_overhead" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "machine": {"cpu_count": os.cpu_count(), "python": sys.version.split()[0], "platform": sys.platform},
        "settings": _settings(args),
        "started": datetime.now().isoformat(timespec="seconds"),
    }
    json_path = args.json or out / "sweep_overhead.json"

    def save() -> None:  # after each part: an interrupted measurement keeps what it measured
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(report, indent=2, default=str) + "\n")

    if args.probe_runs:
        report["startup"] = _startup_probes(args, out)
        save()
    if not args.no_importtime:
        report["imports"] = import_times(child_env(args.threads_sequential))
    report["sweeps"] = {}
    for mode in args.modes:
        report["sweeps"][mode] = run_sweep(args, out, mode)
        save()
    report["comparison"] = _comparison(report["sweeps"])
    report["finished"] = datetime.now().isoformat(timespec="seconds")
    save()
    print(render(report), flush=True)
    print(f"\nreport: {json_path}", flush=True)
    return report


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    """What was measured: the sweep's axis, variants, seeds, model, steps and launch settings."""
    sweep_text = (
        f"model={args.model} {args.axis}={','.join(args.variants)} seed={','.join(map(str, args.seeds))} "
        f"trainer.max_steps={args.steps} trainer.val_check_interval={args.steps} {' '.join(args.extra)}"
    ).strip()
    return {
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
    }


def _startup_probes(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """``args.probe_runs`` timestamped single runs (:func:`startup_probe`) and the command they ran."""
    runs = []
    for i in range(args.probe_runs):
        print(f"[probe] start-up probe run {i + 1}/{args.probe_runs}", flush=True)
        runs.append(startup_probe(args, out, i + 1))
    return {
        "runs": runs,
        "command": f"python train.py {args.axis}={args.variants[0]} "
        f"model={args.model} trainer.max_steps={args.probe_steps} (timestamped in-process)",
    }


def _comparison(sweeps: dict[str, Any]) -> dict[str, Any]:
    """The parallel modes' speed-up over the sequential sweep, and its wall time over its training time."""
    seq = sweeps.get("sequential")
    comparison = {}
    for mode in ("parallel", "joblib"):
        par = sweeps.get(mode)
        if seq and par:
            comparison[f"speed-up {mode} vs sequential (wall)"] = round(seq["wall_s"] / par["wall_s"], 3)
    if seq:
        comparison["sequential wall / sum of train/time_s"] = seq["wall_over_sum_train"]
    return comparison
