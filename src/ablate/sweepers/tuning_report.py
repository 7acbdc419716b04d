"""What a ``tune=lr`` sweep prints and records: each variant through the two stages (:class:`Variant`),
the stage tables and the ``lr_tuning.json`` record. Pure functions: no launcher, no Hydra."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ablate.analysis.runs import neighbour_text, rates_text
from ablate.sweepers import halving as sh
from ablate.sweepers.lr_selection import LRResult, Selection, format_lr


@dataclass
class Variant:
    """One combination of the sweep's other values, through the two stages."""

    overrides: list[str]
    label: str
    grid: list[str]  # learning rates as their overrides spell them, ascending
    results: list[LRResult] = field(default_factory=list)  # stage 1: one per learning rate
    selection: Selection = field(default_factory=lambda: Selection(None))  # stage 1's choice
    seeds: list[dict[str, Any]] = field(default_factory=list)  # stage 2: one record per seed
    extended: list[str] = field(default_factory=list)  # rates added past the grid's edge before stage 2
    rung_steps: tuple[int, ...] = ()  # halving: the steps each rate may be cut at, then trainer.max_steps
    tracks: list[sh.RateTrack] = field(default_factory=list)  # halving: each rate through the rungs
    selection_seed: str = ""  # the seed of its stage-1 jobs
    seed: str | None = None  # selection=nested: the one verdict seed this selection chooses the rate of

    @property
    def name(self) -> str:
        """The label, and under ``selection=nested`` the seed the selection ran on (one variant has one per verdict seed)."""
        return self.label if self.seed is None else f"{self.label} seed={self.selection_seed}"

    @property
    def chosen_text(self) -> str:
        """The chosen learning rate as its override spells it (stage 2 launches only chosen variants)."""
        assert self.selection.chosen is not None, f"{self.label}: no learning rate was chosen"
        return self.selection.chosen.text


def number(text: str) -> Any:
    """A seed or value for JSON: ``"3"`` -> 3, anything else as it is."""
    try:
        return int(text)
    except (TypeError, ValueError):
        return text


def seed_record(seed: str, status: str, value: float | None, job: str | None) -> dict[str, Any]:
    """One stage-2 job of a variant, as ``lr_tuning.json`` lists it."""
    return {"seed": number(seed), "status": status, "value": value, "job": job}


def table(rows: list[list[str]]) -> str:
    """Rows as left-aligned columns, indented by two spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in rows)


def _cell(value: float | None, status: str) -> str:
    return f"{value:.4f}" if value is not None else status


def mean_std(records: list[dict[str, Any]]) -> tuple[float | None, float | None, int]:
    """Mean, sample standard deviation and count of the completed seeds' values."""
    values = [r["value"] for r in records if r["status"] == "completed" and r["value"] is not None]
    if not values:
        return None, None, 0
    mean = sum(values) / len(values)
    std = math.sqrt(sum((x - mean) ** 2 for x in values) / (len(values) - 1)) if len(values) > 1 else None
    return mean, std, len(values)


def stage1_table(variants: list[Variant], metric: str, higher: bool, seed_name: str, seed: str) -> str:
    """Each variant's final ``metric`` at each stage-1 rate and the rate chosen (``seed``: the title's)."""
    lrs = sorted({r.lr for v in variants for r in v.results})
    rows = [["variant", *(format_lr(lr) for lr in lrs), "chosen"]]
    for v in variants:
        by_lr = {r.lr: r for r in v.results}
        cells = [_cell(by_lr[lr].value, by_lr[lr].status) if lr in by_lr else "" for lr in lrs]
        if v.tracks:  # halving: the value at each rung reached, and the rung that eliminated it
            tracks = {t.lr: sh.cell(t) for t in v.tracks}
            cells = [tracks.get(lr, "") for lr in lrs]
        sel = v.selection
        chosen = "none" if sel.chosen is None else sel.chosen.text + (" (edge)" if sel.edge else "")
        rows.append([v.name, *cells, chosen])
    title = (
        f"LR tuning, stage 1: final {metric} at each learning rate ({seed_name}={seed}; "
        f"{'highest' if higher else 'lowest'} wins, diverged/crashed rank last)"
    )
    lines = [title, table(rows)]
    lines += dict.fromkeys(sh.stage1_lines([v for v in variants if v.tracks]))  # nested: one line per variant
    lines += [f"  {v.name}: {v.selection.note}" for v in variants if v.selection.note]
    return "\n".join(lines)


def neighbours(v: Variant) -> list[float | None]:
    """What a one-step miss costs: stage 1's ``metric`` at the chosen rate's neighbours minus its own."""
    best = v.selection.chosen
    ordered = sorted(v.results, key=lambda r: r.lr)
    if best is None or best.value is None or best not in ordered:
        return [None, None]
    i = ordered.index(best)
    around = [ordered[i - 1] if i > 0 else None, ordered[i + 1] if i + 1 < len(ordered) else None]
    return [r.value - best.value if r is not None and r.usable and r.value is not None else None for r in around]


def stage2_table(variants: list[Variant], metric: str, lr_name: str, seed_name: str, seeds: list[str]) -> str:
    """Each variant's final ``metric`` per seed at its chosen rate(s), mean ± std and a one-step miss's cost."""
    rows = [["variant", lr_name, *(f"{seed_name}={s}" for s in seeds), f"{metric} mean ± std", "Δ a step down / up"]]
    arms: dict[str, list[Variant]] = {}
    for v in variants:
        arms.setdefault(v.label, []).append(v)
    for label, units in arms.items():
        chosen = [u for u in units if u.selection.chosen is not None]
        if not chosen:
            rows.append([label, "none", *("" for _ in seeds), "no stage 2", ""])
            continue
        records = [r for u in chosen for r in u.seeds]
        by_seed = {str(r["seed"]): r for r in records}
        cells = [_cell(by_seed[s]["value"], by_seed[s]["status"]) if s in by_seed else "" for s in seeds]
        mean, std, n = mean_std(records)
        summary = "n/a" if n == 0 else f"{mean:.4f}" + (f" ± {std:.4f}" if n > 1 else "") + f" (n={n})"
        rows.append(
            [
                label,
                rates_text([u.chosen_text for u in chosen]),
                *cells,
                summary,
                neighbour_text([neighbours(u) for u in chosen]),
            ]
        )
    return f"LR tuning, stage 2: final {metric} at each variant's chosen learning rate\n{table(rows)}"


def variant_record(
    v: Variant, lr_name: str, selection_seed: str, rungs: tuple[float, ...], stage2_done: bool
) -> dict[str, Any]:
    """One variant of ``lr_tuning.json``: its grid, stage-1 outcomes, the choice and (after stage 2) its seeds."""
    sel = v.selection
    record: dict[str, Any] = {
        "variant": v.label,
        "overrides": v.overrides,
        "selection_seed": number(v.selection_seed or selection_seed),  # no verdict of this variant uses it
        "grid": [float(t) for t in v.grid],
        "stage1": [
            {"lr": r.lr, "override": f"{lr_name}={r.text}", "status": r.status, "value": r.value, "job": r.job}
            for r in sorted(v.results, key=lambda r: r.lr)
        ],
        "chosen_lr": sel.chosen.lr if sel.chosen else None,
        "chosen_override": f"{lr_name}={sel.chosen.text}" if sel.chosen else None,
        "edge": sel.edge,
        "warning": sel.note,
        "extend_with": sel.extend_with,
        "extended": [float(t) for t in v.extended],  # rates tune=lr added past the edge, before stage 2
        "neighbours": neighbours(v),  # stage 1's metric one grid step below / above the chosen rate, minus its own
    }
    if v.seed is not None:  # selection=nested: this selection chose the rate of this verdict seed only
        record["verdict_seed"] = number(v.seed)
    if v.tracks:
        record["halving"] = sh.history(v.tracks, v.rung_steps, rungs)
    if stage2_done and sel.chosen is not None:
        mean, std, n = mean_std(v.seeds)
        record["seeds"] = v.seeds
        record["mean"], record["std"], record["completed_seeds"] = mean, std, n
    return record


def tuning_record(
    variants: list[Variant],
    metric: str,
    higher: bool,
    lr_name: str,
    grid: str,
    selection_seed: str,
    seeds: list[str],
    rungs: tuple[float, ...],
    stage2_done: bool,
    offset: int | None = None,
) -> dict[str, Any]:
    """The whole of ``lr_tuning.json``: the rule, the seeds and each variant (:func:`variant_record`);
    ``offset``: ``selection=nested``'s ``selection_offset`` (None: ``shared``)."""
    nested = offset is not None
    out: dict[str, Any] = {
        "metric": metric,
        "key": lr_name,  # the tuned key: a property of each job, not of a variant (compute_multiplier.py)
        "direction": "max" if higher else "min",
        "ranking": "the final value in each stage-1 job's status.json; diverged or crashed jobs rank last",
        "grid": grid,
        "selection": "nested" if nested else "shared",
        # stage 1 only: no verdict rests on it (nested: each record's own, verdict seed + selection_offset)
        "selection_seed": None if nested else number(selection_seed),
        "tuning_seed": None if nested else number(selection_seed),
        "seeds": [number(s) for s in seeds],  # stage 2: the verdict seeds, each fresh
        "stage2": "done" if stage2_done else "pending",
        "variants": [],
    }
    if nested:
        out["selection_offset"] = offset
    if rungs:
        out["halving"] = {"rungs": list(rungs), "rule": sh.RULE}
    for v in variants:
        out["variants"].append(variant_record(v, lr_name, selection_seed, rungs, stage2_done))
    return out
