"""What a logged metric means, declared once: its direction, words, unit and precision.

Tasks declare the quantities they log, the run those every run logs (:data:`RUN_METRICS`); all that
shows or compares a metric asks this registry, and an undeclared one is refused by name, never
guessed. Keyed by the quantity of ``<split>/<quantity>[@<length>]`` (``test/ppl@512``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple


class UndeclaredMetricError(ValueError):
    """A metric whose direction or meaning was needed, but that no task or callback declared."""


SPLIT_WORDS = {"train": "training", "test": "test"}  # validation is the default: no word


@dataclass(frozen=True)
class Metric:
    """One logged quantity: ``name`` (``ppl`` of ``val/ppl@512``), ``goal`` (``min``, ``max``, or None),
    ``label`` and ``unit`` (words for axes and tables), ``format`` (summaries and tables),
    ``progress_format`` (the plain progress lines), ``sci_above`` (values this large in scientific
    notation), ``shown`` (in summaries and progress lines) and ``per_split`` (False for a quantity
    of the run, such as the learning rate)."""

    name: str
    goal: Literal["min", "max"] | None
    label: str
    unit: str = ""
    format: str = ".4g"
    progress_format: str = "5.3f"
    sci_above: float = math.inf
    shown: bool = True
    per_split: bool = True

    def __post_init__(self) -> None:
        if self.goal not in ("min", "max", None):
            raise ValueError(f"Metric {self.name!r}: goal={self.goal!r}; valid options: min, max, None")
        if "/" in self.name or "@" in self.name:
            raise ValueError(f"Metric {self.name!r}: give the quantity (ppl), not a logged name (val/ppl@512)")

    @property
    def higher_is_better(self) -> bool:
        if self.goal is None:
            raise UndeclaredMetricError(f"metric {self.name!r} has no better direction: a run cannot be ranked by it")
        return self.goal == "max"

    def axis_label(self, split: str | None = None) -> str:
        """``test perplexity (exp of mean NLL per token)``; no split word for ``val`` (the figures'
        default), when ``split`` is None, or for a quantity of the run (``per_split=False``)."""
        if split is None or split == "val" or not self.per_split:
            words = self.label
        else:
            words = f"{SPLIT_WORDS.get(split, split)} {self.label}"
        return f"{words} ({self.unit})" if self.unit else words

    def format_value(self, value: float | None) -> str:
        """The value at this metric's precision; ``-`` when missing."""
        if value is None:
            return "-"
        return f"{value:.3e}" if abs(value) >= self.sci_above else format(value, self.format)

    def progress_text(self, value: float | None) -> str:
        """``ppl   11.03``: the fixed-width column of a plain progress line (``-`` when missing)."""
        if value is None:
            return f"{self.name}     -"
        if abs(value) >= self.sci_above:
            return f"{self.name} {value:.2e}"
        return f"{self.name} {format(value, self.progress_format)}"


class LoggedName(NamedTuple):
    """A logged metric name taken apart: ``test/ppl@512`` -> ``("test", "ppl", 512)``."""

    split: str | None
    quantity: str
    length: int | None


def parse(name: str) -> LoggedName:
    """``<split>/<quantity>[@<length>]`` taken apart (a name without ``/`` has no split)."""
    split, _, rest = name.rpartition("/")
    quantity, _, length = rest.partition("@")
    return LoggedName(split or None, quantity, int(length) if length.isdigit() else None)


# the quantities every run logs, whatever the task: the learning rate of each step (the task's
# training_step logs it; the LR figures and panels label it)
RUN_METRICS = (Metric("lr", None, "learning rate", format=".3g", shown=False, per_split=False),)

_REGISTRY: dict[str, Metric] = {}


class NoTaskRegisteredError(RuntimeError):
    """The registry was asked before any task declared its metrics (``ablate.tasks`` not imported)."""


def register(metrics: Iterable[Metric]) -> None:
    """Declare metrics (a task's, :func:`ablate.tasks.register_task`); a quantity declared again must
    have the same meaning, or every table would be ambiguous."""
    for metric in metrics:
        known = _REGISTRY.get(metric.name)
        if known is not None and known != metric:
            raise ValueError(f"metric {metric.name!r} is declared twice with different meanings: {known} and {metric}")
        _REGISTRY[metric.name] = metric


def unregister(names: Iterable[str]) -> None:
    """Forget metrics (a test that declared its own)."""
    for name in names:
        _REGISTRY.pop(name, None)


register(RUN_METRICS)


def _declared() -> dict[str, Metric]:
    """The registry, once a task has declared its metrics: before that every lookup would quietly
    fall back (no summary rows, undeclared formats), so it is refused instead."""
    if len(_REGISTRY) == len(RUN_METRICS):
        raise NoTaskRegisteredError(
            "no task has declared its metrics yet: import ablate.tasks (the task registry) before reading ablate.metrics"
        )
    return _REGISTRY


def registered() -> tuple[Metric, ...]:
    """Every declared metric, in declaration order (the order summaries show them in)."""
    return tuple(_declared().values())


def find(name: str) -> Metric | None:
    """The declaration of a logged name (``val/ppl@512`` -> ``ppl``), or None."""
    return _declared().get(parse(name).quantity)


def lookup(name: str) -> Metric:
    """The declaration of a logged name (none: :class:`UndeclaredMetricError` names the declared ones)."""
    found = find(name)
    if found is None:
        known = ", ".join(sorted(_REGISTRY))
        raise UndeclaredMetricError(
            f"metric {name!r}: no task declares {parse(name).quantity!r} (declared: {known}); a task declares "
            "its metrics in its TaskSpec (ablate.tasks)"
        )
    return found


def higher_is_better(name: str) -> bool:
    """Whether a larger value of the logged metric ``name`` is better (BLEU), or smaller (loss)."""
    return lookup(name).higher_is_better


def axis_label(name: str) -> str:
    """Words for an axis of ``name``: ``test perplexity (exp of mean NLL per token)``; the name
    itself when undeclared (a figure of any logged column still draws)."""
    found = find(name)
    if found is None:
        return name
    parsed = parse(name)
    label = found.axis_label(parsed.split)
    return f"{label} at length {parsed.length}" if parsed.length else label


def format_value(name: str, value: object) -> str:
    """A value of ``name`` at its precision (``-`` when missing, ``.4g`` when undeclared)."""
    if value is None:
        return "-"
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(value)
    found = find(name)
    return found.format_value(number) if found is not None else f"{number:.4g}"


def shown(split: str) -> list[str]:
    """The logged names of ``split`` that summaries and progress lines show, in order."""
    return [f"{split}/{m.name}" for m in registered() if m.shown]


def finite_or_none(value: Any) -> float | None:
    """``value`` as a float, or None when it is not a finite number (what status records hold: JSON has no NaN)."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None
