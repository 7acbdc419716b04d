"""Run-control numbers checked at compose time, before any data is read or tensor allocated.

:func:`ablate.config.model.model_spec` checks the architecture; this module checks everything else a
user types as a number: the training length and validation cadence (``trainer.*``), the batch
(``data.*``) and the optimiser and schedule (``optim.*``). A bad value raises
:class:`~ablate.config.options.ConfigError` naming the key, the value and the valid range, instead of a
``ZeroDivisionError`` inside Lightning, a torch error after the data load, or -- worst -- a run
that "completes" having done something else (``optim.min_lr_ratio=5`` raising the LR 5x,
``optim.grad_clip=-1`` silently disabling clipping, ``trainer.max_steps=0`` training nothing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

from omegaconf import ListConfig

from ablate.config.options import ConfigError
from ablate.metrics import parse
from ablate.optim import OPTIMIZERS, SCHEDULES


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(ok: bool, key: str, value: Any, valid: str) -> None:
    if not ok:
        raise ConfigError(f"{key}={value!r} is invalid: {valid}")


def _check(node: Mapping[str, Any], prefix: str, rules: dict[str, tuple[Callable[[Any], bool], str]]) -> None:
    """Apply ``key -> (predicate, description of the valid values)`` to the keys present in ``node``."""
    for key, (predicate, valid) in rules.items():
        if key in node:
            try:
                ok = bool(predicate(node[key]))
            except (TypeError, ValueError):  # a value of another type (optim.betas=0.9: no len())
                ok = False
            _require(ok, f"{prefix}.{key}", node[key], valid)


def _positive_int(v: Any) -> bool:
    return _integer(v) and v >= 1


def _optional(predicate: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or predicate(v)


TRAINER_RULES = {
    "max_steps": (
        lambda v: _integer(v) and (v >= 1 or v == -1),
        "a positive number of optimiser steps (-1: bounded by trainer.max_epochs)",
    ),
    "max_epochs": (_optional(lambda v: _integer(v) and (v >= 1 or v == -1)), "null or a positive number of epochs"),
    "val_check_interval": (
        _optional(lambda v: (_integer(v) and v >= 1) or (isinstance(v, float) and 0 < v <= 1)),
        "a positive number of optimiser steps, or a fraction of an epoch in (0, 1]",
    ),
    "log_every_n_steps": (_positive_int, "a positive number of steps"),
    "limit_val_batches": (
        lambda v: (_integer(v) and v >= 0) or (isinstance(v, float) and 0 <= v <= 1),
        "a number of batches >= 0, or a fraction in [0, 1]",
    ),
}
DATA_RULES = {
    "batch_size": (_positive_int, "a positive number of sequences (token batches for translation) per optimiser step"),
    "micro_batch_size": (_optional(_positive_int), "null or a positive per-device batch"),
    "eval_batch_size": (_optional(_positive_int), "null or a positive per-device batch"),
    "seq_len": (_positive_int, "a positive number of tokens"),
    "eval_seq_len": (_optional(_positive_int), "null or a positive number of tokens"),
    "max_tokens": (_positive_int, "a positive number of tokens per batch"),
    "num_workers": (lambda v: _integer(v) and v >= 0, "a number of worker processes >= 0"),
}
OPTIM_RULES = {
    "name": (lambda v: v in OPTIMIZERS, f"one of {', '.join(OPTIMIZERS)}"),
    "schedule": (lambda v: v in SCHEDULES, f"one of {', '.join(SCHEDULES)}"),
    "lr": (lambda v: _number(v) and v > 0, "a positive learning rate"),
    "warmup_steps": (lambda v: _integer(v) and v >= 0, "a number of steps >= 0"),
    "decay_steps": (_optional(_positive_int), "null (= trainer.max_steps) or a positive number of steps"),
    "min_lr_ratio": (lambda v: _number(v) and 0 <= v <= 1, "a fraction of the peak LR in [0, 1]"),
    "grad_clip": (_optional(lambda v: _number(v) and v > 0), "null (no clipping) or a positive maximum gradient norm"),
    "weight_decay": (lambda v: _number(v) and v >= 0, "a weight decay >= 0"),
    "label_smoothing": (lambda v: _number(v) and 0 <= v < 1, "a value in [0, 1)"),
    "eps": (lambda v: _number(v) and v > 0, "a positive epsilon"),
    "betas": (
        lambda v: (
            isinstance(v, (list, tuple, ListConfig)) and len(v) == 2 and all(_number(b) and 0 <= b < 1 for b in v)
        ),
        "two coefficients in [0, 1), e.g. [0.9, 0.99]",
    ),
    "momentum": (_optional(lambda v: _number(v) and 0 <= v < 1), "null or a momentum in [0, 1)"),
}


def clip_validation_interval(trainer: Any) -> str | None:
    """Shortening a run takes one override: a validation interval longer than the run
    (``python train.py trainer.max_steps=100`` with the default interval of 500) becomes the run's
    length, so the run still validates once, at its end. Changes ``trainer.val_check_interval``
    in place (so the config recorded everywhere is the one used) and returns what it did, or None.
    Nothing to do when validation is off (``trainer.limit_val_batches=0``)."""
    interval, max_steps = trainer.get("val_check_interval"), trainer.get("max_steps", -1)
    if not (_integer(interval) and _integer(max_steps)) or max_steps <= 0 or interval <= max_steps:
        return None
    if trainer.get("limit_val_batches", 1.0) == 0:
        return None
    trainer["val_check_interval"] = max_steps
    return (
        f"trainer.val_check_interval={interval} > trainer.max_steps={max_steps}: validating at the end of the run "
        f"(trainer.val_check_interval={max_steps})"
    )


# Lightning 2.6's precision values (lightning.fabric.plugins.precision.precision: _PRECISION_INPUT)
PRECISIONS = (
    "32-true",
    "bf16-mixed",
    "16-mixed",
    "bf16-true",
    "16-true",
    "64-true",
    "32",
    "16",
    "bf16",
    "64",
    32,
    16,
    64,
)
GPU_ACCELERATORS = ("gpu", "cuda")


def _resolves_to_cpu(accelerator: Any) -> bool:
    """Whether ``trainer.accelerator`` will train on the CPU: ``cpu``, or ``auto`` without a CUDA device."""
    if accelerator == "cpu":
        return True
    if accelerator in (None, "auto"):
        import torch

        return not torch.cuda.is_available()
    return False


def _strategy_name(strategy: Any) -> str:
    """``trainer.strategy`` as a name: a string as given, a ``_target_`` node by its class name."""
    if isinstance(strategy, Mapping):
        return str(strategy.get("_target_", "")).rsplit(".", 1)[-1].lower().removesuffix("strategy")
    return str(strategy or "auto").lower()


MATMUL_PRECISIONS = ("auto", "highest", "high", "medium")


def matmul_precision(cfg: Mapping[str, Any]) -> str:
    """The fp32 matmul precision a run sets before its Trainer exists (``runtime.matmul_precision``):
    ``auto`` is ``high`` (TF32 on Ampere and later GPUs, what nanoGPT's ``allow_tf32`` does) when the
    trainer runs on CUDA, ``highest`` (exact fp32) on the CPU, where the numbers must not change.
    Set on a GPU, it also keeps Lightning from printing its tip to set it."""
    runtime, trainer = cfg.get("runtime") or {}, cfg.get("trainer") or {}
    value = runtime.get("matmul_precision", "auto")
    if value not in MATMUL_PRECISIONS:
        raise ConfigError(f"runtime.matmul_precision={value!r} is invalid: one of {', '.join(MATMUL_PRECISIONS)}")
    if value != "auto":
        return str(value)
    accelerator = trainer.get("accelerator", "auto")
    on_gpu = accelerator in GPU_ACCELERATORS or (accelerator in (None, "auto") and not _resolves_to_cpu(accelerator))
    return "high" if on_gpu else "highest"


def check_precision_and_strategy(cfg: Mapping[str, Any]) -> None:
    """Combinations of precision, optimiser, clipping, strategy and device that Lightning refuses or
    silently changes only once the Trainer is built or the first step runs, after the data is read.

    What works (a :class:`~ablate.tasks.base.TaskModule` clips in ``configure_gradient_clipping``):
    every precision with every optimiser and ``optim.grad_clip``, fused AdamW included (bf16 has
    nothing to unscale; fp16 unscales first), under the single-device, DDP and FSDP strategies,
    with or without ``model.compile``. Refused here, naming the key to change:

    * a ``trainer.precision`` Lightning does not know;
    * ``16-mixed`` on the CPU (Lightning would train bf16 instead, while the run records 16-mixed);
    * FSDP without ``trainer.accelerator=gpu`` (Lightning accepts FSDP on explicit GPUs only).
    """
    matmul_precision(cfg)  # a valid runtime.matmul_precision
    trainer = cfg.get("trainer") or {}
    precision = trainer.get("precision", "32-true")
    if precision not in PRECISIONS:
        valid = ", ".join(p for p in PRECISIONS if isinstance(p, str) and "-" in p)
        raise ConfigError(f"trainer.precision={precision!r} is invalid: one of {valid}")
    accelerator = trainer.get("accelerator", "auto")
    if str(precision) in ("16-mixed", "16") and _resolves_to_cpu(accelerator):
        raise ConfigError(
            f"trainer.precision={precision} (fp16 autocast with a gradient scaler) needs a CUDA GPU, and this run trains "
            f"on the CPU (trainer.accelerator={accelerator}): use trainer.precision=bf16-mixed or 32-true"
        )
    if _strategy_name(trainer.get("strategy")) in ("fsdp", "fsdp_cpu_offload") and accelerator not in GPU_ACCELERATORS:
        raise ConfigError(
            f"trainer=fsdp needs trainer.accelerator=gpu (Lightning runs FSDP on explicit GPUs only), got "
            f"trainer.accelerator={accelerator}"
        )


def check_run_numbers(cfg: Mapping[str, Any]) -> None:
    """Check the run-control numbers of a composed config (raises :class:`ConfigError`)."""
    trainer, data, optim = (cfg.get(k) or {} for k in ("trainer", "data", "optim"))
    _check(trainer, "trainer", TRAINER_RULES)
    if trainer.get("max_steps", -1) == -1 and trainer.get("max_epochs") in (None, -1):
        raise ConfigError(
            "trainer.max_steps=-1 and trainer.max_epochs unset: training would never end; set one of them"
        )
    _check(data, "data", DATA_RULES)
    _check(optim, "optim", OPTIM_RULES)
    if "seed" in cfg:
        _require(_integer(cfg["seed"]), "seed", cfg["seed"], "an integer")
    check_precision_and_strategy(cfg)


def warmup_problem(cfg: Mapping[str, Any]) -> str | None:
    """Why the LR warmup would take the whole run (or more), or None. A warning, not an error: a
    short debugging run may mean it; a real run whose LR never leaves warmup measures warmup only."""
    optim, trainer = cfg.get("optim") or {}, cfg.get("trainer") or {}
    warmup, max_steps = optim.get("warmup_steps") or 0, trainer.get("max_steps", -1)
    if not (_integer(warmup) and _integer(max_steps)) or warmup <= 0 or max_steps <= 0 or warmup < max_steps:
        return None
    if trainer.get("fast_dev_run"):  # one step through every code path: no schedule to speak of
        return None
    return (
        f"optim.warmup_steps={warmup} >= trainer.max_steps={max_steps}: the learning rate never reaches "
        f"optim.lr (the whole run is warmup); lower optim.warmup_steps (e.g. {max(1, max_steps // 10)})"
    )


def start_warnings(cfg: Mapping[str, Any], ranked: Collection[str] | None) -> list[str]:
    """What a run warns about at its start: settings that are valid but probably not meant.
    ``ranked``: what :func:`optimized_metric_problem` needs of the run's task."""
    problem = optimized_metric_problem(cfg, ranked)
    found = [f"{problem}: a sweeper optimising it would get NaN from every job"] if problem else []
    return found + [w for w in (warmup_problem(cfg),) if w]


def optimized_metric_problem(cfg: Mapping[str, Any], ranked: Collection[str] | None) -> str | None:
    """Why ``optimized_metric`` (what ``train.py`` returns to a sweeper such as Optuna) can never
    be logged by this run, or None: it must be a training, validation or test metric that the
    task declares with a direction. ``ranked``: the quantities the run's task logs with a direction
    (:func:`ablate.tasks.ranked_metrics`; None: a task not registered, not checked). A warning at
    start, not an error: a plain run or grid sweep does not use the value."""
    metric = cfg.get("optimized_metric")
    if not metric:
        return None
    task = str((cfg.get("task") or {}).get("name", "lm"))
    trainer = cfg.get("trainer") or {}
    parsed = parse(str(metric))
    if ranked is not None and not (parsed.split in ("train", "val", "test") and parsed.quantity in ranked):
        return f"optimized_metric={metric} is not logged by task={task} (it logs train/, val/ and test/ {', '.join(ranked)})"
    if str(metric).startswith("val/") and trainer.get("limit_val_batches", 1.0) == 0:
        return f"optimized_metric={metric} is never logged: validation is off (trainer.limit_val_batches=0)"
    if str(metric).startswith("test/") and not (cfg.get("eval") or {}).get("test_at_end", True):
        return f"optimized_metric={metric} is never logged: eval.test_at_end=false"
    return None
