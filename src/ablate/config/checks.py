"""The rules of the ``trainer`` and data keys ablate does not own, the precision/strategy/device
combinations Lightning refuses late, and the warnings a run gives at its start: a bad value raises
:class:`~ablate.errors.ConfigError` naming key, value and valid range, not an error deep in Lightning."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Collection, Mapping
from typing import Any

from ablate.config.types import Rule, check_rules
from ablate.errors import ConfigError
from ablate.metrics import parse


def number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def positive_int(value: Any) -> bool:
    return integer(value) and value >= 1


def optional(predicate: Callable[[Any], bool]) -> Callable[[Any], bool]:
    return lambda v: v is None or predicate(v)


def _max_time(value: Any) -> bool:
    """Lightning's ``Timer`` durations: ``DD:HH:MM:SS`` or a mapping of ``timedelta``'s units."""
    if isinstance(value, str):
        return re.fullmatch(r"\d+:\d\d:\d\d:\d\d", value.strip()) is not None
    if isinstance(value, Mapping):
        units = {"weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds"}
        return bool(value) and all(k in units and number(v) and v >= 0 for k, v in value.items())
    return False


# Lightning 2.6's precision values (lightning.fabric.plugins.precision.precision: _PRECISION_INPUT)
PRECISIONS = (
    64,
    32,
    16,
    "64-true",
    "32-true",
    "16-true",
    "bf16-true",
    "16-mixed",
    "bf16-mixed",
    "64",
    "32",
    "16",
    "bf16",
)


def _devices(value: Any) -> bool:
    """``trainer.devices``: ``"auto"``, ``-1``, a positive count, a list of indices or their string ``"0,1"``."""
    if value == "auto" or value == -1:
        return True
    if integer(value):
        return value >= 1
    if isinstance(value, str):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        return value.strip() == "-1" or (bool(parts) and all(p.isdigit() for p in parts))
    if isinstance(value, (list, tuple)):
        return bool(value) and all(integer(i) and i >= 0 for i in value)
    return False


TRAINER_RULES: dict[str, Rule] = {
    "max_steps": (
        lambda v: integer(v) and (v >= 1 or v == -1),
        "a positive number of optimiser steps (-1: bounded by trainer.max_epochs)",
    ),
    "max_epochs": (optional(lambda v: integer(v) and (v >= 1 or v == -1)), "null or a positive number of epochs"),
    "val_check_interval": (
        optional(lambda v: (integer(v) and v >= 1) or (isinstance(v, float) and 0 < v <= 1)),
        "a positive number of optimiser steps, or a fraction of an epoch in (0, 1]",
    ),
    "log_every_n_steps": (positive_int, "a positive number of steps"),
    "limit_val_batches": (
        lambda v: (integer(v) and v >= 0) or (isinstance(v, float) and 0 <= v <= 1),
        "a number of batches >= 0, or a fraction in [0, 1]",
    ),
    "max_time": (
        optional(_max_time),
        "null, a duration DD:HH:MM:SS (e.g. 00:12:00:00) or a mapping of days, hours, minutes, seconds",
    ),
    "devices": (
        _devices,
        'a positive number of devices, -1 or "auto" (all of them), a list of device indices, or their string "0,1"',
    ),
    "precision": (
        lambda v: v in PRECISIONS and not isinstance(v, bool),
        "expected null or one of " + ", ".join(map(repr, PRECISIONS)),
    ),
}
DATA_RULES: dict[str, Rule] = {
    "batch_size": (positive_int, "a positive number of sequences (token batches for translation) per optimiser step"),
    "micro_batch_size": (optional(positive_int), "null or a positive per-device batch"),
    "eval_batch_size": (optional(positive_int), "null or a positive per-device batch"),
    "seq_len": (positive_int, "a positive number of tokens"),
    "eval_seq_len": (optional(positive_int), "null or a positive number of tokens"),
    "train_stride": (
        optional(positive_int),
        "null (training windows side by side: a stride of data.seq_len) or a positive number of tokens",
    ),
    "max_tokens": (positive_int, "a positive number of tokens per batch"),
    "num_workers": (lambda v: integer(v) and v >= 0, "a number of worker processes >= 0"),
}


def clip_validation_interval(trainer: Any) -> str | None:
    """A validation interval longer than the run becomes the run's length, so a shortened run still
    validates at its end. Changes ``trainer`` in place (the config recorded is the one used); returns
    what it did, or None."""
    interval, max_steps = trainer.get("val_check_interval"), trainer.get("max_steps", -1)
    if not (integer(interval) and integer(max_steps)) or max_steps <= 0 or interval <= max_steps:
        return None
    if trainer.get("limit_val_batches", 1.0) == 0:
        return None
    trainer["val_check_interval"] = max_steps
    return (
        f"trainer.val_check_interval={interval} > trainer.max_steps={max_steps}: validating at the end of the run "
        f"(trainer.val_check_interval={max_steps})"
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


def matmul_precision(cfg: Mapping[str, Any]) -> str:
    """``runtime.matmul_precision``: ``auto`` is ``high`` (TF32, as nanoGPT's ``allow_tf32``) on CUDA,
    ``highest`` (exact fp32) on the CPU, where the numbers must not change."""
    runtime, trainer = cfg.get("runtime") or {}, cfg.get("trainer") or {}
    value = runtime.get("matmul_precision", "auto")
    if value != "auto":
        return str(value)
    accelerator = trainer.get("accelerator", "auto")
    on_gpu = accelerator in GPU_ACCELERATORS or (accelerator in (None, "auto") and not _resolves_to_cpu(accelerator))
    return "high" if on_gpu else "highest"


def check_precision_and_strategy(cfg: Mapping[str, Any]) -> None:
    """Refuse what Lightning refuses or silently changes only after the data is read: an unknown
    ``trainer.precision``, ``16-mixed`` on the CPU (Lightning would train bf16 while the run records
    16-mixed), FSDP without ``trainer.accelerator=gpu``."""
    trainer = cfg.get("trainer") or {}
    check_rules(trainer, "trainer", {"precision": TRAINER_RULES["precision"]})
    precision = trainer.get("precision", "32-true")
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


def warmup_problem(cfg: Mapping[str, Any]) -> str | None:
    """Why the LR warmup would take the whole run (or more), or None. A warning, not an error: a
    short debugging run may mean it; a real run whose LR never leaves warmup measures warmup only."""
    optim, trainer = cfg.get("optim") or {}, cfg.get("trainer") or {}
    warmup, max_steps = optim.get("warmup_steps") or 0, trainer.get("max_steps", -1)
    if not (integer(warmup) and integer(max_steps)) or warmup <= 0 or max_steps <= 0 or warmup < max_steps:
        return None
    if trainer.get("fast_dev_run"):  # one step through every code path: no schedule to speak of
        return None
    return (
        f"optim.warmup_steps={warmup} >= trainer.max_steps={max_steps}: the learning rate never reaches "
        f"optim.lr (the whole run is warmup); lower optim.warmup_steps (e.g. {max(1, max_steps // 10)})"
    )


def start_warnings(cfg: Mapping[str, Any], ranked: Collection[str] | None) -> list[str]:
    """What a run warns about at its start: settings that are valid but probably not meant."""
    problem = optimized_metric_problem(cfg, ranked)
    found = [f"{problem}: a sweeper optimising it would get NaN from every job"] if problem else []
    return found + [w for w in (warmup_problem(cfg),) if w]


def optimized_metric_problem(cfg: Mapping[str, Any], ranked: Collection[str] | None) -> str | None:
    """Why ``optimized_metric`` (what ``train.py`` returns to a sweeper) can never be logged by this run,
    or None. ``ranked``: the quantities the task logs with a direction (None: not checked)."""
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
