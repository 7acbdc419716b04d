"""The per-job probes of :mod:`benchmarks.sweep_overhead`, imported by the jobs it starts.

- :func:`job_probe`: a Lightning callback added to each sweep job
  (``+callbacks.overhead_probe._target_=benchmarks.overhead_probe.job_probe``) that writes
  ``overhead_probe.json`` to the job's directory: pid, torch threads, and the wall-clock times of
  its hooks.
- :func:`probe_child` (``python -m benchmarks.overhead_probe <marks.json> -- <train.py overrides>``):
  one single run of ``train.py`` in this process, with timestamps around each part of the job: the
  imports, Hydra's compose, the config checks, the data (instantiate, ``prepare_data`` and its
  SHA-256 cache verify, ``setup``), the model, callbacks, loggers and W&B init, the Trainer, the fit
  and its first step, the post-fit evaluation, the status and ``wandb.finish``. The timestamps come
  from wrappers installed around the functions of the run's assembly (:mod:`ablate.run.assembly`),
  plan and record in this process; the package itself is not changed.

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
    Added to a sweep's jobs as ``+callbacks.overhead_probe._target_=benchmarks.overhead_probe.job_probe``.
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


class _Probe:
    """The timestamps of one probed run (seconds since the parent launched this process): ``marks``,
    when each point of the run was first reached (an ``:end`` mark: last left); ``calls``, the
    duration of every call of a wrapped function; ``info``, what the run told along the way."""

    def __init__(self, launched: float) -> None:
        self.launched = launched
        self.marks: dict[str, float] = {}
        self.calls: dict[str, list[float]] = {}
        self.info: dict[str, Any] = {}

    def now(self) -> float:
        return time.time() - self.launched

    def mark(self, name: str) -> None:
        self.marks.setdefault(name, self.now())

    def timed(self, name: str, fn: Any) -> Any:
        """``fn`` with a ``name:start`` mark, a ``name:end`` mark and each call's duration."""

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.mark(f"{name}:start")
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.calls.setdefault(name, []).append(time.perf_counter() - start)
                self.marks[f"{name}:end"] = self.now()

        return wrapper


def probe_child(out_path: Path, overrides: list[str]) -> None:
    """Run ``train.py overrides`` (a single run) in this process with timestamps around its parts;
    write them (seconds since the parent launched this process) to ``out_path``."""
    probe = _Probe(float(os.environ.get(LAUNCH_ENV, time.time())))
    probe.mark("python_started")
    _import_the_stack(probe)
    _wrap_the_job(probe)
    try:
        _run_train(probe, overrides)
    finally:
        probe.mark("hydra_main_returned")
        _write_record(probe, out_path)


def _import_the_stack(probe: _Probe) -> None:
    """Import what a job imports, one library at a time, marking when each is done."""
    import torch  # noqa: F401

    probe.mark("imported_torch")
    import lightning  # noqa: F401

    probe.mark("imported_lightning")
    import hydra  # noqa: F401
    import omegaconf  # noqa: F401

    probe.mark("imported_hydra")
    import wandb  # noqa: F401

    probe.mark("imported_wandb")
    import ablate.run.assembly
    import ablate.run.record
    import ablate.run.status
    import ablate.run.train  # noqa: F401

    probe.mark("imported_ablate")


def _wrap_the_job(probe: _Probe) -> None:
    """Install the timing wrappers around the functions of the job's checks, assembly and record
    (the modules' attributes in this process; the package itself is not changed)."""
    import ablate.run.assembly as A
    import ablate.run.record as LC
    import ablate.run.status as status_record
    import ablate.run.train as T
    from ablate.callbacks import throughput
    from ablate.data import cache

    cache.sha256_file = probe.timed("sha256_verify", cache.sha256_file)
    throughput.measure_cpu_peak = probe.timed("cpu_peak_probe", throughput.measure_cpu_peak)
    first, last = _boundary_callbacks(probe)
    T.run = probe.timed("task_function", T.run)
    A.instantiate = _probed_instantiate(probe, A.instantiate)
    A.build_task = _probed_build_task(probe, A.build_task)
    A.build_callbacks = _probed_build_callbacks(probe, A.build_callbacks, first, last)
    A.build_loggers = _probed_build_loggers(probe, A.build_loggers)
    T.check = probe.timed("config_checks", T.check)
    LC.finish_wandb = probe.timed("wandb_finish", LC.finish_wandb)
    status_record.write_text_atomically = probe.timed(
        "write_status", status_record.write_text_atomically
    )  # status.json


def _probed_instantiate(probe: _Probe, original: Any) -> Any:
    """Hydra's ``instantiate`` as the assembly calls it: the Trainer's build, fit and test timed; the
    data module's instantiation, ``prepare_data`` (the SHA-256 verify is inside), ``setup`` and cache
    build timed, and its cache directory noted."""
    from lightning.pytorch import LightningDataModule

    def instantiate(config: Any, *args: Any, **kwargs: Any) -> Any:
        target = str(config.get("_target_", "")) if hasattr(config, "get") else ""
        if target.endswith("Trainer"):
            obj = probe.timed("trainer_build", original)(config, *args, **kwargs)
            obj.fit = probe.timed("trainer_fit", obj.fit)
            obj.test = probe.timed("trainer_test", obj.test)
            return obj
        start, started = time.perf_counter(), probe.now()
        obj = original(config, *args, **kwargs)
        if isinstance(obj, LightningDataModule):
            data: Any = obj  # an ablate data module (its cache: _build_cache, cache_path)
            probe.calls["data_instantiate"] = [time.perf_counter() - start]
            probe.marks["data_instantiate:start"] = started
            data.prepare_data = probe.timed("data_prepare", data.prepare_data)
            data.setup = probe.timed("data_setup", data.setup)
            data._build_cache = probe.timed("data_build_cache", data._build_cache)
            probe.info["cache_dir"] = str(data.cache_path())
        return obj

    return instantiate


def _probed_build_task(probe: _Probe, original: Any) -> Any:
    """The model's build timed, and the task's evaluation after fit."""

    def build_task(*args: Any, **kwargs: Any) -> Any:
        task = probe.timed("model_build", original)(*args, **kwargs)
        task.evaluate_after_fit = probe.timed("evaluate_after_fit", task.evaluate_after_fit)
        return task

    return build_task


def _probed_build_callbacks(probe: _Probe, original: Any, first: Any, last: Any) -> Any:
    """The callbacks' build timed, with the probe's own callbacks placed first and last."""

    def build_callbacks(*args: Any, **kwargs: Any) -> Any:
        return [first, *probe.timed("callbacks_build", original)(*args, **kwargs), last]

    return build_callbacks


def _probed_build_loggers(probe: _Probe, original: Any) -> Any:
    """The loggers' build timed, then ``wandb.init`` on its own (``train.py`` asks for the W&B run
    id right after the build: the run starts there)."""

    def build_loggers(*args: Any, **kwargs: Any) -> Any:
        loggers = probe.timed("loggers_build", original)(*args, **kwargs)

        def init_wandb() -> None:
            for logger in loggers:
                if type(logger).__name__ == "WandbLogger":
                    _ = logger.experiment

        probe.timed("wandb_init", init_wandb)()
        return loggers

    return build_loggers


def _boundary_callbacks(probe: _Probe) -> tuple[Any, Any]:
    """Two callbacks, placed first and last among the run's: the span of their ``setup`` is the
    callbacks' set-up (the CPU peak probe of the throughput monitor), that of their batch hooks the
    first and last training step, that of their validation hooks the validation inside fit."""
    import lightning

    class Hooks(lightning.pytorch.Callback):
        def __init__(self, where: str) -> None:
            self.where = where
            self.val_start: float | None = None

        def setup(self, trainer, pl_module, stage):
            probe.mark(f"setup_{getattr(stage, 'value', stage)}_{self.where}")

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            probe.mark(f"first_batch_start_{self.where}")

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            probe.mark(f"first_batch_end_{self.where}")
            probe.marks[f"last_batch_end_{self.where}"] = probe.now()

        def on_validation_start(self, trainer, pl_module):
            if self.where == "first" and trainer.state.fn == "fit":
                self.val_start = time.perf_counter()

        def on_validation_end(self, trainer, pl_module):
            if self.where == "last" and first.val_start is not None:
                probe.calls.setdefault("validation_in_fit", []).append(time.perf_counter() - first.val_start)
                first.val_start = None

        def on_test_start(self, trainer, pl_module):
            probe.mark(f"test_start_{self.where}")

        def on_test_end(self, trainer, pl_module):
            probe.marks[f"test_end_{self.where}"] = probe.now()

    first, last = Hooks("first"), Hooks("last")
    return first, last


def _run_train(probe: _Probe, overrides: list[str]) -> None:
    """``train.py overrides`` run as ``__main__`` in this process, as ``python train.py`` would."""
    from ablate.config.locations import checkout_root

    repo = checkout_root() or Path.cwd()
    sys.argv = [str(repo / "train.py"), *overrides]
    probe.mark("hydra_main_called")
    import runpy

    runpy.run_path(str(repo / "train.py"), run_name="__main__")


def _write_record(probe: _Probe, out_path: Path) -> None:
    """The marks, the calls, what the run told and the size of its data cache, as JSON."""
    import torch

    cache_dir = Path(probe.info["cache_dir"]) if "cache_dir" in probe.info else None
    record = {
        "marks": probe.marks,
        "calls": probe.calls,
        "torch_threads": torch.get_num_threads(),
        **probe.info,
        "cache_built": "data_build_cache" in probe.calls,
        "cache_bytes": sum(f.stat().st_size for f in cache_dir.iterdir() if f.is_file()) if cache_dir else None,
    }
    out_path.write_text(json.dumps(record, indent=2))


if __name__ == "__main__":  # the start-up probe's child process
    sep = sys.argv.index("--")
    probe_child(Path(sys.argv[1]), sys.argv[sep + 1 :])
