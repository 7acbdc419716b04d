"""What a run is called and tagged with in every logger: its name, the keys a multirun sweeps, its W&B
group, its ablation axes as flat ``axis_<name>`` config keys, and its tags."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from ablate.config.dotted import override_key
from ablate.config.dotted import select as select_key
from ablate.config.resolvers import RUN_CONTROL_KEYS, hashed_if_long, name_order
from ablate.nn.axes import AXES

# Flat config keys of the ablation axes (``axis_act``, ``axis_lr``): the resolved config already
# has top-level ``act``, ``pos``, ``norm``, ... (the config groups), so the flat keys need a prefix.
AXIS_PREFIX = "axis_"
# Override keys that say where/how a job runs or logs, not which variant it is (besides
# ``hydra.job.config.override_dirname.exclude_keys``, which leaves them out of job directory names).
_NON_VARIANT_KEYS = re.compile(
    r"^(hydra|paths|logger|tags)(\.|$)|^(ckpt_path|print_config|callbacks\.progress_bar)$"
    rf"|^({'|'.join(RUN_CONTROL_KEYS)})$"
)
# An override key that names a ModelSpec axis (ablate.nn.axes.spec_axes) maps to that axis' flat name.
_SPEC_AXIS_OF_KEY = {axis.key: axis.name for axis in AXES}
_WANDB_GROUP_MAX = 128
_TAG_MAX = 64  # W&B's limit on the length of a tag


@dataclass(frozen=True)
class RunLabels:
    """What a job is called and tagged with in every logger, decided in the Hydra job process
    (:meth:`current`) and handed to ranks that run without Hydra: the run ``name``, ``job_type``
    (``sweep`` or ``train``), the ``experiment`` chosen, and ``swept``, this job's ``(key, value)``
    of the keys the multirun sweeps (seed excluded: they become ``axis_*`` keys and tags)."""

    name: str = "default"
    job_type: str = "train"
    experiment: str | None = None
    swept: tuple[tuple[str, str], ...] = ()

    @classmethod
    def current(cls, overrides: list[str] | None = None) -> RunLabels:
        """The running Hydra job's labels (``overrides``: its task overrides), else a single run's."""
        hydra_cfg = _hydra_config()
        if overrides is None:
            overrides = list(hydra_cfg.overrides.task) if hydra_cfg is not None else []
        swept = swept_keys(hydra_cfg) if _is_multirun(hydra_cfg) else None
        excluded = _excluded_keys(hydra_cfg)
        typed = [(override_key(o), o.split("=", 1)[1]) for o in overrides if "=" in o]
        pairs = tuple((k, v) for k, v in typed if swept is not None and k in swept - excluded and k != "seed")
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
    """A short, stable run name from the job's overrides, in job-folder order (:func:`name_order`).

    In a multirun (``swept``: by default :func:`swept_keys`), the swept overrides and the seed with
    their full keys (``act=gelu,seed=1``; the analysis of a W&B group reads the overrides back).
    Otherwise the experiment name and the other overrides, keys shortened where unambiguous
    (``glu,act=swiglu,max_steps=100``). Where or how a job runs or logs is left out; past 120
    characters a hash of the whole ends it; nothing left gives ``"default"``.
    """
    hydra_cfg = _hydra_config()
    if swept is _FROM_HYDRA:
        swept = swept_keys(hydra_cfg) if _is_multirun(hydra_cfg) else None
    excluded = _excluded_keys(hydra_cfg)
    kept = [
        o.lstrip("+")
        for o in overrides
        if ("=" in o or o.startswith("~"))
        and override_key(o) not in excluded
        and not _NON_VARIANT_KEYS.match(override_key(o))
    ]
    if swept is not None:
        chosen = [o for o in kept if override_key(o) in swept or override_key(o) == "seed"]
        if chosen:
            return _run_name(sorted(chosen, key=name_order))
    experiment = [o.split("=", 1)[1] for o in kept if override_key(o) == "experiment" and "=" in o]
    others = sorted((o for o in kept if override_key(o) != "experiment"), key=name_order)
    short = _short_names([override_key(o) for o in others])
    items = [o.replace(override_key(o), short[override_key(o)], 1) for o in others]
    return _run_name([*experiment, *items]) if experiment or items else "default"


def _run_name(items: list[str]) -> str:
    """``items`` joined by ``,``; past 120 characters, the first items and a hash of the whole."""
    return hashed_if_long(",".join(items).replace("/", "_"), items)


def _short_names(keys: list[str]) -> dict[str, str]:
    """Key -> its last part where no other key has the same last part, else the key itself."""
    last = [k.rsplit(".", 1)[-1] for k in keys]
    return {k: s if last.count(s) == 1 else k for k, s in zip(keys, last)}


def _override_values(overrides: Iterable[str]) -> dict[str, str]:
    return {override_key(o): o.split("=", 1)[1] for o in overrides if "=" in o and not o.startswith("~")}


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
    """The keys the running multirun sweeps with more than one value, from ``hydra.sweeper.params`` and
    the command line in ``<sweep dir>/multirun.yaml`` (which wins, as in Hydra's ``BasicSweeper``);
    without that file every override of the job counts."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    hydra_cfg = hydra_cfg if hydra_cfg is not None else _hydra_config()
    if hydra_cfg is None:
        return frozenset()
    command_line = _sweep_command_line(hydra_cfg)
    if command_line is None:
        return frozenset(override_key(o) for o in hydra_cfg.overrides.task)
    params = OmegaConf.select(hydra_cfg, "sweeper.params", default=None) or {}
    typed = [f"{key}={value}" for key, value in params.items()] + command_line
    final: dict[str, Any] = {}
    try:
        for override in OverridesParser.create().parse_overrides(typed):
            final[override.key_or_group] = override
    except HydraException:  # cannot parse what Hydra itself parsed: count every override
        return frozenset(override_key(o) for o in hydra_cfg.overrides.task)
    return frozenset(key for key, override in final.items() if is_swept(override))


def is_swept(override: Any) -> bool:
    """A parsed Hydra override sweeping more than one value (``glob(...)`` counts: the config expands it)."""
    from hydra.errors import HydraException

    if not override.is_sweep_override():
        return False
    try:
        return not override.is_discrete_sweep() or len(set(override.sweep_string_iterator())) > 1
    except HydraException:
        return True


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
    """The ablation axes as flat config keys ``axis_<name>``: the model's (``run_config["axes"]``) and
    every swept key's resolved value (``optim.lr`` -> ``axis_lr``), or a config group's option chosen
    (``model=tiny`` -> ``axis_model: tiny``)."""
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
    """The user's tags, ``experiment:<name>``, ``<axis>:<value>``: at most 64 characters (W&B's), no duplicates."""
    auto = [f"experiment:{experiment}"] if experiment else []
    auto += [f"{k.removeprefix(AXIS_PREFIX)}:{_tag_value(v)}" for k, v in axes.items() if v is not None]
    return list(dict.fromkeys(t[:_TAG_MAX] for t in [*user, *auto] if t))  # in order, no duplicates


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
    """The W&B group: ``configured`` (``logger.wandb.group``), else a multirun's :func:`sweep_group`, else None."""
    if configured:
        return configured
    hydra_cfg = _hydra_config()
    if hydra_cfg is None or not _is_multirun(hydra_cfg):
        return None
    return sweep_group(str(hydra_cfg.sweep.dir))


def sweep_group(sweep_dir: str | Path) -> str:
    """A sweep's W&B group: its directory's name, not its path (which depends on the working directory)."""
    return _wandb_safe_name(Path(sweep_dir).name)


def _hydra_config() -> Any | None:
    """The running job's ``hydra`` config node, or None outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def _wandb_safe_name(text: str) -> str:
    """Letters, digits, ``.``, ``_`` and ``-`` only; at most 128 characters, keeping the end (the timestamp)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-._")
    return safe[-_WANDB_GROUP_MAX:].lstrip("-._") or "multirun"
