"""Time to the first line: how long a command takes before it says something, against
``python -c "import lightning"`` measured in the same rounds on the same machine.

    python scripts/benchmark.py benchmark.only=[startup]            # conf/benchmark.yaml: benchmark.startup

Each round runs, in fresh interpreters and in turn:

* ``import lightning`` -- the baseline: what any Lightning program pays before its first line;
* a refusal -- ``train.py trainer=gpu`` on a machine without a GPU (else ``train.py
  model.n_layers=abc``): the seconds to its exit code 2;
* a value's refusal -- ``train.py model.n_layers=0``: a key/value check of the typed config
  (:meth:`ablate.run.config.RunConfig.from_hydra`), which reads the targets' source and imports no torch;
* ``train.py`` with the given overrides (default: the default experiment) -- the seconds until the
  run header's first line (``run     experiment=...``), when the process is stopped.

The report gives each median (and range) and the ratios to the baseline's median. The runs write
into a temporary log folder and use the configured data and cache folders (the cache is built by
an untimed first run). No number here is asserted by a test (``tests/benchmark/test_startup.py``
checks the measuring, not the speed).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

VALUE_REFUSAL = "model.n_layers=0"  # a value the typed config refuses (a range rule)
HEADER = "run     experiment="  # the run header's first line (ablate.cli.console.format_run_header)
TIMEOUT_S = 900.0  # a guard against a hung command, not an expectation


def timed_until(command: Sequence[str], env: dict[str, str], cwd: Path, marker: str | None) -> tuple[float, int | None]:
    """Seconds from start until ``marker`` begins a line of the output (the process is then stopped;
    returns None for its exit code), or until it exits (``marker`` None or never printed)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        list(command), cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            if marker is not None and line.startswith(marker):
                elapsed = time.perf_counter() - start
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return elapsed, None
            if time.perf_counter() - start > TIMEOUT_S:
                break
        code = proc.wait(timeout=TIMEOUT_S)
        return time.perf_counter() - start, code
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def commands(
    repo: Path, train_overrides: Sequence[str], no_gpu: bool
) -> dict[str, tuple[list[str], str | None, int | None]]:
    """name -> (command, the line that ends its timing (None: its exit), the exit code it must have)."""
    python, train = sys.executable, str(repo / "train.py")
    refusal = ["trainer=gpu"] if no_gpu else ["model.n_layers=abc"]
    return {
        "import_lightning": ([python, "-c", "import lightning"], None, 0),
        "refusal": ([python, train, *refusal], None, 2),
        "value_refusal": ([python, train, VALUE_REFUSAL], None, 2),
        "run_header": ([python, train, *train_overrides], HEADER, None),
    }


def measure(
    repo: Path, train_overrides: Sequence[str], rounds: int, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """The rounds (see the module docstring): each command's seconds, medians and ratios."""
    from ablate.run.environment import no_gpu_for_sure

    no_gpu = no_gpu_for_sure()
    with tempfile.TemporaryDirectory(prefix="ablate-startup-") as tmp:
        env = {**(env or os.environ), "ABLATE_LOG_DIR": str(Path(tmp) / "logs"), "PYTHONUNBUFFERED": "1"}
        todo = commands(repo, train_overrides, no_gpu)
        warm, _ = timed_until(todo["run_header"][0], env, Path(tmp), HEADER)  # the token cache, the page cache
        times: dict[str, list[float]] = {name: [] for name in todo}
        for _ in range(rounds):
            for name, (command, marker, expected) in todo.items():
                seconds, code = timed_until(command, env, Path(tmp), marker)
                if marker is None and code != expected:
                    raise RuntimeError(f"{' '.join(command)} exited with {code}, expected {expected}")
                times[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in times.items()}
    base = medians["import_lightning"]
    return {
        "rounds": rounds,
        "refusal": " ".join(todo["refusal"][0][2:]),
        "value_refusal": VALUE_REFUSAL,
        "run": " ".join(["train.py", *train_overrides]),
        "warm_up_s": round(warm, 2),
        "seconds": {name: [round(v, 3) for v in values] for name, values in times.items()},
        "median_s": {name: round(v, 3) for name, v in medians.items()},
        "ratio_to_import_lightning": {
            name: round(v / base, 3) for name, v in medians.items() if name != "import_lightning"
        },
    }


def report_lines(result: dict[str, Any]) -> list[str]:
    lines = [f"start-up, {result['rounds']} rounds (median, min-max; ratio to `import lightning` in the same rounds):"]
    for name, values in result["seconds"].items():
        ratio = result["ratio_to_import_lightning"].get(name)
        text = f"  {name:<17}{result['median_s'][name]:7.2f} s  ({min(values):.2f}-{max(values):.2f})"
        lines.append(text + (f"  x{ratio:.2f}" if ratio is not None else ""))
    value = f"; value_refusal: train.py {result['value_refusal']}" if "value_refusal" in result else ""
    lines.append(f"  refusal: train.py {result['refusal']}{value}; run_header: {result['run']} until its header")
    return lines


def main(cfg: Any) -> dict[str, Any]:
    """``python scripts/benchmark.py benchmark.only=[startup]``: measure, print, write ``startup.json``
    beside the benchmark's ``benchmark.json``."""
    import json

    from ablate.cli import conf_dir

    options = cfg.benchmark.get("startup") or {}
    result = measure(conf_dir().parent, list(options.get("train_overrides") or []), int(options.get("rounds", 5)))
    print("\n".join(report_lines(result)), flush=True)
    path = Path(str(cfg.benchmark.json_path)).with_name("startup.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(f"wrote {path}")
    return result
