"""One training job: config -> data -> model -> Lightning Trainer -> status.

``train.py`` at the repository root is the ``@hydra.main`` entry point that calls :func:`run`.
Every job leaves ``status.json`` in its output directory (``completed``, ``diverged`` or
``crashed``, with steps and wall time), which is what sweep summaries read first.
"""

from __future__ import annotations

import json
import math
import time
import traceback
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.callbacks import Callback
from omegaconf import DictConfig, OmegaConf

from ablate.callbacks.divergence import DivergenceMonitor
from ablate.callbacks.throughput import ThroughputMonitor, flops_per_token
from ablate.config import ModelSpec, model_spec
from ablate.console import param_estimate, print_config_tree, print_param_count
from ablate.logging import build_loggers, finish_wandb, multirun_group, run_name_from_overrides, set_wandb_summary
from ablate.tasks.lm import LanguageModelTask


def eval_max_len(cfg: DictConfig) -> int:
    """The longest sequence the model will see: training length or the (longer) eval length."""
    return max(cfg.data.seq_len, cfg.data.get("eval_seq_len") or 0)


def check_config(cfg: DictConfig) -> None:
    """Fail on an invalid architecture before any data is read or tensor allocated."""
    model_spec(cfg, vocab_size=1, max_len=eval_max_len(cfg))


def is_multirun() -> bool:
    return HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN


def job_overrides() -> list[str]:
    return list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else []


def build_callbacks(cfg: DictConfig, spec: ModelSpec, n_params: int) -> list[Callback]:
    callbacks = [instantiate(c) for c in cfg.get("callbacks", {}).values() if c is not None]
    fpt = flops_per_token(n_params, spec.n_layers + spec.encoder_layers, spec.d_model, cfg.data.seq_len)
    for cb in callbacks:
        if isinstance(cb, ThroughputMonitor) and cb.flops_per_token is None:
            cb.flops_per_token = fpt
    return callbacks


def write_status(output_dir: Path, status: dict[str, Any]) -> None:
    tmp = output_dir / "status.json.tmp"
    tmp.write_text(json.dumps(status, indent=2, default=str))
    tmp.replace(output_dir / "status.json")


def _finite_or_none(value: Any) -> float | None:
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def fit(cfg: DictConfig, output_dir: Path) -> dict[str, Any]:
    """Train one configuration; returns its status record."""
    check_config(cfg)
    L.seed_everything(cfg.seed, workers=True)
    if cfg.runtime.flush_denormal:
        # Post-LN's normalised outputs feed tiny gradients that go denormal on CPU and run
        # 12-18% slower there; flushing them to zero removes the gap (no effect on GPU).
        torch.set_flush_denormal(True)
    torch.set_float32_matmul_precision(cfg.runtime.matmul_precision)

    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    spec = model_spec(cfg, vocab_size=datamodule.vocab_size, max_len=eval_max_len(cfg))
    task = LanguageModelTask(spec.as_dict(), OmegaConf.to_container(cfg.optim, resolve=True), compile=cfg.model.get("compile", False))
    task.tokenizer = datamodule.tokenizer

    n_params = task.model.num_params()
    estimate = param_estimate(spec.n_layers, spec.d_model, spec.vocab_size)
    print_param_count(n_params, estimate)

    run_config = {**OmegaConf.to_container(cfg, resolve=True), "axes": spec.axes(), "params": n_params, "params_estimate": estimate}
    loggers = build_loggers(cfg, output_dir, run_name_from_overrides(job_overrides()), multirun_group(), run_config)
    for logger in loggers:
        logger.log_metrics({"model/params": n_params, "model/params_estimate": estimate}, step=0)
    callbacks = build_callbacks(cfg, spec, n_params)
    trainer: L.Trainer = instantiate(cfg.trainer, logger=loggers, callbacks=callbacks, default_root_dir=str(output_dir))

    start = time.perf_counter()
    trainer.fit(task, datamodule=datamodule, ckpt_path=cfg.get("ckpt_path"))
    divergence = next((cb for cb in trainer.callbacks if isinstance(cb, DivergenceMonitor)), None)
    diverged = divergence is not None and divergence.diverged_at is not None
    metrics = {k: _finite_or_none(v) for k, v in trainer.callback_metrics.items()}
    if cfg.eval.test_at_end and not diverged:
        trainer.test(task, datamodule=datamodule, verbose=False)
        metrics.update({k: _finite_or_none(v) for k, v in trainer.callback_metrics.items() if k.startswith("test/")})
    status = {
        "status": "diverged" if diverged else "completed",
        "diverged_at_step": divergence.diverged_at if diverged else None,
        "divergence_reason": divergence.reason if diverged else None,
        "steps": trainer.global_step,
        "wall_time_s": round(time.perf_counter() - start, 2),
        "params": n_params,
        "axes": spec.axes(),
        "overrides": job_overrides(),
        "metrics": metrics,
    }
    for key in ("status", "diverged_at_step", "steps", "wall_time_s"):
        set_wandb_summary(loggers, key, status[key])
    set_wandb_summary(loggers, "diverged", diverged)
    return status


def run(cfg: DictConfig) -> float:
    """Run one job and always leave a status record. In a multirun a crash is recorded and the
    sweep goes on; in a single run it is raised. Returns the value for sweepers to optimise."""
    output_dir = Path(cfg.paths.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    if cfg.get("print_config", True):
        print_config_tree(cfg)
    exit_code = 0
    try:
        status = fit(cfg, output_dir)
    except Exception as err:  # noqa: BLE001 - recorded, then re-raised unless in a sweep
        exit_code = 1
        status = {"status": "crashed", "error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc(),
                  "overrides": job_overrides()}
        write_status(output_dir, status)
        if not is_multirun():
            raise
        print(f"job crashed ({status['error']}); recorded in {output_dir / 'status.json'}; the sweep continues")
    finally:
        finish_wandb(exit_code)
    write_status(output_dir, status)
    value = (status.get("metrics") or {}).get(cfg.get("optimized_metric", "val/loss"))
    return value if value is not None else float("nan")
