"""Each variant's learning rate from its ``tune=lr`` stage-1 jobs: the log-spaced grid, the pure
selection rule, a job's outcome from its ``status.json``, and ``<sweep dir>/lr_tuning.json`` (locked,
keeping the variants an earlier command left). Testable without Hydra's launcher; imported at
Hydra's plugin scan, so pandas only inside :func:`read_outcome`."""

from __future__ import annotations

import fcntl
import json
import logging
import math
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from hydra.core.utils import JobReturn
from omegaconf import DictConfig, OmegaConf

from ablate.run.status import FINISHED, read_status
from ablate.writes import write_text_atomically

log = logging.getLogger(__name__)

LR_KEY = "optim.lr"

# --------------------------------------------------------------------------- selection (pure)


@dataclass
class LRResult:
    """One variant's stage-1 job at one learning rate."""

    lr: float
    text: str  # the value as the job's override spells it (part of its directory name)
    status: str  # completed | diverged | crashed | incomplete
    value: float | None = None  # the final metric; None when absent or not finite
    job: str | None = None  # the job directory's name

    @property
    def usable(self) -> bool:
        return self.status == "completed" and self.value is not None and math.isfinite(self.value)


@dataclass
class Selection:
    """The learning rate chosen for one variant, and what to say about it."""

    chosen: LRResult | None  # None: every learning rate diverged or crashed
    edge: str | None = None  # "lowest" / "highest": the chosen LR is at that end of the grid; "only": one LR
    note: str | None = None  # the warning to print (edge, or nothing usable)
    extend_with: str | None = None  # the optim.lr override of a grid extended past the edge


def format_lr(value: float) -> str:
    """A grid value as an override spells it: 3 significant digits (``0.0005``, ``7.5e-05``)."""
    return f"{value:.3g}"


def log_grid(center: float, num: int, factor: float) -> list[str]:
    """``num`` learning rates a factor ``factor`` apart, centred on ``center`` (ascending)."""
    if not (center > 0 and math.isfinite(center)):
        raise ValueError(f"the grid is centred on optim.lr={center}: it must be a positive number")
    values = [format_lr(center * factor ** (k - (num - 1) / 2)) for k in range(num)]
    return list(dict.fromkeys(values))


def select_lr(
    results: Sequence[LRResult],
    *,
    higher_is_better: bool = False,
    factor: float = 2.0,
    lr_key: str = LR_KEY,
    also: str = "",
) -> Selection:
    """The best usable learning rate (lowest metric, or highest when ``higher_is_better``; ties to the
    smaller rate); a job without a finite final metric is never chosen. A choice at an end of the
    grid is flagged with the ``lr_key`` override extending it by two rates (``also`` appended); if
    every job diverged, ``chosen=None`` with as many rates below the grid to try."""
    if not results:
        raise ValueError("select_lr: no stage-1 results")
    ordered = sorted(results, key=lambda r: r.lr)
    usable = [r for r in ordered if r.usable]

    def override(texts: Iterable[str]) -> str:
        return f"{lr_key}={','.join(texts)}" + (f" {also}" if also else "")

    if not usable:
        outcomes = ", ".join(sorted({r.status for r in ordered}))
        if all(r.status == "diverged" for r in ordered):
            lower = override(format_lr(ordered[0].lr / factor**k) for k in range(len(ordered), 0, -1))
            return Selection(
                None,
                note=f"every learning rate diverged: no stage 2 for this variant; lower ones: {lower}",
                extend_with=lower,
            )
        return Selection(
            None,
            note=f"no learning rate finished with a finite value ({outcomes}; see the jobs' "
            "status.json): no stage 2 for this variant",
        )
    # usable: finite values; of equal values the first, the smaller learning rate
    best = (max if higher_is_better else min)(usable, key=lambda r: cast(float, r.value))
    texts = [r.text for r in ordered]
    low, high = ordered[0], ordered[-1]
    if len(ordered) == 1:
        edge, extended = "only", [format_lr(low.lr / factor), *texts, format_lr(high.lr * factor)]
    elif best is low:
        edge, extended = "lowest", [format_lr(low.lr / factor**2), format_lr(low.lr / factor), *texts]
    elif best is high:
        edge, extended = "highest", [*texts, format_lr(high.lr * factor), format_lr(high.lr * factor**2)]
    else:
        return Selection(best)
    extend = override(extended)
    where = "the only one in the grid" if edge == "only" else f"the {edge} of the grid"
    note = (
        f"the best learning rate {best.text} is {where}: the optimum may be outside the grid: extend it with {extend}"
    )
    return Selection(best, edge=edge, note=note, extend_with=extend)


# --------------------------------------------------------------------------- job outcomes


def job_dir_of(ret: JobReturn) -> Path | None:
    """Where a launched job ran (``hydra.runtime.output_dir`` of its Hydra config)."""
    if ret.hydra_cfg is None:
        return None
    try:
        return Path(str(ret.hydra_cfg.hydra.runtime.output_dir))
    except Exception:
        return None


def read_outcome(job_dir: Path | None, metric: str, failed: bool = False) -> tuple[str, float | None]:
    """``(status, final metric)`` of a job from its ``status.json`` (else ``csv/metrics.csv``'s last
    value). ``failed`` (Hydra saw an exception) counts as crashed unless a finished status was recorded."""
    record = read_status(job_dir) if job_dir is not None else None
    status = record.status if record is not None else "crashed" if failed else "incomplete"
    if failed and status not in FINISHED:
        status = "crashed"
    if record is None or status != "completed":
        return status, None
    value = record.metrics.get(metric)
    if value is None and job_dir is not None:
        from ablate.analysis.job import read_metrics_csv  # pandas: imported when a sweep runs, not at plugin scan

        frame = read_metrics_csv(job_dir / "csv" / "metrics.csv")
        if metric in frame:
            logged = frame[metric].dropna()
            value = float(logged.iloc[-1]) if len(logged) else None
    try:
        value = float(value) if value is not None else None
    except (TypeError, ValueError):
        value = None
    return status, value if value is not None and math.isfinite(value) else None


def save_selection(path: Path, out: dict[str, Any]) -> None:
    """Write ``out`` to ``path`` atomically, after the variants an earlier command left there."""
    with _locked(path):
        earlier = _earlier_variants(path, out["variants"])
        out["variants"] = earlier + out["variants"]
        # every command's selection seed: each one's jobs stay out of every verdict
        seeds = {r.get("selection_seed") for r in earlier if r.get("selection_seed") is not None}
        seeds |= set(_earlier_selection_seeds(path)) | {out.get("selection_seed")}
        seeds |= {r.get("selection_seed") for r in out["variants"]}  # selection=nested: one per verdict seed
        out["selection_seeds"] = sorted((s for s in seeds if s is not None), key=str)
        write_text_atomically(path, json.dumps(out, indent=2, default=_jsonable) + "\n")


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on ``<path>.lock`` (released when the file closes): two tune=lr commands may
    share a sweep directory."""
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _earlier_variants(path: Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The variants an earlier command's ``path`` holds and this command does not."""
    if not path.is_file():
        return []
    try:
        earlier = json.loads(path.read_text()).get("variants", [])
    except (OSError, ValueError):
        log.warning("tuned_lr: %s is unreadable: its earlier selections are replaced by this command's", path)
        return []
    # selection=nested has one record per variant and verdict seed: a command adding seeds keeps the earlier
    # seeds' records; a shared selection (no verdict_seed) replaces every record of its variant, and is replaced
    ours: dict[frozenset[str], set[Any] | None] = {}
    for r in records:
        key, seed = frozenset(r["overrides"]), r.get("verdict_seed")
        mine = ours.setdefault(key, set())
        ours[key] = None if seed is None or mine is None else mine | {seed}

    def kept(r: dict[str, Any]) -> bool:
        key = frozenset(r.get("overrides", []))
        if key not in ours:
            return True
        mine = ours[key]
        return mine is not None and r.get("verdict_seed") is not None and r["verdict_seed"] not in mine

    return [r for r in earlier if kept(r)]


def _earlier_selection_seeds(path: Path) -> list[Any]:
    """The selection seeds an earlier ``lr_tuning.json`` recorded (``selection_seeds``, or an older single one)."""
    try:
        earlier = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, ValueError):
        return []
    found = list(earlier.get("selection_seeds") or [])
    return found + ([earlier["selection_seed"]] if earlier.get("selection_seed") is not None else [])


def _jsonable(value: Any) -> Any:
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value)
    return str(value)


# --------------------------------------------------------------------------- which text a verdict reads


def validation_as_test_warning(config: Any) -> str | None:
    """A warning when the test split is the validation text (``data.splits=nanogpt``; a corpus without
    ``test_path``): a verdict on ``test/*`` would grade the text the rate was chosen on."""
    from hydra.utils import get_object  # a data class imports torch: only when a sweep runs

    node = OmegaConf.select(config, "data")
    target = node.get("_target_") if isinstance(node, DictConfig) else None
    if not target:
        return None
    try:
        data_class = get_object(str(target))
    except Exception:  # a bad target: each job's checks report it by name before any job starts
        return None
    says = getattr(data_class, "validation_as_test", None)
    reason = says(node) if callable(says) else None
    if reason is None:
        return None
    return (
        f"tuned_lr: {reason}: the learning rate is selected on validation, so no verdict of this sweep "
        "(val/* or test/*) reads a held-out text"
    )
