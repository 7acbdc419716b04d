"""The per-job probes of :mod:`ablate.benchmark.sweep_overhead`, imported by the jobs it starts.

- :func:`job_probe`: a Lightning callback added to each sweep job
  (``+callbacks.overhead_probe._target_=ablate.benchmark.overhead_probe.job_probe``) that writes
  ``overhead_probe.json`` to the job's directory: pid, torch threads, and the wall-clock times of
  its hooks.
- :func:`probe_child` (``python -m ablate.benchmark.overhead_probe <marks.json> -- <train.py overrides>``):
  one single run of ``train.py`` in this process, with timestamps around each part of the job: the
  imports, Hydra's compose, the config checks, the data (instantiate, ``prepare_data`` and its
  SHA-256 cache verify, ``setup``), the model, callbacks, loggers and W&B init, the Trainer, the fit
  and its first step, the post-fit evaluation, the status and ``wandb.finish``. The timestamps come
  from wrappers installed around the functions of the run's assembly (:mod:`ablate.run.assembly`),
  checks and lifecycle in this process; the package itself is not changed.

Only the standard library is imported at module level: every job of a measured sweep imports it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

PROBE_FILE = "overhead_probe.json"
LAUNCH_ENV = "SWEEP_OVERHEAD_LAUNCH"  # wall-clock time at which the parent started the child (probe)


def job_probe(path: str | None = None) -> Any:
    """A Lightning callback that records when its hooks run (wall clock, ``time.time()``) and the
    thread count of the job, into ``<trainer.default_root_dir>/overhead_probe.json`` (or ``path``).
    Added to a sweep's jobs as ``+callbacks.overhead_probe._target_=ablate.benchmark.overhead_probe.job_probe``.
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
    import ablate.run.assembly as A
    import ablate.run.lifecycle as LC
    import ablate.run.status as status_record
    import ablate.run.train as T

    mark("imported_ablate")

    from lightning.pytorch import LightningDataModule

    from ablate.callbacks import throughput
    from ablate.data import cache

    cache.sha256_file = timed("sha256_verify", cache.sha256_file)
    throughput.measure_cpu_peak = timed("cpu_peak_probe", throughput.measure_cpu_peak)
    original_instantiate = A.instantiate

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
            data: Any = obj  # an ablate data module (its cache: _build_cache, cache_path)
            calls["data_instantiate"] = [time.perf_counter() - start]
            marks["data_instantiate:start"] = started
            data.prepare_data = timed("data_prepare", data.prepare_data)  # the SHA-256 verify is inside
            data.setup = timed("data_setup", data.setup)
            data._build_cache = timed("data_build_cache", data._build_cache)
            info["cache_dir"] = str(data.cache_path())
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

    original_build_task, original_build_callbacks = A.build_task, A.build_callbacks
    original_build_loggers = A.build_loggers
    T.run = timed("task_function", T.run)
    A.instantiate, A.build_task, A.build_callbacks, A.build_loggers = (
        instantiate,
        build_task,
        build_callbacks,
        build_loggers,
    )
    T.preflight = timed("config_checks", T.preflight)
    LC.finish_wandb = timed("wandb_finish", LC.finish_wandb)
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

    from ablate.config.locations import checkout_root

    repo = checkout_root() or Path.cwd()
    sys.argv = [str(repo / "train.py"), *overrides]
    mark("hydra_main_called")
    import runpy

    try:
        runpy.run_path(str(repo / "train.py"), run_name="__main__")
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


if __name__ == "__main__":  # the start-up probe's child process
    sep = sys.argv.index("--")
    probe_child(Path(sys.argv[1]), sys.argv[sep + 1 :])
