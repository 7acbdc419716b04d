"""The machine a benchmark ran on, and what else used it: CPU model and versions, the share of
CPU time other processes took during a group, and the process's resident memory."""

from __future__ import annotations

import os
import platform
import re
import resource
import subprocess
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch

import ablate  # noqa: F401  (registers the config resolvers)

if TYPE_CHECKING:
    pass


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10).stdout
        match = re.search(r"^Model name:\s*(.+)$", out, re.M)
        if match:
            return match.group(1).strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict[str, Any]:
    info = {
        "cpu": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "python": platform.python_version(),
        "device": str(device),
        "load_avg_start": list(os.getloadavg()),
    }
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = torch.version.cuda
    return info


class CpuShare:
    """The share of the machine's CPU time that other processes used between two readings
    (from /proc/stat and this process's own CPU time): the interference a run suffered."""

    def __init__(self) -> None:
        self.start = self._read()

    @staticmethod
    def _read() -> tuple[float, float, float] | None:
        try:
            fields = [float(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        tick = os.sysconf("SC_CLK_TCK")
        busy = (sum(fields) - fields[3] - (fields[4] if len(fields) > 4 else 0)) / tick  # minus idle, iowait
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return time.monotonic(), busy, usage.ru_utime + usage.ru_stime

    def others(self) -> float | None:
        end = self._read()
        if end is None or self.start is None:
            return None
        wall = end[0] - self.start[0]
        other = (end[1] - self.start[1]) - (end[2] - self.start[2])
        return max(0.0, other / (wall * (os.cpu_count() or 1))) if wall > 0 else None


def rss_mb() -> float:
    """The current resident set size."""
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
