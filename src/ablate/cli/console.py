"""What a run prints on the console: at start the resolved config as a tree and the model size; at the
end a summary of the run (:func:`format_run_summary`) or of a sweep's jobs (:func:`format_sweep_summary`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

import rich
import rich.syntax
import rich.tree
from omegaconf import DictConfig, OmegaConf

from ablate import metrics
from ablate.nn.axes import ARCHITECTURE_GROUPS
from ablate.nn.spec import ModelSpec
from ablate.tasks import TASKS, task_of_metrics


class RunRecord(Protocol):
    """What a run summary shows of a run's record (:class:`ablate.run.status.RunStatus` has it)."""

    status: str
    steps: int | None
    wall_time_s: float | None
    segment_wall_time_s: float | None  # a resumed run's last segment (wall_time_s: the whole run's)
    error: str | None
    diverged_at_step: int | None
    divergence_reason: str | None

    @property
    def metrics(self) -> Mapping[str, float | None]: ...


# The groups a reader looks at first; the rest follow in config order.
FIRST = ("task", "data", "model", *ARCHITECTURE_GROUPS, "optim", "trainer")


def print_config_tree(cfg: Mapping[str, Any]) -> None:
    tree = rich.tree.Tree("config", guide_style="dim")
    keys = [k for k in FIRST if k in cfg] + [cast(str, k) for k in cfg if k not in FIRST]  # config keys are strings
    for key in keys:
        branch = tree.add(f"[bold]{key}[/bold]")
        value = cfg[key]
        text = OmegaConf.to_yaml(value, resolve=True) if isinstance(value, (DictConfig, Mapping)) else str(value)
        branch.add(rich.syntax.Syntax(text.rstrip(), "yaml", background_color="default"))
    rich.print(tree)


def describe_model(spec: ModelSpec) -> str:
    """``4 layers, d=128, 4 heads, FFN 512`` (``6+6 layers`` for an encoder-decoder)."""
    layers = f"{spec.encoder_layers}+{spec.n_layers} layers" if spec.encoder_layers else f"{spec.n_layers} layers"
    return f"{layers}, d={spec.d_model}, {spec.n_heads} heads, FFN {spec.d_ff}"


def param_estimate(n_layers: int, d_model: int, vocab_size: int) -> int:
    """The usual back-of-envelope count: 12 L d^2 (attention 4d^2 + FFN 8d^2 per layer) + V d."""
    return 12 * n_layers * d_model**2 + vocab_size * d_model


def format_run_header(
    experiment: str | None,
    task: str,
    data: str,
    spec: ModelSpec,
    axes: Mapping[str, Any],
    n_params: int,
    estimate: int,
    output_dir: Path | str,
) -> str:
    """The few lines a run prints at its start instead of the whole config
    (``print_config=true`` prints that)::

        run     experiment=default  task=lm  data=tinyshakespeare
        axes    pos=learned norm=pre norm_layer=layernorm act=gelu init=gpt2 attn=sdpa
        model   4 layers, d=128, 4 heads: 807,489 parameters (12·L·d² + V·d: 794,880)
        output  logs/runs/2026-11-23_15-00-00  (config: .hydra/config.yaml)
    """
    return "\n".join(
        [
            f"run     experiment={experiment or 'default'}  task={task}  data={data}",
            "axes    " + " ".join(f"{k}={v}" for k, v in axes.items()),
            f"model   {describe_model(spec)}: {n_params:,} parameters (12·L·d² + V·d: {estimate:,})",
            f"output  {output_dir}  (config: .hydra/config.yaml)",
        ]
    )


# --- Known console noise (ablate.cli.log_format), and the one line Lightning repeats per GPU ----


class _DropOneDeviceRankLine:
    """Lightning's ``LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES: [...]`` (every process), dropped unless the
    run has several processes (on one device it repeats ``GPU available: True, used: True``)."""

    def filter(self, record: Any) -> bool:
        if not record.getMessage().startswith("LOCAL_RANK: "):
            return True
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def quiet_known_noise() -> None:
    """Every entry point's console in one format, without the known noise (idempotent;
    :func:`ablate.cli.log_format.route_to_console`)."""
    import logging

    from ablate.cli.log_format import route_to_console

    route_to_console()
    accelerator = logging.getLogger("lightning.pytorch.accelerators.cuda")
    if not any(isinstance(f, _DropOneDeviceRankLine) for f in accelerator.filters):
        accelerator.addFilter(_DropOneDeviceRankLine())


# --- What a run and a sweep print at the end ---------------------------------------------------


def format_wall_time(seconds: float | None) -> str:
    """``h:mm:ss`` (hours may pass 24); ``-`` when unknown."""
    if seconds is None:
        return "-"
    try:
        seconds = round(float(seconds))
    except (TypeError, ValueError, OverflowError):
        return "-"
    hours, rest = divmod(max(seconds, 0), 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"


def headline_metrics() -> list[str]:
    """The metrics a run summary shows, validation then test, of every ``shown`` metric (:mod:`ablate.metrics`)."""
    return metrics.shown("val") + metrics.shown("test")


def _first_line(text: Any, limit: int = 160) -> str:
    line = str(text).strip().splitlines()[0] if str(text).strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def format_run_summary(status: RunRecord, output_dir: Path | str) -> str:
    """The block a run prints at its end, from its status record
    (what its ``status.json`` holds)::

        run completed
          steps      1500
          wall time  0:07:52
          val/loss   1.4712
          val/ppl    4.35
          test/loss  1.4821
          test/ppl   4.40
          output     logs/runs/2026-01-02/10-11-12
    """
    state = status.status
    rows: list[tuple[str, str]] = []
    if state == "diverged":
        at, reason = status.diverged_at_step, status.divergence_reason
        rows.append(
            ("diverged", f"at step {at if at is not None else '?'}" + (f": {_first_line(reason)}" if reason else ""))
        )
    if status.error:  # crashed: the exception; interrupted: what stopped it
        rows.append(("error" if state == "crashed" else "reason", _first_line(status.error)))
    rows.append(("steps", str(status.steps) if status.steps is not None else "-"))
    wall = format_wall_time(status.wall_time_s)
    if status.segment_wall_time_s is not None:  # resumed: the whole run's, and this segment's
        wall += f" ({format_wall_time(status.segment_wall_time_s)} since the resume)"
    rows.append(("wall time", wall))
    values = status.metrics
    same_text = (getattr(status, "extra", None) or {}).get("test_is_validation")
    rows += [
        (
            name,
            metrics.format_value(name, values[name])
            + ("  (the validation text)" if same_text and name.startswith("test/") else ""),
        )
        for name in headline_metrics()
        if name in values
    ]
    if same_text:
        rows.append(("test text", same_text))
    rows.append(("output", str(output_dir)))
    width = max(len(label) for label, _ in rows)
    return "\n".join([f"run {state}"] + [f"  {label:<{width}}  {value}" for label, value in rows])


def _job_name(row: dict[str, Any]) -> str:
    for key in ("job", "output_dir", "dir"):
        if row.get(key):
            return Path(str(row[key])).name
    return ",".join(row.get("overrides") or []) or "-"


def format_sweep_summary(rows: list[dict[str, Any]], metric: str | None = None) -> str:
    """A table of a sweep's jobs (each row a ``status.json`` record with its directory under ``job``,
    ``output_dir`` or ``dir``): name, status, steps, ``metric`` (None: the ``console_metric`` of the
    jobs' task), wall time; then the count of jobs per status."""
    if metric is None:
        present = {name for row in rows for name in (row.get("metrics") or {})}
        metric = TASKS[task_of_metrics(present)].console_metric
    header = ("job", "status", "steps", metric, "wall time")
    table = [header]
    for row in rows:
        steps = row.get("steps")
        table.append(
            (
                _job_name(row),
                str(row.get("status") or "unknown"),
                str(steps) if steps is not None else "-",
                metrics.format_value(metric, (row.get("metrics") or {}).get(metric)),
                format_wall_time(row.get("wall_time_s")),
            )
        )
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    align = ("<", "<", ">", ">", ">")  # names left, numbers right
    lines = ["  ".join(f"{cell:{a}{w}}" for cell, a, w in zip(r, align, widths)).rstrip() for r in table]
    counts = Counter(str(row.get("status") or "unknown") for row in rows)
    jobs = f"{len(rows)} job" + ("" if len(rows) == 1 else "s")
    lines.append(f"{jobs}: " + ", ".join(f"{n} {state}" for state, n in counts.items()) if rows else "0 jobs")
    return "\n".join(lines)
