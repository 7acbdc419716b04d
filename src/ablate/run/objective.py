"""The value a job returns to a Hydra sweeper that optimises (Optuna, ``hparams_search=...``).

:func:`best_metric_value` is the best value of ``optimized_metric`` seen over the whole run (the
minimum of a loss or perplexity, the maximum of BLEU-like metrics: the direction of
:func:`ablate.metrics.higher_is_better`), read from the job's ``csv/metrics.csv`` (always
written, whatever the loggers) and its final metrics in ``status.json``. A diverged or crashed job
returns the worst value (``+inf`` when lower is better, ``-inf`` when higher is), so a sweeper
ranks it last instead of failing the trial. A metric that the job never logged at all is a
configuration error (a typo in ``optimized_metric``, or no validation): it raises
:class:`MetricNotLoggedError`, naming the metric and the metrics that were logged, instead of
returning NaN to a search that would then run all its trials for nothing.
"""

from __future__ import annotations

import math
from pathlib import Path

from ablate.metrics import higher_is_better
from ablate.run.record import read_logged_metrics
from ablate.run.status import RunStatus

WORST_STATUSES = ("diverged", "refused", "crashed")
_SHOWN_PREFIXES = ("val/", "test/", "train/")


class MetricNotLoggedError(ValueError):
    """``optimized_metric`` does not appear in anything the job logged."""


def best_metric_value(output_dir: Path, status: RunStatus, metric: str) -> float:
    """The best value of ``metric`` over the job's run in ``output_dir`` (min, or max for BLEU-like
    metrics), from ``csv/metrics.csv`` and the final metrics of ``status``.

    Diverged or crashed (``status.status``): the worst value, ``+inf``/``-inf``. A metric logged
    only as non-finite values: the worst value too. A metric logged nowhere:
    :class:`MetricNotLoggedError`."""
    if status.status in WORST_STATUSES:  # its log is not read: a crash may have cut it short
        return _worst(metric)
    logged = read_logged_metrics(Path(output_dir))  # csv/metrics.csv (ablate.run.record)
    recorded = status.metrics
    values = logged.values(metric)
    final = recorded.get(metric)
    if final is not None:
        values.append(float(final))
    finite = [v for v in values if math.isfinite(v)]
    if finite:
        return max(finite) if higher_is_better(metric) else min(finite)
    if metric in logged.columns or metric in recorded:  # logged, never a finite number: ranks last
        return _worst(metric)
    names = sorted(logged.columns | set(recorded))
    raise MetricNotLoggedError(
        f"optimized_metric={metric!r} was never logged by the job in {output_dir} (csv/metrics.csv, status.json); "
        f"logged: {_describe(names)}. Set optimized_metric to one of them (e.g. optimized_metric=val/loss), or make "
        "sure validation runs (trainer.val_check_interval <= trainer.max_steps, trainer.limit_val_batches > 0)."
    )


def _worst(metric: str) -> float:
    """What ranks last: ``-inf`` for a metric whose higher values are better, ``+inf`` otherwise."""
    return -math.inf if higher_is_better(metric) else math.inf


def _describe(names: list[str]) -> str:
    """The logged metrics a user would optimise (val/, test/, train/), and how many others."""
    shown = [n for n in names if n.startswith(_SHOWN_PREFIXES)]
    others = [n for n in names if n not in shown]
    text = ", ".join(shown) or "no val/, test/ or train/ metric"
    return text + (f" (and {len(others)} others, e.g. {', '.join(others[:3])})" if others else "")
