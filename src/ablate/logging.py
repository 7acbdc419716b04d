"""Experiment loggers: a CSV file always; Weights & Biases, TensorBoard and MLflow when selected.

The CSV logger needs no account and is what the summary tooling reads; the others are dashboards on
top, chosen with the ``logger`` config group and combinable as a list (``logger=[wandb,tensorboard]``:
each ``conf/logger/<name>.yaml`` sets only its own ``logger.<name>`` node). Every W&B decision is
made here, *before* ``wandb.init`` runs, because wandb 0.31 left to itself either prompts for an
API key (stdin is a terminal), raises (stdin is not), or blocks for minutes (key present, network
absent). Under a Hydra multirun each job must also end its run with :func:`finish_wandb`, or the
next job logs into the previous run.

What identifies a run is the same in every logger (:class:`RunLabels`): its name (the swept keys
and the seed in a sweep, :func:`run_name_from_overrides`), its group (the sweep), its job type
(``train``, or ``sweep`` in a multirun), its tags (the top-level ``tags`` list, ``experiment:<name>``
and ``<axis>:<value>`` for every ablation axis) and its axes as flat ``axis_<name>`` keys beside the
nested resolved config (:func:`flat_axes`).

Files of one job, for ``output_dir=OUT``:

- ``OUT/csv/metrics.csv`` (Lightning 2.6 ``CSVLogger`` with ``name="csv"`` and
  ``version=""``: its log_dir is ``OUT/csv/``) and ``OUT/csv/hparams.yaml``.
- ``OUT/wandb/offline-run-<time>-<id>/`` (or ``run-<time>-<id>/`` online),
  holding the ``run-<id>.wandb`` transaction log that
  :mod:`ablate.wandb_reader` reads back.
- ``OUT/tensorboard/events.out.tfevents.*`` (``logger.tensorboard``) and its ``hparams.yaml``.
- MLflow (``logger.mlflow``) writes to one store shared by all jobs,
  ``logger.mlflow.tracking_uri`` (default ``file:<paths.log_dir>/mlruns``); a job's run carries
  the tag ``ablate.output_dir=OUT``, which is how a resumed job finds its run again.
"""

from __future__ import annotations

import csv
import importlib.util
import math
import netrc
import os
import re
import shutil
import socket
import sys
import threading
import urllib.request
import warnings
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit

from lightning.pytorch.loggers import (
    CSVLogger,
    Logger,
    MLFlowLogger,
    TensorBoardLogger,
    WandbLogger,
)
from lightning.pytorch.loggers.logger import rank_zero_experiment
from lightning.pytorch.utilities import rank_zero_only
from omegaconf import DictConfig, ListConfig, OmegaConf

from ablate.compat import flatten_params
from ablate.config import ConfigError
from ablate.dotted import select as select_key
from ablate.resolvers import ARCHITECTURE_FIRST, RUN_CONTROL_KEYS, job_dirname

if TYPE_CHECKING:
    from _typeshed import DataclassInstance
    from wandb.sdk.wandb_run import Run

WANDB_MODES = ("online", "offline", "disabled")
# Spellings wandb itself accepts in WANDB_MODE.
_MODE_ALIASES = {"dryrun": "offline", "run": "online"}
PROBE_TIMEOUT_S = 3.0
# Lightning's WandbLogger adds this key to every row; it is the x-axis.
STEP_METRIC = "trainer/global_step"
# Which aggregate the run summary keeps per metric (what sweeps compare on).
SUMMARY_GOALS = {"val/ppl": "min", "val/loss": "min", "val/bpb": "min", "val/bleu": "max"}
# Cumulative training tokens and time (ablate.callbacks.throughput): alternative x-axes.
TOKENS_METRIC = "train/tokens_seen"
TIME_METRIC = "train/time_s"
# Flat config keys of the ablation axes (``axis_act``, ``axis_lr``): the resolved config already
# has top-level ``act``, ``pos``, ``norm``, ... (the config groups), so the flat keys need a prefix.
AXIS_PREFIX = "axis_"
# Override keys that say where/how a job runs or logs, not which variant it is (besides
# ``hydra.job.config.override_dirname.exclude_keys``, which leaves them out of job directory names).
_NON_VARIANT_KEYS = re.compile(
    r"^(hydra|paths|logger|tags)(\.|$)|^(ckpt_path|print_config|callbacks\.progress_bar)$"
    rf"|^({'|'.join(RUN_CONTROL_KEYS)})$"
)
# An override key that names a ModelSpec axis (spec.axes()) maps to that axis' flat name.
_SPEC_AXIS_OF_KEY = {
    "norm.placement": "norm",
    "norm.layer": "norm_layer",
    "attn.impl": "attn",
    "act.name": "act",
    "pos.name": "pos",
    "init.name": "init",
}
_WANDB_GROUP_MAX = 128
_TAG_MAX = 64  # W&B's limit on the length of a tag
PIP_EXTRA = "pip install -c requirements/constraints.txt -e '.[{extra}]'"


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
    host, port = _probe_target(*_host_port(_wandb_base_url()))
    target = f"{host}:{port}"
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
        return cls(**_options_node(cfg, "wandb", cls))


@dataclass(frozen=True)
class TensorBoardOptions:
    """The ``logger.tensorboard`` config node (``conf/logger/tensorboard.yaml``); absent means off."""

    enabled: bool = False

    @classmethod
    def from_cfg(cls, cfg: Any) -> TensorBoardOptions:
        return cls(**_options_node(cfg, "tensorboard", cls))


@dataclass(frozen=True)
class MLflowOptions:
    """The ``logger.mlflow`` config node (``conf/logger/mlflow.yaml``); absent means off.

    ``tracking_uri`` None: ``$MLFLOW_TRACKING_URI``, else a file store beside the job,
    ``file:<output_dir>/../mlruns`` (the config file gives ``file:<paths.log_dir>/mlruns``).
    """

    enabled: bool = False
    experiment_name: str = "ablate"
    tracking_uri: str | None = None

    @classmethod
    def from_cfg(cls, cfg: Any) -> MLflowOptions:
        return cls(**_options_node(cfg, "mlflow", cls))


def _options_node(cfg: Any, name: str, options: type[DataclassInstance]) -> dict[str, Any]:
    """The known keys of ``cfg.logger.<name>``, resolved (``{}`` when the node is absent)."""
    if cfg is None:
        return {}
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(cfg)
    node = OmegaConf.select(cfg, f"logger.{name}", default=None)
    if node is None:
        return {}
    values = cast(dict[str, Any], OmegaConf.to_container(node, resolve=True))  # a mapping node
    known = {k: v for k, v in values.items() if k in options.__dataclass_fields__}
    if "tags" in known:
        known["tags"] = tuple(_as_list(known["tags"]))
    return known


class LoggerUnavailable(ConfigError):
    """A logger was selected whose package is not installed; the message names the pip command."""


# logger -> (modules that provide it, the pyproject extra that installs it)
_LOGGER_PACKAGES = {"tensorboard": (("tensorboard", "tensorboardX"), "tensorboard"), "mlflow": (("mlflow",), "mlflow")}


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def check_loggers(cfg: Any) -> None:
    """Fail at once, before any data is read, when a selected logger's package is missing.

    Raises:
        LoggerUnavailable: naming the ``pip install`` command of the missing extra.
    """
    selected = {"tensorboard": TensorBoardOptions.from_cfg(cfg).enabled, "mlflow": MLflowOptions.from_cfg(cfg).enabled}
    for name, enabled in selected.items():
        modules, extra = _LOGGER_PACKAGES[name]
        if enabled and not any(_installed(m) for m in modules):
            raise LoggerUnavailable(
                f"logger {name} is selected (logger.{name}.enabled=true) but the {modules[0]} package is not "
                f"installed. Install it with:\n  {PIP_EXTRA.format(extra=extra)}\n"
                f"(from the repository root), or drop {name} from the logger list"
            )


def user_tags(cfg: Any) -> list[str]:
    """The top-level ``tags`` config key (a list; a single string is one tag)."""
    if cfg is None:
        return []
    if not isinstance(cfg, DictConfig):
        cfg = OmegaConf.create(cfg)
    return _as_list(OmegaConf.select(cfg, "tags", default=None))


def _as_list(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, ListConfig):
        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, str):
        return [value] if value else []
    return [str(v) for v in value]


# ----------------------------------------------------------------------- loggers


def build_loggers(
    cfg: Any,
    output_dir: Path,
    run_name: str,
    group: str | None,
    extra_config: dict[str, Any],
    resume_id: str | None = None,
    resuming: bool = False,
    labels: RunLabels | None = None,
) -> list[Logger]:
    """Create the job's loggers: always CSV, plus W&B, TensorBoard and MLflow when enabled.

    W&B and MLflow are started on global rank 0 only (one run per job, however many processes
    train it); TensorBoard is Lightning's logger, which writes from rank 0 by itself.

    Args:
        cfg: the composed config (reads ``logger.*`` and ``tags``; no ``logger`` means CSV only).
        output_dir: the job's output directory; CSV goes to ``output_dir/csv/``, W&B files to
            ``output_dir/wandb/``, TensorBoard to ``output_dir/tensorboard/``.
        run_name: the run's display name in every logger (see :func:`run_name_from_overrides`).
        group: W&B group and MLflow tag ``group``, e.g. :func:`multirun_group`; a non-null
            ``logger.wandb.group`` in the config wins over it.
        extra_config: stored as the W&B run config and the MLflow params (resolved config plus
            the ``axes`` summary); the flat ``axis_*`` keys are added to it (:func:`flat_axes`).
        resume_id: the id of the W&B run to continue (a resumed job): the run is
            opened with ``id=resume_id, resume="allow"``, so its history goes on
            in the same run (created anew if the server does not know it).
        resuming: the job continues from a checkpoint: the CSV logger appends to the
            job's ``metrics.csv`` (Lightning's would delete it) and MLflow reopens the job's run.
        labels: job type, swept keys and experiment of the job (:meth:`RunLabels.current`, which
            is also the default: it reads the running Hydra job, if any).
    """
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    check_loggers(cfg)
    labels = labels if labels is not None else RunLabels.current()
    axes = flat_axes(extra_config, labels.swept)
    tags = run_tags(user_tags(cfg), labels.experiment, axes)
    # flushed at every logging step: a killed job's metrics up to its last checkpoint are on
    # disk, and the resumed job appends after them (rows it logs again carry the same values)
    csv_class = AppendingCSVLogger if resuming else CSVLogger
    loggers: list[Logger] = [csv_class(save_dir=output_dir, name="csv", version="", flush_logs_every_n_steps=1)]
    config_keys = frozenset(extra_config)
    options = WandbOptions.from_cfg(cfg)
    group = options.group or group  # a configured logger.wandb.group names the group in every logger
    if options.enabled and rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # set by lightning at import, not in its types
        wandb_tags = _unique([*options.tags, *tags])
        wandb_logger = _build_wandb_logger(
            options,
            output_dir,
            run_name,
            group,
            {**extra_config, **axes},
            resume_id,
            tags=wandb_tags,
            job_type=labels.job_type,
        )
        if wandb_logger is not None:
            loggers.append(wandb_logger)
    if TensorBoardOptions.from_cfg(cfg).enabled:
        summary = {
            "run_name": run_name,
            "group": group or "",
            "job_type": labels.job_type,
            "tags": ", ".join(tags),
            **scalar_hparams(extra_config),
            **axes,
        }
        loggers.append(_build_tensorboard_logger(output_dir, summary, tags, config_keys))
        if rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # set by lightning at import, not in its types
            print(f"tensorboard  {output_dir / 'tensorboard'}  (view: tensorboard --logdir {output_dir.parent})")
    mlflow_options = MLflowOptions.from_cfg(cfg)
    if mlflow_options.enabled and rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # other ranks would race to create the store
        loggers.append(
            _build_mlflow_logger(
                mlflow_options,
                output_dir,
                run_name,
                group,
                labels.job_type,
                {**extra_config, **axes},
                tags,
                resuming,
                config_keys,
            )
        )
    return loggers


# The run-config groups whose scalar values are a run's hyper-parameters (TensorBoard's HPARAMS tab)
HPARAM_GROUPS = ("task", "model", "pos", "norm", "act", "init", "attn", "optim", "data")
_NOT_HPARAMS = ("_target_", "data_dir", "cache_dir")


def scalar_hparams(config: Mapping[str, Any]) -> dict[str, Any]:
    """The run's hyper-parameters as flat ``group.key -> scalar`` (``optim.lr``, ``model.d_model``, ...)
    plus ``seed`` and ``params``: what TensorBoard's HPARAMS tab can filter and sort on."""
    flat: dict[str, Any] = {}

    def walk(node: Any, prefix: str) -> None:
        if isinstance(node, Mapping):
            for key, value in node.items():
                if str(key) not in _NOT_HPARAMS:
                    walk(value, f"{prefix}.{key}")
        elif isinstance(node, (bool, int, float, str)):
            flat[prefix] = node

    for group in HPARAM_GROUPS:
        if isinstance(config.get(group), Mapping):
            walk(config[group], group)
    flat.update({key: config[key] for key in ("seed", "params") if isinstance(config.get(key), (int, float))})
    return flat


# Constructor arguments of the task modules (ablate.tasks): Lightning logs them as hyper-parameters
# at the start of fit, but each is already in the run config (``spec`` is the resolved model config
# again, ``optim``/``data`` the same nodes, ``compile`` is ``model.compile``).
_TASK_HPARAMS = frozenset({"spec", "optim", "data", "decode", "task", "compile"})


def _new_hparams(params: Any, config_keys: Collection[str]) -> dict[str, Any]:
    """Hyper-parameters Lightning hands a logger, less what the run config already holds."""
    params = dict(vars(params) if not isinstance(params, Mapping) else params)
    return {k: v for k, v in params.items() if k not in _TASK_HPARAMS and k not in config_keys}


class AblateWandbLogger(WandbLogger):
    """Lightning's ``WandbLogger`` without the duplicate of the run config that Lightning logs
    as hyper-parameters (the task's ``spec``/``optim``/``data``); other hyper-parameters, such as
    the translation task's ``bleu_signature``, still reach the run config."""

    def __init__(self, *args: Any, config_keys: Collection[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config_keys = frozenset(config_keys)

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        params = _new_hparams(params, self._config_keys)
        if params:
            super().log_hyperparams(params)


class AblateTensorBoardLogger(TensorBoardLogger):
    """Lightning's ``TensorBoardLogger`` (no ``hp_metric`` placeholder) that skips the task's
    duplicate hyper-parameters, as :class:`AblateWandbLogger` does."""

    def __init__(self, *args: Any, config_keys: Collection[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config_keys = frozenset(config_keys)

    @rank_zero_only
    def log_hyperparams(self, params: Any, metrics: dict[str, Any] | None = None, step: int | None = None) -> None:
        params = _new_hparams(params, self._config_keys)
        if params:
            super().log_hyperparams(params, metrics=metrics, step=step)


def _build_tensorboard_logger(
    output_dir: Path, summary: dict[str, Any], tags: list[str], config_keys: Collection[str]
) -> TensorBoardLogger:
    """``output_dir/tensorboard/`` with the run's name, group, job type, tags and axes as
    hyper-parameters (TensorBoard's HPARAMS tab) and the tags as text."""
    logger = AblateTensorBoardLogger(
        save_dir=output_dir, name="tensorboard", version="", default_hp_metric=False, config_keys=config_keys
    )
    if rank_zero_only.rank == 0:  # type: ignore[attr-defined]  # set by lightning at import, not in its types
        TensorBoardLogger.log_hyperparams(logger, summary)
        logger.experiment.add_text("run/tags", "\n".join(f"- {t}" for t in tags) or "(none)", 0)
    return logger


class AblateMLFlowLogger(MLFlowLogger):
    """Lightning's ``MLFlowLogger`` that skips the task's duplicate hyper-parameters, never logs
    a param twice (MLflow refuses to change a param: a resumed run keeps its first values) and
    spells ``test/ppl@512`` as ``test/ppl_at_512`` (MLflow allows no ``@`` in a name)."""

    def __init__(self, *args: Any, config_keys: Collection[str] = (), **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._config_keys = frozenset(config_keys)
        self._logged_params: set[str] | None = None

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        self.log_params(_new_hparams(params, self._config_keys))

    @rank_zero_only
    def log_params(self, params: dict[str, Any]) -> None:
        """Log ``params`` (nested dicts flattened with ``/``), skipping keys the run already has."""
        if self._logged_params is None:
            self._logged_params = set(self.experiment.get_run(self.run_id).data.params)
        flat = {k: v for k, v in flatten_params(params).items() if k not in self._logged_params}
        if flat:
            super().log_hyperparams(flat)
            self._logged_params.update(flat)

    @rank_zero_only
    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        super().log_metrics({k.replace("@", "_at_"): v for k, v in metrics.items()}, step)


OUTPUT_DIR_TAG = "ablate.output_dir"


def _build_mlflow_logger(
    options: MLflowOptions,
    output_dir: Path,
    run_name: str,
    group: str | None,
    job_type: str,
    params: dict[str, Any],
    tags: list[str],
    resuming: bool,
    config_keys: Collection[str],
) -> MLFlowLogger:
    """An MLflow run in ``options.tracking_uri`` named ``run_name``, tagged with the group, job
    type, output directory and the run's tags (``key:value`` -> tag ``key=value``; a plain tag
    ``t`` -> ``t=""``); the resolved config and flat axes as params. A resumed job reopens the
    run that carries its output directory."""
    uri = options.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or f"file:{output_dir.parent / 'mlruns'}"
    if uri.startswith("file:"):
        # MLflow 3 keeps the file store only as an opt-in (it otherwise raises, asking for a
        # database); a file store needs no server and takes concurrent jobs (one folder per run)
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    mlflow_tags = {"group": group or "", "job_type": job_type, OUTPUT_DIR_TAG: str(output_dir.resolve())}
    for tag in tags:
        key, _, value = tag.partition(":")
        mlflow_tags.setdefault(key, value)
    run_id = _prepare_mlflow(uri, options.experiment_name, output_dir if resuming else None)
    logger = AblateMLFlowLogger(
        experiment_name=options.experiment_name,
        run_name=run_name,
        tracking_uri=uri,
        tags=mlflow_tags,
        run_id=run_id,
        config_keys=config_keys,
    )
    logger.log_params(params)
    print(
        f"mlflow       {uri}  experiment {options.experiment_name}, run {logger.run_id}  (view: mlflow ui "
        f"--backend-store-uri {uri})"
    )
    return logger


def _prepare_mlflow(uri: str, experiment_name: str, resume_dir: Path | None) -> str | None:
    """Create the experiment (two jobs starting together may both try: the loser finds the
    winner's); with ``resume_dir``, the id of the latest run of that output directory, if any."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(experiment_name)
    if experiment is None:
        try:
            client.create_experiment(experiment_name)
        except MlflowException:
            pass  # created meanwhile by another job
        experiment = client.get_experiment_by_name(experiment_name)
    if resume_dir is None or experiment is None:
        return None
    value = str(resume_dir.resolve()).replace("'", "\\'")
    runs = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{OUTPUT_DIR_TAG}` = '{value}'",
        order_by=["attributes.start_time DESC"],
        max_results=1,
    )
    return runs[0].info.run_id if runs else None


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
        with warnings.catch_warnings():
            # Lightning warns that the previous log files "will be deleted": not here, they are kept
            warnings.filterwarnings("ignore", message=".*Previous log files in this directory will be deleted")
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
    tags: list[str] | None = None,
    job_type: str = "train",
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
        "job_type": job_type,
        "tags": list(options.tags) if tags is None else list(tags),
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
    return AblateWandbLogger(
        experiment=run, save_dir=output_dir, name=run_name, project=options.project, config_keys=extra_config
    )


def _init_run(mode: str, reason: str, init_kwargs: dict[str, Any]) -> tuple[Run, str, str]:
    """``wandb.init`` in ``mode``; an online start that fails is retried offline.

    A wrong key or a server error must not cost the training run: the offline
    files can be synced once the problem is fixed.
    """
    import wandb

    run_root = Path(init_kwargs["dir"]) / "wandb"
    before = set(run_root.glob("run-*"))
    try:
        wandb_mode = cast(Literal["online", "offline", "disabled", "shared"], mode)  # decide_wandb_mode's modes
        return wandb.init(mode=wandb_mode, settings=_quiet_settings(), **init_kwargs), mode, reason
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
    """Plot everything against the global step; keep the best value of key metrics; declare the
    cumulative tokens and training time, the other x-axes of a comparison.

    Mirrors what Lightning's WandbLogger would define had it created the run.
    The explicit per-metric definitions repeat ``step_metric`` because a named
    definition replaces the ``*`` glob for that metric.
    """
    run.define_metric(STEP_METRIC)
    run.define_metric("*", step_metric=STEP_METRIC, step_sync=True)
    for name, goal in SUMMARY_GOALS.items():
        run.define_metric(name, summary=goal, step_metric=STEP_METRIC, step_sync=True)
    # the other x-axes: cumulative tokens and training time, logged in the training rows and in
    # every validation row (ablate.callbacks.throughput), so any panel can be drawn against them
    for name in (TOKENS_METRIC, TIME_METRIC):
        run.define_metric(name, summary="max", step_metric=STEP_METRIC, step_sync=True)


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


@dataclass(frozen=True)
class RunLabels:
    """What a job is called and tagged with in every logger, decided in the Hydra job process
    (:meth:`current`) and handed as it is to ranks that run without Hydra.

    Attributes:
        name: the run name (:func:`run_name_from_overrides`).
        job_type: ``sweep`` for a job of a Hydra multirun, else ``train``.
        experiment: the ``experiment=`` config chosen, if any (tag ``experiment:<name>``).
        swept: ``(key, value)`` of this job's overrides of the keys the multirun sweeps (more
            than one value), seed excluded: they become flat ``axis_*`` config keys and tags.
    """

    name: str = "default"
    job_type: str = "train"
    experiment: str | None = None
    swept: tuple[tuple[str, str], ...] = ()

    @classmethod
    def current(cls, overrides: list[str] | None = None) -> RunLabels:
        """The labels of the running Hydra job (``overrides`` default: its task overrides);
        outside Hydra, those of a single run with these overrides."""
        hydra_cfg = _hydra_config()
        if overrides is None:
            overrides = list(hydra_cfg.overrides.task) if hydra_cfg is not None else []
        swept = swept_keys(hydra_cfg) if _is_multirun(hydra_cfg) else None
        excluded = _excluded_keys(hydra_cfg)
        pairs = tuple(
            (_override_key(o), o.split("=", 1)[1])
            for o in overrides
            if "=" in o
            and swept is not None
            and _override_key(o) in swept
            and _override_key(o) not in excluded
            and _override_key(o) != "seed"
        )
        choices = dict(hydra_cfg.runtime.choices) if hydra_cfg is not None else {}
        experiment = choices.get("experiment") or _override_values(overrides).get("experiment")
        return cls(
            name=run_name_from_overrides(overrides, swept),
            job_type="train" if swept is None else "sweep",
            experiment=experiment,
            swept=pairs,
        )


_FROM_HYDRA: Any = object()


def run_name_from_overrides(overrides: list[str], swept: Collection[str] | None = _FROM_HYDRA) -> str:
    """A short, stable run name from the job's command-line overrides.

    In a multirun (``swept``: the keys the sweep varies; by default read from the running Hydra
    job, :func:`swept_keys`), the swept overrides and the seed, with their full keys, as in the
    job directory names: ``-m act=gelu,swiglu seed=1 trainer.max_steps=600`` names its jobs
    ``act=gelu,seed=1`` and ``act=swiglu,seed=1``. Otherwise (a single run, or a sweep of
    nothing) the experiment name and the other overrides with their keys shortened to the last
    part where that is unambiguous: ``experiment=glu act=swiglu trainer.max_steps=100`` gives
    ``glu,act=swiglu,max_steps=100``. Architecture keys come first, the seed last; overrides of
    where or how a job runs or logs (``hydra.*``, ``paths.*``, ``logger``, ``tags``, ``ckpt_path``,
    ... and ``hydra.job.config.override_dirname.exclude_keys``) are dropped; a name longer than
    120 characters ends with a hash (:func:`ablate.resolvers.job_dirname`). Nothing left gives
    ``"default"``.
    """
    hydra_cfg = _hydra_config()
    if swept is _FROM_HYDRA:
        swept = swept_keys(hydra_cfg) if _is_multirun(hydra_cfg) else None
    excluded = _excluded_keys(hydra_cfg)
    kept = [
        o.lstrip("+")
        for o in overrides
        if ("=" in o or o.startswith("~"))
        and _override_key(o) not in excluded
        and not _NON_VARIANT_KEYS.match(_override_key(o))
    ]
    if swept is not None:
        chosen = [o for o in kept if _override_key(o) in swept or _override_key(o) == "seed"]
        if chosen:
            return job_dirname(",".join(sorted(chosen, key=_name_order)))
    experiment = [o.split("=", 1)[1] for o in kept if _override_key(o) == "experiment" and "=" in o]
    others = sorted((o for o in kept if _override_key(o) != "experiment"), key=_name_order)
    short = _short_names([_override_key(o) for o in others])
    items = [o.replace(_override_key(o), short[_override_key(o)], 1) for o in others]
    return job_dirname(",".join([*experiment, *items])) if experiment or items else "default"


def _name_order(override: str) -> tuple[int, str]:
    """Architecture overrides first (:data:`ablate.resolvers.ARCHITECTURE_FIRST`), the seed last."""
    key = _override_key(override)
    top = key.split(".", 1)[0]
    if key == "seed":
        return len(ARCHITECTURE_FIRST) + 1, override
    return (ARCHITECTURE_FIRST.index(top) if top in ARCHITECTURE_FIRST else len(ARCHITECTURE_FIRST)), override


def _short_names(keys: list[str]) -> dict[str, str]:
    """Key -> its last part where no other key has the same last part, else the key itself."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: s if last.count(s) == 1 else k for k, s in zip(keys, last)}


def _override_key(override: str) -> str:
    """The config key of an override, without ``+``/``++``/``~`` prefixes."""
    return override.split("=", 1)[0].lstrip("+~").strip()


def _override_values(overrides: Iterable[str]) -> dict[str, str]:
    return {_override_key(o): o.split("=", 1)[1] for o in overrides if "=" in o and not o.startswith("~")}


def _is_multirun(hydra_cfg: Any | None) -> bool:
    if hydra_cfg is None:
        return False
    from hydra.types import RunMode

    return hydra_cfg.mode == RunMode.MULTIRUN


def _excluded_keys(hydra_cfg: Any | None) -> frozenset[str]:
    """``hydra.job.config.override_dirname.exclude_keys``: what job directory names leave out."""
    if hydra_cfg is None:
        return frozenset()
    keys = OmegaConf.select(hydra_cfg, "job.config.override_dirname.exclude_keys", default=None) or []
    return frozenset(str(k) for k in keys)


def swept_keys(hydra_cfg: Any | None = None) -> frozenset[str]:
    """The keys the running multirun sweeps: those whose sweep has more than one value, among
    ``hydra.sweeper.params`` (an experiment's sweep) and the sweep's command line (kept by Hydra's
    sweeper in ``<sweep dir>/multirun.yaml``); the command line wins for a key in both, as in
    Hydra's ``BasicSweeper``. Without ``multirun.yaml`` (another sweeper) every override of the
    job counts, like in its directory name.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    hydra_cfg = hydra_cfg if hydra_cfg is not None else _hydra_config()
    if hydra_cfg is None:
        return frozenset()
    command_line = _sweep_command_line(hydra_cfg)
    if command_line is None:
        return frozenset(_override_key(o) for o in hydra_cfg.overrides.task)
    params = OmegaConf.select(hydra_cfg, "sweeper.params", default=None) or {}
    typed = [f"{key}={value}" for key, value in params.items()] + command_line
    final: dict[str, Any] = {}
    try:
        for override in OverridesParser.create().parse_overrides(typed):
            final[override.key_or_group] = override
    except HydraException:  # cannot parse what Hydra itself parsed: count every override
        return frozenset(_override_key(o) for o in hydra_cfg.overrides.task)
    swept = set()
    for key, override in final.items():
        if not override.is_sweep_override():
            continue
        try:
            several = not override.is_discrete_sweep() or len(set(override.sweep_string_iterator())) > 1
        except HydraException:  # e.g. glob(...), which needs the config to expand
            several = True
        if several:
            swept.add(key)
    return frozenset(swept)


def _sweep_command_line(hydra_cfg: Any) -> list[str] | None:
    """The sweep's overrides as typed (``act=gelu,swiglu``), from ``<sweep dir>/multirun.yaml``."""
    import yaml

    try:
        path = Path(str(hydra_cfg.sweep.dir)) / "multirun.yaml"
        sweep_cfg = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else None
    except (OSError, ValueError, yaml.YAMLError):
        return None
    task = (((sweep_cfg or {}).get("hydra") or {}).get("overrides") or {}).get("task")
    return [str(o) for o in task] if isinstance(task, list) else None


def flat_axes(run_config: Mapping[str, Any], swept: Iterable[tuple[str, str]] = ()) -> dict[str, Any]:
    """The ablation axes as flat top-level config keys, ``axis_<name>``: the model's axes
    (``run_config["axes"]``: ``axis_pos``, ``axis_norm``, ``axis_norm_layer``, ``axis_act``,
    ``axis_init``, ``axis_attn``) and every swept key, named by its last part where that is
    unambiguous (``optim.lr`` -> ``axis_lr``) with its resolved value (a number stays a number),
    or the option chosen for a config group (``model=tiny`` -> ``axis_model: tiny``)."""
    axes = {f"{AXIS_PREFIX}{k}": v for k, v in (run_config.get("axes") or {}).items()}
    swept = list(swept)
    names = axis_config_keys([key for key, _ in swept])
    for key, typed in swept:
        value = select_key(run_config, key)
        if value is None or isinstance(value, (Mapping, list)):  # a config group: the option chosen
            value = _typed(typed)
        axes[names[key]] = value
    return axes


def axis_config_keys(keys: Iterable[str]) -> dict[str, str]:
    """Override key -> its flat config key (:func:`flat_axes`): ``optim.lr`` -> ``axis_lr``,
    ``act`` -> ``axis_act``, ``norm.layer`` -> ``axis_norm_layer``; a last part two keys share
    keeps the whole key (``model.dropout`` -> ``axis_model_dropout``)."""
    keys = list(keys)
    short = _short_names([k for k in keys if k not in _SPEC_AXIS_OF_KEY])
    return {k: AXIS_PREFIX + (_SPEC_AXIS_OF_KEY.get(k) or short[k]).replace(".", "_") for k in keys}


def run_tags(user: Iterable[str], experiment: str | None, axes: Mapping[str, Any]) -> list[str]:
    """The user's tags, then ``experiment:<name>`` and ``<axis>:<value>`` for every flat axis;
    at most 64 characters each (W&B's limit), no duplicates."""
    auto = [f"experiment:{experiment}"] if experiment else []
    auto += [f"{k.removeprefix(AXIS_PREFIX)}:{_tag_value(v)}" for k, v in axes.items() if v is not None]
    return _unique(t[:_TAG_MAX] for t in [*user, *auto] if t)


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _tag_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and math.isfinite(value):
        return f"{value:g}"
    return str(value)


def _typed(text: str) -> Any:
    """An override's value as the config would hold it: a number if it is one, else the text."""
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def multirun_group(configured: str | None = None) -> str | None:
    """The W&B group for this job.

    ``configured`` (``logger.wandb.group``) wins when set. Otherwise, under a
    Hydra multirun, every job of the sweep gets the sweep's name (:func:`sweep_group`);
    in a single run (or outside Hydra) it is None.
    """
    if configured:
        return configured
    hydra_cfg = _hydra_config()
    if hydra_cfg is None or not _is_multirun(hydra_cfg):
        return None
    return sweep_group(str(hydra_cfg.sweep.dir))


def sweep_group(sweep_dir: str | Path) -> str:
    """A sweep's W&B group: the name of its directory (``sweep_name``, or the name derived from the
    command), not its path, which depends on where the checkout and the working directory are."""
    return _wandb_safe_name(Path(sweep_dir).name)


def _hydra_config() -> Any | None:
    """The running job's ``hydra`` config node, or None outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def _wandb_safe_name(text: str) -> str:
    """Letters, digits, ``.``, ``_`` and ``-`` only; at most 128 characters.

    Truncation keeps the end, where the sweep's timestamp is.
    """
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return safe[-_WANDB_GROUP_MAX:].lstrip("-._") or "multirun"
