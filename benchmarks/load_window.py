"""How busy the machine was during a measurement: the load average before and after, and the share
of the machine's CPU time that other processes used (standard library only)."""

from __future__ import annotations

import os
import resource
import subprocess
import time
from pathlib import Path
from typing import Any, Self


def cpu_times() -> tuple[float, float]:
    """``(busy, total)`` CPU seconds of the whole machine since boot (/proc/stat)."""
    fields = [float(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    tick = os.sysconf("SC_CLK_TCK")
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    return (sum(fields[:8]) - idle) / tick, sum(fields[:8]) / tick


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def loadavg() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def top_processes(n: int = 5) -> list[str]:
    """The busiest processes now (``ps aux --sort=-%cpu``), for the record."""
    try:
        out = subprocess.run(
            ["ps", "-eo", "pcpu,etime,args", "--sort=-pcpu"], check=False, capture_output=True, text=True, timeout=10
        ).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return []
    return [line[:160] for line in out[1 : n + 1]]


class LoadWindow:
    """Load average at the start and end of a measurement and the share of the machine's CPU
    that other processes used meanwhile (all CPU time minus that of this script's children;
    a child's own children count only once reaped, e.g. loky workers, not wandb's service)."""

    def __enter__(self) -> Self:
        self.load_start, self.top_start = loadavg(), top_processes()
        self._busy, self._total = cpu_times()
        self._own, self._t = children_cpu(), time.time()
        return self

    def __exit__(self, *exc: object) -> None:
        busy, total = cpu_times()
        own = children_cpu() - self._own
        self.elapsed = time.time() - self._t
        self.load_end = loadavg()
        span = max(total - self._total, 1e-9)
        self.others_cpu_share = max(0.0, (busy - self._busy) - own) / span
        self.own_cpu_s = own

    def as_dict(self) -> dict[str, Any]:
        return {
            "load_start": self.load_start,
            "load_end": self.load_end,
            "others_cpu_share": round(self.others_cpu_share, 4),
            "children_cpu_s": round(self.own_cpu_s, 2),
            "top_processes_at_start": self.top_start,
        }
