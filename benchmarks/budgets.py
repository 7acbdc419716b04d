"""The benchmark's budgets: each overhead the loop may add, measured against its limit
(``benchmark.budgets`` in ``conf/benchmark.yaml``), with the A/A control's deviation as the noise
a miss must exceed to count."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BUDGET_TEXT = {
    "framework_overhead": "Lightning loop overhead vs a hand-written loop",
    "grad_norm_default_interval": "grad-norm logging at the default interval",
    "grad_norm_every_step": "grad-norm logging every step",
    "data_wait": "time waiting for data / step time",
    "logged_tokens_per_sec": "logged train/tokens_per_sec vs timed, same steps",
}


def check_budgets(report: dict[str, Any], limits: Mapping[str, Any]) -> dict[str, Any]:
    """Each budget of :data:`BUDGET_TEXT`: what the benchmark ``report`` measured, its limit, whether
    it was met, by how much it was missed, and for the loop overheads the A/A control and the
    callback's direct cost."""
    ratios = {k: v for g in report["groups"].values() for k, v in g["ratios"].items()}
    measured: dict[str, float | None] = {}
    for key in ("framework_overhead", "grad_norm_default_interval", "grad_norm_every_step"):
        measured[key] = ratios[key]["median"] - 1 if key in ratios else None
    # direct cost of grad-norm logging: time inside the callback (norms and logger writes)
    # per step over the step time of the same variant
    direct: dict[str, float | None] = {}
    loop = report["groups"].get("loop", {}).get("variants", {})
    for key, vname in (
        ("grad_norm_default_interval", "lightning"),
        ("grad_norm_every_step", "grad_norm_every_step"),
    ):
        v = loop.get(vname) or {}
        ms = (v.get("callback_ms_per_step") or {}).get("GradNormMonitor")
        direct[key] = ms / 1e3 / v["round_mean_step_s"]["median"] if ms is not None else None
    aa = ratios.get("aa_control")
    resolution = abs(aa["median"] - 1) if aa else None
    head = report["headline"]
    measured["data_wait"] = head.get("data_wait_fraction")
    same = head.get("logged_vs_timed_same_steps")
    measured["logged_tokens_per_sec"] = abs(same) if same is not None else None
    out = {}
    for key, value in measured.items():
        limit = float(limits[key])
        met = None if value is None else value <= limit
        out[key] = {
            "what": BUDGET_TEXT[key],
            "measured": value,
            "limit": limit,
            "met": met,
            "missed_by": None if value is None or met else value - limit,
        }
        if key in ("framework_overhead", "grad_norm_default_interval", "grad_norm_every_step"):
            out[key]["aa_control"] = resolution  # |hand_again / hand - 1|: what noise alone gives
            # a miss no larger than the A/A control's deviation is not distinguishable from noise
            out[key]["within_noise"] = bool(
                not met and resolution is not None and value is not None and value - limit <= resolution
            )
        if key in direct:
            out[key]["direct"] = direct[key]
    return out
