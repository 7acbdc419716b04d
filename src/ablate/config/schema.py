"""The keys every config group accepts, each group's from one source, so that an unknown or
misspelt key (``+model.foo=1``, ``+decode.beam_sizee=3``, ``+logger.wandb.projet=x``) fails before
any data is read, naming the key and the valid ones.

The sources are the code that reads the keys, never a second list to keep in step:

- a node with ``_target_`` (``data``, ``trainer``, each ``callbacks.*``): the parameters of the
  target it instantiates (following ``**kwargs`` up the class hierarchy);
- ``model``: :data:`ablate.config.model.MODEL_KEYS` (what :func:`ablate.config.model.model_spec` reads);
- ``optim``: the run checks' rules and each optimiser's keys (:mod:`ablate.optim`);
- ``task``: the task class's ``config_keys``; ``decode``: :class:`ablate.tasks.decoding.DecodeConfig`;
  ``logger.*``: the options dataclasses of :mod:`ablate.tracking.options`. Those readers live in the
  layers above this one, which hand their keys in (``declared``: :func:`ablate.tasks.config_keys`,
  :func:`ablate.tracking.options.logger_keys`);
- ``eval``, ``log``, ``runtime``, ``paths``: declared below, next to nothing else that reads them.

A data class may also name the valid values of a key (``CONFIG_CHOICES``, e.g. Tiny Shakespeare's
``splits``): :func:`check_config_choices` refuses any other value, by name, before data is read.

The architecture groups (``pos``, ``norm``, ``act``, ``init``, ``attn``) are checked by
:mod:`ablate.config.options`, whose registries declare each option's keys. Hydra's structured configs
would need a dataclass per YAML option mirroring these sources; reading the sources keeps one truth.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ablate.config.options import ConfigError
from ablate.config.types import EVAL_TYPES, LOG_TYPES, PATHS_TYPES, RUNTIME_TYPES, check_config_types

EVAL_KEYS, LOG_KEYS, RUNTIME_KEYS, PATHS_KEYS = (
    frozenset(t) for t in (EVAL_TYPES, LOG_TYPES, RUNTIME_TYPES, PATHS_TYPES)
)
LOGGERS = ("wandb", "tensorboard", "mlflow")  # the logger.<name> nodes (ablate.tracking.options); csv has none
# config path -> the keys of a group whose reader lives above this layer: a set, or key -> type
Declared = Mapping[str, "frozenset[str] | Mapping[str, Any] | None"]


def target_keys(target: str) -> frozenset[str] | None:
    """The keyword arguments ``target`` accepts (a class: its ``__init__`` and, through
    ``**kwargs``, its bases'); None when it takes any keyword (nothing to check)."""
    from hydra.utils import get_object

    obj = get_object(target)
    functions: list[Callable[..., Any]] = (
        [vars(c)["__init__"] for c in obj.__mro__ if "__init__" in vars(c)] if inspect.isclass(obj) else [obj]
    )
    keys: set[str] = set()
    for function in functions:
        params = inspect.signature(function).parameters.values()
        keys.update(p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name != "self")
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return frozenset(keys)
    return None  # **kwargs all the way up (object.__init__ would refuse them, but a wrapper may not)


def group_keys(cfg: DictConfig, declared: Declared) -> dict[str, frozenset[str] | None]:
    """``config path -> the keys valid there`` for the groups of this composed config; ``declared``:
    those of the groups whose readers live above the config layer (the task's ``task``, ``decode``
    and ``model`` keys, the loggers'), each a set of keys or ``key -> type``
    (:func:`ablate.tasks.config_keys`, :func:`ablate.tracking.options.logger_keys`)."""
    from ablate.config.checks import OPTIM_RULES
    from ablate.config.model import MODEL_KEYS
    from ablate.optim import OPTIMIZERS

    optim_keys = frozenset(OPTIM_RULES) | {k for kind in OPTIMIZERS.values() for k in kind.keys}
    keys: dict[str, frozenset[str] | None] = {
        "model": MODEL_KEYS,  # the task narrows it (declared): an LM has no encoder, a translation model no n_layers
        "optim": optim_keys | {"fused"},
        "eval": EVAL_KEYS,
        "log": LOG_KEYS,
        "runtime": RUNTIME_KEYS,
        "paths": PATHS_KEYS,
        "logger": frozenset(LOGGERS),
        **{path: None if valid is None else frozenset(valid) for path, valid in declared.items()},
    }
    for path in ("data", "trainer", *(f"callbacks.{name}" for name in (cfg.get("callbacks") or {}))):
        node = OmegaConf.select(cfg, path) if isinstance(cfg, DictConfig) else _select(cfg, path)
        if isinstance(node, Mapping) and node.get("_target_"):
            found = target_keys(str(node["_target_"]))
            keys[path] = None if found is None else found | {"_target_", "_partial_", "_recursive_", "_convert_"}
    return keys


def _select(cfg: Mapping[str, Any], path: str) -> Any:
    node: Any = cfg
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def unknown_key_message(path: str, key: str, valid: Iterable[str]) -> str:
    """``path.key is not a key of path (did you mean ...?); valid keys: ...``; ``path`` "" is the top level."""
    valid = sorted(k for k in valid if not k.startswith("_"))
    prefix = f"{path}." if path else ""
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
    return f"{prefix}{key} is not a key of {path or 'the top level'}{hint}; valid keys: {', '.join(valid)}"


def check_callbacks(cfg: DictConfig) -> None:
    """Every ``callbacks.<name>`` is a callback to build (a node with ``_target_``) or null (dropped):
    ``+callbacks.foo.bar=1`` names no class, and Lightning would fail on the plain dict it becomes."""
    callbacks = cfg.get("callbacks") or {}
    for name in callbacks:
        node = callbacks[name]
        if node is not None and not (isinstance(node, Mapping) and node.get("_target_")):
            listed = ", ".join(sorted(str(n) for n in callbacks if n != name))
            raise ConfigError(
                f"callbacks.{name} is not a callback of this run (it has no _target_, the class to build); "
                f"the callbacks are {listed}. A new one needs +callbacks.{name}._target_=<class>"
            )


def check_config_keys(cfg: DictConfig, declared: Declared) -> None:
    """Refuse the first key that no code reads, naming it and the valid keys of its group
    (``declared``: as for :func:`group_keys`)."""
    check_callbacks(cfg)
    for path, valid in group_keys(cfg, declared).items():
        node = OmegaConf.select(cfg, path) if isinstance(cfg, DictConfig) else _select(cfg, path)
        if valid is None or not isinstance(node, Mapping):
            continue
        for key in node:
            if str(key) not in valid and not (path == "model" and node[key] is None):  # null: unset
                raise ConfigError(unknown_key_message(path, str(key), valid))


def check_config_choices(cfg: DictConfig) -> None:
    """Refuse a ``data`` value outside the choices its class declares (``CONFIG_CHOICES``: key ->
    valid values, e.g. Tiny Shakespeare's ``splits``), naming the key and the choices, before any
    data is read: the class is the one source of its choices, as its signature is of its keys."""
    from hydra.utils import get_object

    node = OmegaConf.select(cfg, "data") if isinstance(cfg, DictConfig) else _select(cfg, "data")
    if not isinstance(node, Mapping) or not node.get("_target_"):
        return
    choices: Mapping[str, tuple[Any, ...]] = getattr(get_object(str(node["_target_"])), "CONFIG_CHOICES", {})
    for key, valid in choices.items():
        if key in node and node[key] not in valid:
            raise ConfigError(f"data.{key}={node[key]!r} is invalid: one of {', '.join(map(str, valid))}")


def check_command_line_config(cfg: DictConfig, declared: Declared) -> None:
    """What ``train.py`` checks of a composed command line before Hydra starts the job
    (:func:`ablate.cli.check_command_line`): every key is one some code reads
    (:func:`check_config_keys`), every value has its type (:func:`ablate.config.types.check_config_types`)
    and every ``data`` value is one its class takes (:func:`check_config_choices`). The ranges of the
    numbers and the architecture are checked in the job (:func:`ablate.run.preflight.check_config`),
    after what the job itself derives from the config."""
    check_config_keys(cfg, declared)
    check_config_types(cfg, declared)
    check_config_choices(cfg)
