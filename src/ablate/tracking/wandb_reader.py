"""Read a local W&B run (offline or online) back from its ``.wandb`` file.

wandb 0.31 ships no Python reader; the supported one is ``wandb leet inspect --json`` (one JSON
object per record), a wrapper of the bundled ``wandb-core`` binary, which is called directly (20 ms
a run, not 0.6 s), the CLI being the fallback. The records are folded as W&B folds them.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

_INSPECT_TIMEOUT_S = 120
# Summary aggregates chosen with define_metric(summary=...); W&B stores a
# metric with one aggregate as {"min": 3.1}.
_AGGREGATES = frozenset({"min", "max", "mean", "last", "first", "best"})
# Non-finite floats are written as these strings in the JSON records.
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def find_run_dirs(root: Path) -> list[Path]:
    """Every W&B run directory below ``root``, sorted, each once (not through ``latest-run``)."""
    runs = {p.parent for p in Path(root).rglob("run-*.wandb") if not p.parent.is_symlink()}
    return sorted(p for p in runs if "latest-run" not in p.parts)


def read_offline_run(run_dir: Path) -> dict[str, Any]:
    """A run's records (a run directory, its ``.wandb`` file, or a directory with one run below it)
    folded into ``name``, ``group``, ``config``, ``summary`` (``{"min": 3.1}`` unwrapped to ``3.1``),
    ``summary_raw``, ``history`` (one dict per row), ``run_id``, ``project``, ``tags``, ``exit_code``."""
    return _fold(_read_records(_run_file(Path(run_dir))))


def _run_file(path: Path) -> Path:
    """The single ``run-*.wandb`` file that ``path`` designates."""
    if path.is_file():
        return path
    candidates = sorted(path.glob("run-*.wandb")) or [next(d.glob("run-*.wandb")) for d in find_run_dirs(path)]
    if len(candidates) != 1:
        raise FileNotFoundError(f"expected exactly one W&B run under {path}, found {len(candidates)}")
    return candidates[0]


def _read_records(run_file: Path) -> list[dict[str, Any]]:
    """All records of ``run_file`` as dicts, via wandb-core or the wandb CLI."""
    output = _inspect_with_core(run_file)
    if output is None:
        output = _run_inspect([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_file)])
    return [json.loads(line) for line in output.splitlines() if line.strip()]


def _inspect_with_core(run_file: Path) -> str | None:
    """Output of ``wandb-core leet inspect`` on ``run_file``; None if that fails."""
    try:
        from wandb.util import get_core_path

        command = [get_core_path(), "leet", "inspect", "--no-observability", "--json"]
        return _run_inspect([*command, "--run-file", str(run_file)])
    except Exception:
        return None


def _run_inspect(command: list[str]) -> str:
    """Run one inspect command with no stdin and no network side effects."""
    # Offline mode makes the CLI pass --no-observability (no telemetry upload).
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_ERROR_REPORTING": "false"}
    result = subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=_INSPECT_TIMEOUT_S,
        env=env,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}): {result.stderr.strip()}")
    return result.stdout


def _fold(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Replay the records into the run's final state."""
    state: dict[str, Any] = {
        "name": None,
        "group": None,
        "run_id": None,
        "project": None,
        "tags": [],
        "config": {},
        "summary_raw": {},
        "history": [],
        "exit_code": None,
    }
    for record in records:
        _apply(state, record.get("type"), record.get(record.get("type", ""), {}))
    state["config"].pop("_wandb", None)
    state["summary"] = {k: _unwrap(v) for k, v in state["summary_raw"].items()}
    return state


def _apply(state: dict[str, Any], kind: str | None, body: dict[str, Any]) -> None:
    """Apply one record of type ``kind`` to ``state``."""
    if kind == "run":
        state["name"] = body.get("display_name")
        state["group"] = body.get("run_group") or None
        state["run_id"] = body.get("run_id")
        state["project"] = body.get("project")
        state["tags"] = list(body.get("tags") or [])
        _update(state["config"], body.get("config", {}), decode=False)
    elif kind == "config":
        _update(state["config"], body, decode=False)
    elif kind == "summary":
        _update(state["summary_raw"], body)
    elif kind == "history":
        state["history"].append({k: _decode(v) for k, v in body.get("item", {}).items()})
    elif kind == "exit":
        state["exit_code"] = body.get("exit_code", 0)


def _update(target: dict[str, Any], change: dict[str, Any], decode: bool = True) -> None:
    """Apply an ``{"update": {...}, "remove": [...]}`` record body (``decode``: NaN/Infinity of metrics)."""
    updates = change.get("update") or {}
    target.update({k: _decode(v) for k, v in updates.items()} if decode else updates)
    for item in change.get("remove") or []:
        target.pop(_removed_key(item), None)


def _removed_key(item: Any) -> str:
    """Key of a ``remove`` entry: ``{"key": k}`` or ``{"nested_key": [a, b]}``."""
    if isinstance(item, dict):
        return item.get("key") or ".".join(item.get("nested_key") or [])
    return str(item)


def _decode(value: Any) -> Any:
    """Turn W&B's JSON spellings of non-finite floats back into floats."""
    if isinstance(value, str):
        return _NON_FINITE.get(value, value)
    if isinstance(value, dict):
        return {k: _decode(v) for k, v in value.items()}
    return value


def _unwrap(value: Any) -> Any:
    """``{"min": 3.1}`` -> ``3.1``; anything else unchanged."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in _AGGREGATES:
        return next(iter(value.values()))
    return value
