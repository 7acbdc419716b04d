"""Experiment loggers: a CSV file always, Weights & Biases when enabled.

The CSV logger needs no account and is what the summary tooling reads; W&B is
the optional dashboard on top. Every W&B decision is made here, *before*
``wandb.init`` runs, because wandb 0.31 left to itself either prompts for an
API key (stdin is a terminal), raises (stdin is not), or blocks for minutes
(key present, network absent). Under a Hydra multirun each job must also end
its run with :func:`finish_wandb`, or the next job logs into the previous run.

Files of one job, for ``output_dir=OUT``:

- ``OUT/csv/metrics.csv`` (Lightning 2.6 ``CSVLogger`` with ``name="csv"`` and
  ``version=""``: its log_dir is ``OUT/csv/``) and ``OUT/csv/hparams.yaml``.
- ``OUT/wandb/offline-run-<time>-<id>/`` (or ``run-<time>-<id>/`` online),
  holding the ``run-<id>.wandb`` transaction log that
  :mod:`ablate.wandb_reader` reads back.
"""

from __future__ import annotations

import csv
import netrc
import os
import re
import shutil
import socket
import sys
import threading
import urllib.request
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from lightning.pytorch.loggers import CSVLogger, Logger, WandbLogger
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from wandb.sdk.wandb_run import Run

WANDB_MODES = ("online", "offline", "disabled")
# Spellings wandb itself accepts in WANDB_MODE.
_MODE_ALIASES = {"dryrun": "offline", "run": "online"}
PROBE_TIMEOUT_S = 3.0
# Lightning's WandbLogger adds this key to every row; it is the x-axis.
STEP_METRIC = "trainer/global_step"
# Which aggregate the run summary keeps per metric (what sweeps compare on).
SUMMARY_GOALS = {"val/ppl": "min", "val/loss": "min", "val/bleu": "max"}
# Override keys that say where/how a job logs, not which variant it is.
_NON_VARIANT_KEYS = re.compile(r"^(hydra|paths)(\.|$)|^logger(\.|$)")
_WANDB_GROUP_MAX = 128


# --------------------------------------------------------------------------- mode


def decide_wandb_mode(requested: str | None = None) -> tuple[str, str]:
    """Choose the W&B mode without prompting and within about 3 seconds.

    Order: ``requested`` (the config's ``logger.wandb.mode``) > env
    ``WANDB_MODE`` > "offline" when no credentials exist > "offline" when the
    W&B host does not accept a TCP connection within 3 s > "online".

    Returns:
        ``(mode, reason)`` with mode in ``WANDB_MODES`` and a human reason.
    """
    if requested:
        mode, reason = _normalise_mode(requested, "logger.wandb.mode"), f"logger.wandb.mode={requested}"
    elif os.environ.get("WANDB_MODE"):
        env_mode = os.environ["WANDB_MODE"]
        mode, reason = _normalise_mode(env_mode, "WANDB_MODE"), f"WANDB_MODE={env_mode}"
    else:
        base_url = _wandb_base_url()
        if not _has_credentials(base_url):
            host = _host_port(base_url)[0]
            return "offline", f"no W&B credentials: WANDB_API_KEY unset and no netrc entry for {host}"
        mode, reason = "online", "credentials found"
    if mode != "online":
        return mode, reason
    # online, whether asked for or detected: without network wandb retries for about 80 s per
    # run before it falls back by itself, so probe first (once per process and its children)
    target = "%s:%d" % _probe_target(*_host_port(_wandb_base_url()))
    if not _reachable_once(target):
        return "offline", f"{reason}, but {target} is not reachable within {PROBE_TIMEOUT_S:g} s"
    return "online", f"{reason} and {target} reachable"


_PROBE_ENV = "ABLATE_WANDB_PROBE"  # "host:port=0|1": the probe's answer, inherited by the jobs of a sweep


def _reachable_once(target: str) -> bool:
    """The TCP probe of ``target``, made once: its answer is kept in the environment, so later
    jobs of the same sweep (in this process, joblib workers, DDP ranks) do not wait again."""
    cached = os.environ.get(_PROBE_ENV, "")
    if cached.rpartition("=")[0] == target:
        return cached.endswith("=1")
    host, _, port = target.rpartition(":")
    reachable = _tcp_reachable(host, int(port), PROBE_TIMEOUT_S)
    os.environ[_PROBE_ENV] = f"{target}={int(reachable)}"
    return reachable


def _normalise_mode(mode: str, source: str) -> str:
    """Map a user-given mode to one of ``WANDB_MODES`` or raise ValueError."""
    canonical = _MODE_ALIASES.get(mode.strip().lower(), mode.strip().lower())
    if canonical not in WANDB_MODES:
        raise ValueError(f"{source}={mode!r}: expected one of {', '.join(WANDB_MODES)}")
    return canonical


def _wandb_base_url() -> str:
    """``WANDB_BASE_URL``, else the server wandb itself defaults to.

    Asked of wandb rather than hard-coded: since 0.31 the default is
    ``https://api.forge.coreweave.com`` (a proxy of api.wandb.ai), no longer
    ``https://api.wandb.ai``.
    """
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    import wandb

    return wandb.Settings().base_url


def _host_port(url: str) -> tuple[str, int]:
    """Host and port a URL connects to."""
    parts = urlsplit(url)
    return parts.hostname or url, parts.port or (80 if parts.scheme == "http" else 443)


def _netrc_hosts(base_url: str) -> list[str]:
    """Netrc machine names wandb accepts for ``base_url``.

    Like wandb, a Forge address also accepts the entry of the W&B host behind
    it, so an older ``wandb login`` (``machine api.wandb.ai``) still counts.
    """
    hosts = [_host_port(base_url)[0]]
    try:
        from wandb.sdk.lib.urls import forge_upstream_url
    except ImportError:  # internal helper moved: the direct host is enough
        return hosts
    upstream = _host_port(forge_upstream_url(base_url))[0]
    return hosts if upstream in hosts else [*hosts, upstream]


def _has_credentials(base_url: str) -> bool:
    """True when an API key (or identity token) is in the env or the netrc.

    Reads the netrc with the stdlib: ``wandb.login`` could prompt.
    """
    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    path = Path(os.environ.get("NETRC") or Path.home() / ".netrc").expanduser()
    try:
        # An explicit path also skips netrc's permission check, which would
        # raise on a group-readable file instead of answering the question.
        entries = netrc.netrc(path)
    except (OSError, netrc.NetrcParseError):
        return False
    return any(entries.authenticators(host) is not None for host in _netrc_hosts(base_url))


def _probe_target(host: str, port: int) -> tuple[str, int]:
    """Where a connection to ``host`` really goes: the HTTPS proxy if one applies."""
    proxy = urllib.request.getproxies().get("https" if port != 80 else "http")
    if not proxy or urllib.request.proxy_bypass(host):
        return host, port
    url = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
    return url.hostname or host, url.port or 8080


def _tcp_reachable(host: str, port: int, timeout_s: float) -> bool:
    """Try a TCP connect, giving up after ``timeout_s`` *including* DNS.

    ``socket.create_connection``'s timeout does not cover name resolution,
    which can hang far longer on a machine without network, so the attempt
    runs in a daemon thread that is simply abandoned at the deadline.
    """
    outcome: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout_s):
                outcome.append(True)
        except OSError:
            outcome.append(False)

    thread = threading.Thread(target=attempt, name="wandb-reachability", daemon=True)
    thread.start()
    thread.join(timeout_s)
    return bool(outcome and outcome[0])


# ------------------------------------------------------------------------ config


@dataclass(frozen=True)
class WandbOptions:
    """The ``logger.wandb`` config node, with defaults for missing keys."""

    enabled: bool = False
    project: str = "ablate"
    entity: str | None = None
    group: str | None = None
    mode: str | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)

    @classmethod
    def from_cfg(cls, cfg: Any) -> WandbOptions:
        """Read ``cfg.logger.wandb``; a config without it means W&B off."""
        if cfg is not None and not isinstance(cfg, DictConfig):
            cfg = OmegaConf.create(cfg)
        node = OmegaConf.select(cfg, "logger.wandb", default=None) if cfg is not None else None
        if node is None:
            return cls()
        values = OmegaConf.to_container(node, resolve=True)
        known = {k: v for k, v in values.items() if k in cls.__dataclass_fields__}
        known["tags"] = tuple(str(t) for t in known.get("tags") or ())
        return cls(**known)


# ----------------------------------------------------------------------- loggers


def build_loggers(
    cfg: Any,
    output_dir: Path,
    run_name: str,
    group: str | None,
    extra_config: dict[str, Any],
    resume_id: str | None = None,
    resuming: bool = False,
) -> list[Logger]:
    """Create the job's loggers: always CSV, plus W&B when ``logger.wandb.enabled``.

    W&B is started on global rank 0 only (one run per job, however many processes train it).

    Args:
        cfg: the composed config (reads ``logger.wandb``; absent means CSV only).
        output_dir: the job's output directory; CSV goes to ``output_dir/csv/``
            and W&B files to ``output_dir/wandb/``.
        run_name: W&B display name (see :func:`run_name_from_overrides`).
        group: W&B group, e.g. :func:`multirun_group`; a non-null
            ``logger.wandb.group`` in the config wins over it.
        extra_config: stored as the W&B run config (resolved config plus the
            flat ablation axes).
        resume_id: the id of the W&B run to continue (a resumed job): the run is
            opened with ``id=resume_id, resume="allow"``, so its history goes on
            in the same run (created anew if the server does not know it).
        resuming: the job continues from a checkpoint: the CSV logger appends to the
            job's ``metrics.csv`` (Lightning's would delete it).
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    # flushed at every logging step: a killed job's metrics up to its last checkpoint are on
    # disk, and the resumed job appends after them (rows it logs again carry the same values)
    csv_class = AppendingCSVLogger if resuming else CSVLogger
    loggers: list[Logger] = [csv_class(save_dir=output_dir, name="csv", version="", flush_logs_every_n_steps=1)]
    options = WandbOptions.from_cfg(cfg)
    if options.enabled and rank_zero_only.rank == 0:
        wandb_logger = _build_wandb_logger(options, output_dir, run_name, group, extra_config, resume_id)
        if wandb_logger is not None:
            loggers.append(wandb_logger)
    return loggers


class AppendingCSVLogger(CSVLogger):
    """A ``CSVLogger`` that continues an existing ``metrics.csv`` (a resumed job) instead of
    deleting it, as Lightning 2.6's writer does when it starts. Rows logged between the last
    checkpoint and the interruption appear again after the resume, with the same values when
    the resume is exact; readers keep the last row of a step."""

    @property
    @rank_zero_experiment
    def experiment(self) -> Any:
        if self._experiment is not None:
            return self._experiment
        path = Path(self.log_dir) / "metrics.csv"
        previous = path.read_text(encoding="utf-8") if path.is_file() else ""
        experiment = super().experiment
        if previous:
            path.write_text(previous, encoding="utf-8")
            experiment.metrics_keys = sorted(next(csv.reader(previous.splitlines())))
        return experiment


def _build_wandb_logger(
    options: WandbOptions,
    output_dir: Path,
    run_name: str,
    group: str | None,
    extra_config: dict[str, Any],
    resume_id: str | None = None,
) -> WandbLogger | None:
    """Start the W&B run ourselves and wrap it; None when the mode is disabled.

    The run is created here rather than lazily by Lightning so that the mode,
    settings and metric definitions are fixed before training starts, and so
    Lightning never silently reuses a run left over from a previous job.
    """
    mode, reason = decide_wandb_mode(options.mode)
    if mode == "disabled":
        _announce(f"W&B disabled ({reason}); metrics only in {output_dir / 'csv' / 'metrics.csv'}")
        return None
    _finish_stale_run()
    init_kwargs = {
        "dir": str(output_dir),
        "project": options.project,
        "entity": options.entity,
        "name": run_name,
        "group": options.group or group,
        "tags": list(options.tags),
        "config": extra_config,
    }
    if resume_id:
        init_kwargs.update(id=resume_id, resume="allow")
    run, mode, reason = _init_run(mode, reason, init_kwargs)
    _define_metrics(run)
    if mode == "offline":
        # a resumed offline run is one more local folder with the same run id; wandb sync given
        # all of them uploads them in order of start time into that one run
        target = Path(run.dir).parent
        if resume_id:
            target = target.parent / f"offline-run-*-{resume_id}"
        _announce(f"W&B offline ({reason}). Sync later with: wandb sync {target}")
    return WandbLogger(experiment=run, save_dir=output_dir, name=run_name, project=options.project)


def _init_run(mode: str, reason: str, init_kwargs: dict[str, Any]) -> tuple[Run, str, str]:
    """``wandb.init`` in ``mode``; an online start that fails is retried offline.

    A wrong key or a server error must not cost the training run: the offline
    files can be synced once the problem is fixed.
    """
    import wandb

    run_root = Path(init_kwargs["dir"]) / "wandb"
    before = set(run_root.glob("run-*"))
    try:
        return wandb.init(mode=mode, settings=_quiet_settings(), **init_kwargs), mode, reason
    except wandb.errors.Error as err:
        if mode != "online":
            raise
        # The failed attempt leaves an empty run-* dir; drop it so the job
        # directory holds exactly one run, the offline one.
        for stale in set(run_root.glob("run-*")) - before:
            shutil.rmtree(stale, ignore_errors=True)
        offline_reason = f"online start failed: {type(err).__name__}: {err}"
        return wandb.init(mode="offline", settings=_quiet_settings(), **init_kwargs), "offline", offline_reason


def _quiet_settings() -> Any:
    """Settings under which wandb never waits for stdin nor floods stdout."""
    import wandb

    # console="off": the job's stdout is already kept by Hydra's job log;
    # wrapping it would also duplicate every line into the run files.
    return wandb.Settings(silent=True, console="off")


def _define_metrics(run: Run) -> None:
    """Plot everything against the global step; keep the best value of key metrics.

    Mirrors what Lightning's WandbLogger would define had it created the run.
    The explicit per-metric definitions repeat ``step_metric`` because a named
    definition replaces the ``*`` glob for that metric.
    """
    run.define_metric(STEP_METRIC)
    run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
    for name, goal in SUMMARY_GOALS.items():
        run.define_metric(name, summary=goal, step_metric=STEP_METRIC, step_sync=True)


def _finish_stale_run() -> None:
    """Close a run some earlier job forgot to finish, so ours is a new one."""
    import wandb

    if wandb.run is not None:
        warnings.warn(
            f"W&B run {wandb.run.name!r} was still active; finishing it before starting a new one "
            "(call ablate.logging.finish_wandb() at the end of every job).",
            RuntimeWarning,
            stacklevel=3,
        )
        wandb.finish()


@rank_zero_only
def _announce(message: str) -> None:
    """The one line a user sees about W&B (rank zero only)."""
    print(message, flush=True)


# ------------------------------------------------------------------ run control


def finish_wandb(exit_code: int = 0) -> None:
    """Finish the active W&B run, if any; a no-op when wandb was never used.

    Checks ``sys.modules`` so that a CSV-only job does not pay wandb's import.
    """
    wandb = sys.modules.get("wandb")
    if wandb is not None and getattr(wandb, "run", None) is not None:
        wandb.finish(exit_code=exit_code)


@rank_zero_only
def set_wandb_summary(loggers: list[Logger], key: str, value: Any) -> None:
    """Write ``key: value`` into the W&B run summary; a no-op without W&B."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            _write_summary(logger, key, value)


def _write_summary(logger: WandbLogger, key: str, value: Any) -> None:
    """Set one summary value, warning instead of failing on a finished run."""
    import wandb

    try:
        logger.experiment.summary[key] = value
    except wandb.errors.Error as err:
        warnings.warn(f"could not set W&B summary {key!r}: {err}", RuntimeWarning, stacklevel=3)


# ----------------------------------------------------------------------- naming


def run_name_from_overrides(overrides: list[str]) -> str:
    """A stable run name from the job's command-line overrides.

    ``["pos=rope", "norm=pre"]`` gives ``"norm=pre,pos=rope"``. Overrides of
    ``hydra.*``, ``paths.*`` and ``logger``/``logger.*`` are dropped: they
    change where a job logs, not which variant it trains. Empty gives
    ``"default"``.
    """
    kept = sorted(o for o in overrides if not _NON_VARIANT_KEYS.match(_override_key(o)))
    return ",".join(kept) or "default"


def _override_key(override: str) -> str:
    """The config key of an override, without ``+``/``++``/``~`` prefixes."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def multirun_group(configured: str | None = None) -> str | None:
    """The W&B group for this job.

    ``configured`` (``logger.wandb.group``) wins when set. Otherwise, under a
    Hydra multirun, every job of the sweep gets the same name, derived from
    ``hydra.sweep.dir``; in a single run (or outside Hydra) it is None.
    """
    if configured:
        return configured
    hydra_cfg = _hydra_config()
    if hydra_cfg is None:
        return None
    from hydra.types import RunMode

    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return _wandb_safe_name(_relative_to_cwd(str(hydra_cfg.sweep.dir), hydra_cfg.runtime.cwd))


def _hydra_config() -> Any | None:
    """The running job's ``hydra`` config node, or None outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def _relative_to_cwd(sweep_dir: str, cwd: str | None) -> str:
    """``sweep_dir`` relative to the launch directory when it lies below it."""
    path = Path(sweep_dir)
    if cwd and path.is_absolute() and path.is_relative_to(cwd):
        return str(path.relative_to(cwd))
    return sweep_dir


def _wandb_safe_name(text: str) -> str:
    """Letters, digits, ``.``, ``_`` and ``-`` only; at most 128 characters.

    Truncation keeps the end, where the sweep's timestamp is.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return safe[-_WANDB_GROUP_MAX:].lstrip("-._") or "multirun"
