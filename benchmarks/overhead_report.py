"""The numbers of :mod:`benchmarks.sweep_overhead`: the parts of a timestamped start-up, one
sweep job's times from its directory, a sweep's summary, and the report's tables."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.overhead_probe import PROBE_FILE


def startup_parts(record: dict[str, Any], wall: float) -> dict[str, float]:
    """The parts of one job in seconds, in the order they happen. Lines without leading spaces
    are consecutive intervals of the same process (they add up to its wall time); indented lines
    break the line above them down; lines starting with "=" are cumulative."""
    timeline = _Timeline(record["marks"], record["calls"])
    p = {
        **_until_the_job(timeline),
        **_job_until_fit(timeline),
        **_fit(timeline),
        **_after_fit(timeline, wall),
    }
    return {k: round(v, 3) for k, v in p.items()}


class _Timeline:
    """A probe record's marks (``m``) and the durations of its calls: the ``first`` call's, or the
    ``total`` of all of them (0 when never called)."""

    def __init__(self, marks: dict[str, float], calls: dict[str, list[float]]) -> None:
        self.m, self.c = marks, calls

    def first(self, name: str) -> float:
        return (self.c.get(name) or [0.0])[0]

    def total(self, name: str) -> float:
        return sum(self.c.get(name) or [0.0])


def _until_the_job(t: _Timeline) -> dict[str, float]:
    """From the launch to the task function: the interpreter, the imports, the probe, Hydra."""
    m = t.m
    return {
        "interpreter start": m["python_started"],
        "import torch": m["imported_torch"] - m["python_started"],
        "import lightning": m["imported_lightning"] - m["imported_torch"],
        "import hydra, omegaconf": m["imported_hydra"] - m["imported_lightning"],
        "import wandb": m["imported_wandb"] - m["imported_hydra"],
        "import ablate (the rest)": m["imported_ablate"] - m["imported_wandb"],
        "probe's own set-up": m["hydra_main_called"] - m["imported_ablate"],
        "hydra: compose, job dir, logging": m["task_function:start"] - m["hydra_main_called"],
    }


def _job_until_fit(t: _Timeline) -> dict[str, float]:
    """The job's checks, its data, model, callbacks, loggers and Trainer, up to ``trainer.fit``."""
    m, first = t.m, t.first
    return {
        "job: before data (config checks, resume check, seeding)": m["data_instantiate:start"]
        - m["task_function:start"],
        "  of which config checks": first("config_checks"),
        "data: instantiate, prepare_data, setup": m["model_build:start"] - m["data_instantiate:start"],
        "  of which prepare_data (cache verify, or build)": first("data_prepare"),
        # each prepare_data call verifies the same files: this call's share of all the SHA-256 time
        "  of which SHA-256 of the cache files": t.total("sha256_verify") / max(1, len(t.c.get("data_prepare", []))),
        "  of which setup (memory maps, tokenizer)": first("data_setup"),
        "model build (task, init)": m["model_build:end"] - m["model_build:start"],
        "callbacks build": first("callbacks_build"),
        "loggers build (CSV; W&B: wandb.init, offline)": first("loggers_build"),
        "W&B init not done by the loggers build": first("wandb_init"),
        "trainer build": first("trainer_build"),
        "job: the rest before fit (header, run config, gaps)": m["trainer_fit:start"]
        - m["model_build:end"]
        - sum(first(k) for k in ("callbacks_build", "loggers_build", "wandb_init", "trainer_build")),
    }


def _fit(t: _Timeline) -> dict[str, float]:
    """``trainer.fit``: Lightning's set-up, the callbacks' set-up, the first step, the rest."""
    m = t.m
    return {
        "fit: Lightning set-up to callbacks' setup (prepare_data, setup again)": m["setup_fit_first"]
        - m["trainer_fit:start"],
        "fit: callbacks' setup": m["setup_fit_last"] - m["setup_fit_first"],
        "  of which CPU peak probe (peak_flops=auto)": t.first("cpu_peak_probe"),
        "fit: callbacks' setup to first batch (optimiser, dataloader)": m["first_batch_start_first"]
        - m["setup_fit_last"],
        "= launch to first training step": m["first_batch_start_first"],
        "first training step": m["first_batch_end_last"] - m["first_batch_start_first"],
        "rest of fit: later steps, validation, checkpoints, teardown": m["trainer_fit:end"] - m["first_batch_end_last"],
        "  of which validation (full split at the last step)": t.total("validation_in_fit"),
        "  of which after the last step (validation, last checkpoint, teardown)": m["trainer_fit:end"]
        - m["last_batch_end_last"],
    }


def _after_fit(t: _Timeline, wall: float) -> dict[str, float]:
    """After ``trainer.fit``: the task's evaluation, the record, Hydra's end, the interpreter's exit."""
    m = t.m
    eval_start = m.get("evaluate_after_fit:start", m["trainer_fit:end"])
    eval_end = m.get("evaluate_after_fit:end", eval_start)
    p = {
        "between fit and evaluation": eval_start - m["trainer_fit:end"],
        "post-fit evaluation (evaluate_after_fit)": eval_end - eval_start,
    }
    if "test_start_first" in m:
        p["  of which test set-up (prepare_data, setup, dataloader)"] = m["test_start_first"] - eval_start
        p["  of which test loop"] = m["test_end_last"] - m["test_start_first"]
        p["  of which after the test loop"] = eval_end - m["test_end_last"]
    return {
        **p,
        "status, summary, W&B finish": m["task_function:end"] - eval_end,
        "  of which W&B finish": t.total("wandb_finish"),
        "hydra: after the job": m["hydra_main_returned"] - m["task_function:end"],
        "interpreter exit": wall - m["hydra_main_returned"],
        "= process wall time": wall,
        "= SHA-256 verify, all prepare_data calls of the job": t.total("sha256_verify"),
    }


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
    the times at which the job wrote ``.hydra/overrides.yaml`` (its start, once its config checks passed) and
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
