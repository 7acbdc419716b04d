"""The ``axis=value[,axis=value...]`` specs of ``--baseline`` and ``--where``, parsed and matched."""

from __future__ import annotations

import re

from ablate.analysis.job import canonical
from ablate.analysis.runs import Sweep


def parse_baseline(spec: str, flag: str = "--baseline") -> dict[str, str]:
    """``"norm=pre,optim.lr=1e-3"`` -> ``{"norm": "pre", "optim.lr": "0.001"}``; a key named twice refused."""
    items = [item for item in re.split(r",(?=\s*[\w.+~-]+=)", spec.strip()) if item.strip()]
    if not items or any("=" not in item for item in items):
        raise ValueError(f"{flag} {spec!r}: expected axis=value[,axis=value...], e.g. norm=pre")
    pairs = [(key.strip(), canonical(value)) for key, value in (item.split("=", 1) for item in items)]
    keys = [key for key, _ in pairs]
    if twice := next((key for key in keys if keys.count(key) > 1), None):  # else the last one would win silently
        raise ValueError(f"{flag} {spec}: names {twice} {keys.count(twice)} times; give each key once")
    return dict(pairs)


def where(sweep: Sweep, spec: str) -> Sweep:
    """The jobs of ``sweep`` with the values ``spec`` names (``"scale=m"``), as a sweep of their own."""
    wanted = parse_baseline(spec, "--where")
    kept = [job for job in sweep.jobs if all(job.value(sweep.full_name(k)) == v for k, v in wanted.items())]
    if not kept:
        values = {k: sorted({str(job.value(sweep.full_name(k))) for job in sweep.jobs}) for k in wanted}
        raise ValueError(
            f"--where {spec}: no job of {sweep.source} has these values; the jobs have "
            + "; ".join(f"{k}: {', '.join(v)}" for k, v in values.items())
        )
    return Sweep.from_jobs(sweep.source, kept, sweep.notes)


def find_baseline(sweep: Sweep, spec: str) -> tuple:
    """The variant key of the one configuration ``spec`` names (axes by full or short name)."""
    wanted = parse_baseline(spec)
    variants = sweep.variants()
    axes = ", ".join(sweep.short_names().values()) or "none"
    for key in wanted:  # each key is used or refused by name
        if all(job.value(sweep.full_name(key)) is None for job in sweep.jobs):
            raise ValueError(
                f"--baseline {spec}: {key} is neither an axis nor a config key of the jobs; the axes are: {axes}"
            )
        if any(len({job.value(sweep.full_name(key)) for job in jobs}) > 1 for jobs in variants.values()):
            raise ValueError(
                f"--baseline {spec}: {key} is not a variant key (its value differs between the seeds of one "
                f"configuration): a baseline selects a configuration, all of its seeds. The axes are: {axes}"
            )
    matches = [
        key for key, jobs in variants.items() if all(jobs[0].value(sweep.full_name(k)) == v for k, v in wanted.items())
    ]
    rows = "; ".join(sweep.label(key) for key in variants)
    if not matches:
        raise ValueError(f"--baseline {spec}: matches no configuration of {sweep.source}; its rows are: {rows}")
    if len(matches) > 1:
        raise ValueError(
            f"--baseline {spec}: matches {len(matches)} configurations "
            f"({'; '.join(sweep.label(k) for k in matches)}): name more axes to pick one of: {rows}"
        )
    return matches[0]
