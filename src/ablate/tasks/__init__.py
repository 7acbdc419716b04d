"""The tasks, one :class:`TaskSpec` each, and the registry everything else asks.

A task is declared once, here or by :func:`register_task` from anywhere; everything else iterates
:data:`TASKS` and names no task. Adding one: a LightningModule, a ``TaskSpec`` passed to
:func:`register_task`, and ``conf/task/<name>.yaml``. No torch, no Lightning here: what a spec
names is imported when used.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from ablate import metrics
from ablate.errors import ConfigError
from ablate.metrics import Metric

if TYPE_CHECKING:
    from omegaconf import DictConfig

    from ablate.nn.spec import ModelSpec
    from ablate.tasks.base import TaskModule
    from ablate.tasks.config_checks import TaskChecks

# "package.module:name" (imported when first used) or the object itself
Ref = str | Any


def resolve(ref: Ref) -> Any:
    """The object an import string ``package.module:name`` names (or ``ref`` itself)."""
    if not isinstance(ref, str):
        return ref
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)


@dataclass(frozen=True)
class TaskSpec:
    """Everything the framework knows about one task.

    ``module``: its :class:`~ablate.tasks.base.TaskModule` subclass; ``build``: ``(cfg, datamodule,
    model_spec) -> module``; ``metrics``: what it logs; ``headline_metric``: what the analysis
    compares by default; ``console_metric``: a sweep table's column; ``evaluate_checkpoint``:
    ``(eval_cfg) -> None``, what ``eval.py`` does, with ``eval_options`` only its checkpoints take;
    ``checkpoint_scripts``: named when a checkpoint reaches the wrong script; ``panel_metrics``: the
    W&B workspace's panels; ``grad_norm_parts``: ``(stack prefix, part)`` of its per-layer gradient
    norms; ``checks``: its light :class:`~ablate.tasks.config_checks.TaskChecks` (read without
    torch); ``batch_tokens_key``: the data key that times ``data.batch_size`` gives an optimiser
    step's tokens, exact when ``fixed_batch_tokens`` (else the analysis reads ``train/tokens_seen``)."""

    name: str
    module: Ref
    build: Ref
    metrics: tuple[Metric, ...]
    headline_metric: str
    console_metric: str
    checkpoint_scripts: str
    evaluate_checkpoint: Ref | None = None
    eval_options: tuple[str, ...] = ()
    panel_metrics: tuple[str, ...] = ()
    batch_tokens_key: str = "data.seq_len"
    fixed_batch_tokens: bool = True
    grad_norm_parts: tuple[tuple[str, str], ...] = field(default=())
    checks: Ref | None = None

    def module_class(self) -> type[TaskModule]:
        return cast("type[TaskModule]", resolve(self.module))

    def checks_class(self) -> type[TaskChecks]:
        """The light class ``checks`` names, or else the module itself (which imports torch)."""
        return cast("type[TaskChecks]", resolve(self.checks) if self.checks is not None else self.module_class())

    def logs(self, name: str) -> bool:
        """Whether this task logs the metric ``name`` (declared by it, or by every run)."""
        quantity = metrics.parse(name).quantity
        return any(m.name == quantity for m in (*self.metrics, *metrics.RUN_METRICS))

    @property
    def ranked_metrics(self) -> tuple[str, ...]:
        """The quantities of its own that have a goal (what a run of it can be ranked by)."""
        return tuple(m.name for m in self.metrics if m.goal is not None)


TASKS: dict[str, TaskSpec] = {}


def register_task(spec: TaskSpec) -> TaskSpec:
    """Add a task (its metrics join :mod:`ablate.metrics`); the name must be new."""
    if spec.name in TASKS:
        raise ValueError(f"task {spec.name!r} is registered already")
    for metric in (spec.headline_metric, spec.console_metric, *spec.panel_metrics):
        if not spec.logs(metric):
            raise ValueError(f"task {spec.name!r}: {metric} is not one of its metrics")
    metrics.register(spec.metrics)  # after the checks: a refused spec leaves no metric behind
    TASKS[spec.name] = spec
    return spec


def unregister_task(name: str) -> None:
    """Remove a task and the metrics only it declared (a test's own task)."""
    spec = TASKS.pop(name)
    still = {m.name for other in TASKS.values() for m in other.metrics}
    metrics.unregister(m.name for m in spec.metrics if m.name not in still)


# --- the built-in tasks --------------------------------------------------------------------

LOSS = Metric("loss", "min", "cross-entropy", "nats per token", format=".4f", progress_format="5.3f")
PPL = Metric(
    "ppl", "min", "perplexity", "exp of mean NLL per token", format=".2f", progress_format="7.2f", sci_above=1e5
)
BPB = Metric("bpb", "min", "bits per byte", "of the UTF-8 text", format=".4f", shown=False)
BLEU = Metric("bleu", "max", "BLEU", "sacreBLEU", format=".2f", progress_format="5.2f")
ACC = Metric("acc", "max", "accuracy", "fraction of sequences", format=".3f", progress_format="5.3f")
_NORMED_PARTS = ("attn_norm", "attn", "ffn_norm", "ffn")

register_task(
    TaskSpec(
        name="lm",
        module="ablate.tasks.lm:LanguageModelTask",
        checks="ablate.tasks.config_checks:LanguageModelChecks",
        build="ablate.tasks.lm:build_lm",
        metrics=(LOSS, PPL, BPB),
        headline_metric="val/ppl",
        console_metric="val/loss",
        checkpoint_scripts="eval.py or generate.py",
        evaluate_checkpoint="ablate.tasks.lm_eval:evaluate_checkpoint",
        eval_options=("text_file", "seq_lens"),
        panel_metrics=("val/loss", "val/ppl"),
        grad_norm_parts=tuple(("", p) for p in _NORMED_PARTS),
    )
)
register_task(
    TaskSpec(
        name="translation",
        module="ablate.tasks.translation:TranslationTask",  # imported when asked for: it pulls in sacreBLEU
        checks="ablate.tasks.config_checks:TranslationChecks",
        build="ablate.tasks.translation:build_translation",
        metrics=(LOSS, PPL, BLEU),
        headline_metric="val/bleu",
        console_metric="val/bleu",
        checkpoint_scripts="eval.py or translate.py",
        evaluate_checkpoint="ablate.tasks.translation_eval:evaluate_checkpoint",
        eval_options=("src_file", "ref_file", "output", "beam_size", "length_penalty", "max_len_a", "max_len_b"),
        panel_metrics=("val/loss", "val/bleu"),
        batch_tokens_key="data.max_tokens",
        fixed_batch_tokens=False,
        grad_norm_parts=tuple((s, p) for s in ("enc_", "dec_") for p in _NORMED_PARTS)
        + (("dec_", "cross_attn_norm"), ("dec_", "cross_attn")),
    )
)

register_task(
    TaskSpec(
        name="classify",
        module="ablate.tasks.classify:ClassificationTask",
        checks="ablate.tasks.config_checks:ClassificationChecks",
        build="ablate.tasks.classify:build_classify",
        metrics=(LOSS, PPL, ACC),
        headline_metric="val/acc",
        console_metric="val/acc",
        checkpoint_scripts="none yet (train.py evaluates it after training)",
        panel_metrics=("val/loss", "val/acc"),
        grad_norm_parts=tuple(("", p) for p in _NORMED_PARTS),
    )
)


# --- what the rest of the framework asks ---------------------------------------------------


def task_name(cfg: DictConfig) -> str:
    """``cfg.task.name`` (default ``lm``), refused by name when no task is registered under it."""
    name = str((cfg.get("task") or {}).get("name", "lm"))
    if name not in TASKS:
        raise ConfigError(f"unknown task={name!r}; valid options: {', '.join(TASKS)}")
    return name


def task_checks(cfg: DictConfig) -> type[TaskChecks]:
    """The config declarations and checks of ``cfg.task.name`` (:meth:`TaskSpec.checks_class`)."""
    return TASKS[task_name(cfg)].checks_class()


def ranked_metrics(cfg: DictConfig | Mapping[str, Any]) -> tuple[str, ...] | None:
    """The quantities runs of the chosen task can be ranked by, or None for an unknown task."""
    spec = TASKS.get(str((cfg.get("task") or {}).get("name", "lm")))
    return None if spec is None else spec.ranked_metrics


def build_task(cfg: Any, datamodule: Any, spec: ModelSpec) -> TaskModule:
    """The LightningModule of ``cfg.task.name`` (default ``lm``) for this data and model spec."""
    build: Callable[[Any, Any, ModelSpec], TaskModule] = resolve(TASKS[task_name(cfg)].build)
    return build(cfg, datamodule, spec)


def task_of_metrics(names: set[str] | frozenset[str]) -> str:
    """The task that logged these metric names: the first that logs every validation and test
    quantity among them, else the one that logs most of them."""
    evaluated = {n for n in names if metrics.parse(n).split in ("val", "test")}

    def logged(spec: TaskSpec) -> int:
        return sum(spec.logs(n) for n in evaluated)

    return max(TASKS.values(), key=lambda s: (logged(s) == len(evaluated), logged(s), -list(TASKS).index(s.name))).name
